//! The worker's half of the sandbox: it confines itself, after reading its job and before it
//! touches caller data, with Landlock (the `landlock` crate, by Landlock's maintainers: which
//! files it may open, no TCP, no signals or abstract sockets outside itself) and the seccomp
//! filter of [`crate::sandbox::seccomp`] (which system calls it may make). Both hold until
//! the process ends and pass to every thread it starts.
//!
//! Each mechanism is applied as far as the running kernel supports it (Landlock's best-effort
//! compatibility); what is in force is returned as a [`Confinement`], which the self-test
//! reports and the server exports. A mechanism the kernel has but that fails to apply is an
//! error: the worker then does not run the job.

use crate::sandbox::seccomp::{self, SeccompError};
use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The newest Landlock ABI this code asks for: V6 adds scoping of signals and abstract unix
/// sockets to the worker itself. Older kernels get what they support.
const LANDLOCK_ABI: ABI = ABI::V6;

/// Files every confined worker may read, whatever its policy: facts about the machine that
/// the libraries read at run time and would otherwise guess differently, and code they load.
/// - `/sys/devices/system/cpu/online`: glibc's processor count (C++'s
///   `hardware_concurrency`, libvpx); refused, it falls back to the affinity mask, which in a
///   container can differ, and with it thread counts and encoder output.
/// - each NUMA node's CPUs ([`numa_cpu_maps`]).
/// - `/dev/urandom`: FFmpeg's random seeds (Matroska segment ids); refused, FFmpeg spins on
///   the clock for entropy instead.
/// - rlottie's image decoder, a plugin it loads (dlopen) only when it first meets an embedded
///   image, long after confinement; refused, images are silently not drawn. Its path is
///   compiled into Debian's librlottie (`/usr/lib/<multiarch>/rlottie/image-loader.so`).
pub(crate) const SYSTEM_READABLE_FILES: &[&str] = &[
    "/sys/devices/system/cpu/online",
    "/dev/urandom",
    RLOTTIE_IMAGE_LOADER,
];

/// Where the kernel lists NUMA nodes (`node0`, `node1`, …).
const NUMA_NODES: &str = "/sys/devices/system/node";

/// The CPUs of each NUMA node (`/sys/devices/system/node/nodeN/cpumap`), which libnuma reads
/// when x265 opens an encoder, after confinement, to size its thread pool; refused, x265
/// counted no CPUs and encoded HEVC on one thread (the bouncy ball took 1.09 s on a spare
/// where the same work took 0.61 s in-process, with the same CPU time). Only these files:
/// libnuma's listing of the nodes and their `meminfo` happen when it loads, before
/// confinement (strace), and a node's `meminfo`, `numastat` or `vmstat` would tell a
/// worker how the host's memory is used. Listed before confining; none without NUMA in sysfs.
fn numa_cpu_maps() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(NUMA_NODES) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("node").is_some_and(|number| {
                !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
            })
        })
        .map(|entry| entry.path().join("cpumap"))
        .collect()
}

/// Where Debian's librlottie loads its image decoder from.
#[cfg(target_arch = "x86_64")]
pub(crate) const RLOTTIE_IMAGE_LOADER: &str = "/usr/lib/x86_64-linux-gnu/rlottie/image-loader.so";
#[cfg(target_arch = "aarch64")]
pub(crate) const RLOTTIE_IMAGE_LOADER: &str = "/usr/lib/aarch64-linux-gnu/rlottie/image-loader.so";
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) const RLOTTIE_IMAGE_LOADER: &str = "/usr/lib/rlottie/image-loader.so";

/// What a worker may open once confined (besides [`SYSTEM_READABLE_FILES`]); everything
/// else on the file system is refused (EACCES), including directories, devices and /proc.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FilePolicy {
    /// Files it may read.
    pub readable: Vec<PathBuf>,
    /// Existing files it may read, write and truncate (create them before confining: a
    /// confined worker cannot create files). A path that cannot be opened when confining is
    /// left out of the policy, so stays refused.
    pub writable: Vec<PathBuf>,
}

impl FilePolicy {
    /// No file at all: for workers that read everything from stdin and write only stdout.
    pub(crate) fn nothing() -> FilePolicy {
        FilePolicy::default()
    }
}

/// How far Landlock is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandlockState {
    /// Every restriction asked for is in force.
    Full,
    /// The kernel supports an older ABI: files are fenced, some newer rights are not.
    Partial,
    /// The kernel has no Landlock (or it is disabled).
    None,
}

/// What is in force after [`confine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confinement {
    pub landlock: LandlockState,
    pub seccomp: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfineError {
    #[error("confine must run before any other thread starts ({0} threads are running)")]
    ThreadsRunning(usize),
    #[error("cannot apply landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
}

/// Confines this process to `policy`: Landlock for files, TCP and scoping, then seccomp.
/// Must run while the process has a single thread (Landlock restricts the calling thread
/// and the threads it starts later).
pub(crate) fn confine(policy: &FilePolicy) -> Result<Confinement, ConfineError> {
    let threads = thread_count();
    if threads > 1 {
        return Err(ConfineError::ThreadsRunning(threads));
    }
    let landlock = restrict_files(policy)?;
    let seccomp = match seccomp::build(std::process::id()) {
        Ok(filters) => match seccomp::install(&filters) {
            Ok(()) => true,
            // EINVAL from the seccomp call itself: a kernel built without filter support.
            Err(SeccompError::Install(seccompiler::Error::Seccomp(error)))
                if error.raw_os_error() == Some(libc::EINVAL) =>
            {
                false
            }
            Err(error) => return Err(error.into()),
        },
        // No filter for this architecture: run with the rest.
        Err(SeccompError::Architecture(_)) => false,
        Err(error) => return Err(error.into()),
    };
    Ok(Confinement { landlock, seccomp })
}

fn restrict_files(policy: &FilePolicy) -> Result<LandlockState, landlock::RulesetError> {
    let read = AccessFs::ReadFile;
    let read_write = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))?
        .handle_access(AccessNet::from_all(LANDLOCK_ABI))?
        .scope(Scope::from_all(LANDLOCK_ABI))?
        .create()?
        .add_rules(path_beneath_rules(SYSTEM_READABLE_FILES, read))?
        .add_rules(path_beneath_rules(numa_cpu_maps(), read))?
        .add_rules(path_beneath_rules(&policy.readable, read))?
        .add_rules(path_beneath_rules(&policy.writable, read_write))?
        .restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => LandlockState::Full,
        RulesetStatus::PartiallyEnforced => LandlockState::Partial,
        RulesetStatus::NotEnforced => LandlockState::None,
    })
}

/// Threads of this process (1 when /proc cannot tell).
/// Threads of this process now.
pub(crate) fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(1, |entries| entries.count())
}
