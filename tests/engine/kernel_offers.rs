//! What the running kernel offers the worker sandbox, so that the sandbox tests assert every
//! mechanism it offers and only print the ones it lacks: Debian 12's own kernel (6.1) has
//! Landlock ABI 2, not the 6 the worker asks for (TCP rules and scoping come with 6.7 and
//! 6.12). Shared by the engine and api test binaries (`#[path]`).

use landlock::{Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope, ABI};

/// The Landlock ABI the worker asks for (`sandbox::confine`: V6, scoping of signals and
/// abstract unix sockets); a kernel below it enforces Landlock partially.
pub const WORKER_LANDLOCK_ABI: ABI = ABI::V6;

/// Whether the kernel enforces everything Landlock `abi` can restrict: a ruleset asking for
/// all of it as a hard requirement is created (and dropped, never applied to this process).
pub fn landlock_offers(abi: ABI) -> bool {
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi));
    let ruleset = if abi >= ABI::V6 {
        ruleset.and_then(|ruleset| ruleset.scope(Scope::from_all(abi)))
    } else {
        ruleset
    };
    ruleset.and_then(|ruleset| ruleset.create()).is_ok()
}

/// Whether the kernel has seccomp system-call filters (its `Seccomp:` status line).
pub fn seccomp_offered() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|status| status.lines().any(|line| line.starts_with("Seccomp:")))
}

/// Whether this kernel offers `mechanism` (a label of `sandbox_protection`), from what
/// enforces each: the seccomp filter refuses sockets, new processes, programs, signals to
/// others, raised limits and chmod; Landlock (any ABI) fences files, and from ABI 6 scopes
/// signals. The environment, descriptors and OOM score are the parent's doing.
pub fn offers(mechanism: &str) -> bool {
    let seccomp = seccomp_offered();
    match mechanism {
        "landlock" => landlock_offers(WORKER_LANDLOCK_ABI),
        "seccomp" | "network" | "processes" | "resource_limits" => seccomp,
        "filesystem" => landlock_offers(ABI::V1) && seccomp,
        "signals" => seccomp || landlock_offers(WORKER_LANDLOCK_ABI),
        "environment" | "descriptors" | "oom_score_adj" => true,
        other => panic!("a sandbox mechanism this table does not know: {other}"),
    }
}

/// Prints what this kernel lacks of `mechanisms` (and its Landlock ABI); answers the ones it
/// offers, which a test must find in force.
pub fn offered<'a>(mechanisms: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let (offered, lacking): (Vec<&str>, Vec<&str>) = mechanisms
        .into_iter()
        .partition(|mechanism| offers(mechanism));
    if !lacking.is_empty() {
        println!(
            "this kernel (Landlock {:?} in full: {}, any Landlock: {}, seccomp: {}) lacks, so \
             not asserted: {lacking:?}",
            WORKER_LANDLOCK_ABI,
            landlock_offers(WORKER_LANDLOCK_ABI),
            landlock_offers(ABI::V1),
            seccomp_offered()
        );
    }
    offered
}
