//! What the running kernel offers the worker sandbox. The sandbox tests assert every
//! mechanism in force, and a mechanism this kernel lacks fails them (it cannot be proven
//! here): Debian 12's own kernel (6.1) has Landlock ABI 2, not the 6 the worker asks for (TCP
//! rules and scoping come with 6.7 and 6.12). On such a kernel
//! [`ALLOW_MISSING_PROTECTIONS`]`=1` lets the suite pass, each test saying on the terminal
//! what it did not check; never in CI (`CI=true`). Shared by the engine and service test
//! binaries (`#[path]`).

use landlock::{Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope, ABI};
use std::io::Write;

/// The environment switch (docs/operations.md, "The test suite") under which protections
/// this kernel lacks are reported instead of failing the tests.
pub const ALLOW_MISSING_PROTECTIONS: &str = "LOTTIE_RENDER_TEST_ALLOW_MISSING_PROTECTIONS";

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

/// The ones of `mechanisms` this kernel offers, which a test must find in force; what it
/// lacks goes to [`missing_protections`].
pub fn offered<'a>(mechanisms: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let (offered, lacking): (Vec<&str>, Vec<&str>) = mechanisms
        .into_iter()
        .partition(|mechanism| offers(mechanism));
    if !lacking.is_empty() {
        missing_protections(&format!(
            "this kernel (Landlock {:?} in full: {}, any Landlock: {}, seccomp: {}) lacks \
             {lacking:?}",
            WORKER_LANDLOCK_ABI,
            landlock_offers(WORKER_LANDLOCK_ABI),
            landlock_offers(ABI::V1),
            seccomp_offered()
        ));
    }
    offered
}

/// Whether the suite may pass without the protections this kernel lacks: the switch is `1`
/// and this is not CI (`CI` is `true` or `1`, as CI services set it and `.ci/run` does).
pub fn missing_protections_allowed() -> bool {
    let ci = matches!(std::env::var("CI").as_deref(), Ok("true" | "1"));
    std::env::var(ALLOW_MISSING_PROTECTIONS).as_deref() == Ok("1") && !ci
}

/// A protection of the worker sandbox that `what` says this kernel lacks, so the test cannot
/// prove it: a failure, unless [`missing_protections_allowed`]; then written to the
/// terminal (stderr itself, not the test's captured output), so that a passing run still
/// says what it did not check.
pub fn missing_protections(what: &str) {
    if missing_protections_allowed() {
        let _ = writeln!(
            std::io::stderr(),
            "\nNOT CHECKED ({ALLOW_MISSING_PROTECTIONS}=1): {what}; the worker sandbox runs \
             without it here and this suite does not prove it\n"
        );
        return;
    }
    panic!(
        "{what}: the worker sandbox cannot be proven on this kernel. Run the suite on Linux \
         6.12 or later with seccomp, or set {ALLOW_MISSING_PROTECTIONS}=1 to pass without \
         these checks (docs/operations.md, \"The test suite\"; never in CI: CI=true)"
    );
}
