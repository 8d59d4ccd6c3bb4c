//! The worker's system-call filter (seccomp, compiled by `seccompiler`): a deny list of what
//! no render needs and an attacker inside rlottie would want: sockets of every family, new
//! processes and programs, other processes' memory, signals to other processes, mounts and
//! namespaces, kernel modules and keys, BPF, perf, raising resource limits, and the file
//! metadata Landlock does not cover (modes, owners, extended attributes). A denied call fails
//! with EPERM (ENOSYS for clone3, so glibc falls back to clone, which is then checked), never
//! a kill: rlottie and FFmpeg see an ordinary error and the worker reports it.
//!
//! Threads stay allowed (clone with CLONE_THREAD): rendering and encoding are multi-threaded.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub(crate) enum SeccompError {
    #[error("seccomp has no filter for this architecture ({0})")]
    Architecture(String),
    #[error("cannot build the seccomp filter: {0}")]
    Build(String),
    #[error("cannot install the seccomp filter: {0}")]
    Install(#[from] seccompiler::Error),
}

/// Calls refused outright (with EPERM) on every architecture.
const DENIED: &[libc::c_long] = &[
    // Networking: no socket of any family, so no connection to Redis, the metadata service
    // or another local service, and no exfiltration.
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept,
    libc::SYS_accept4,
    // New programs.
    libc::SYS_execve,
    libc::SYS_execveat,
    // Other processes: their memory, descriptors and signals.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_getfd,
    libc::SYS_pidfd_send_signal,
    libc::SYS_tkill,
    // io_uring can open sockets and files without passing through the filter.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Mounts, namespaces, root changes.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    // Opening by file handle bypasses path checks (and needs only CAP_DAC_READ_SEARCH).
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    // The kernel itself.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_fanotify_init,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    // Raising limits (root may raise hard limits).
    libc::SYS_setrlimit,
    // File metadata, which Landlock does not govern: a worker running as root could
    // otherwise make any file world-writable or hand it to another user.
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_mknodat,
];

/// Calls refused outright that exist only on x86_64 (newer architectures have only the
/// `*at` forms above).
#[cfg(target_arch = "x86_64")]
const DENIED_X86_64: &[libc::c_long] = &[
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_mknod,
    libc::SYS_uselib,
    libc::SYS_iopl,
    libc::SYS_ioperm,
];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_X86_64: &[libc::c_long] = &[];

/// The compiled filters: the EPERM deny list, the ENOSYS one (clone3, whose flags live in
/// memory a filter cannot read) and, on x86_64, the x32 fence. Installing them is
/// [`install`].
pub(crate) struct Filters {
    denied: BpfProgram,
    unimplemented: BpfProgram,
    x32: Option<BpfProgram>,
}

/// Refuses (EPERM) every call made through the x32 ABI, which reaches an x86_64 kernel with
/// bit 30 set in the call number and its own numbers for some calls (execve is 520 there), so
/// the deny list above would not see them. No render uses x32. Hand-written because
/// seccompiler matches single call numbers and cannot express "every number from 2^30 up";
/// six instructions of classic BPF.
#[cfg(target_arch = "x86_64")]
fn x32_fence() -> BpfProgram {
    use seccompiler::sock_filter;
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    // struct seccomp_data: nr at offset 0, arch at offset 4.
    const NR_OFFSET: u32 = 0;
    const ARCH_OFFSET: u32 = 4;
    let statement = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u32, k: u32, jt: u8, jf: u8| sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    vec![
        statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, ARCH_OFFSET),
        // Another architecture: the deny-list filter (which checks it) decides.
        jump(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            AUDIT_ARCH_X86_64,
            0,
            3,
        ),
        statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, NR_OFFSET),
        jump(
            libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
            X32_SYSCALL_BIT,
            0,
            1,
        ),
        statement(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        statement(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// A condition on argument `argument`, compared as `width` (Dword for an `int`, as the kernel
/// reads a pid or flags word; Qword for a pointer, whose high half matters).
fn condition(
    argument: u8,
    width: SeccompCmpArgLen,
    operator: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(argument, width, operator, value)
        .map_err(|error| SeccompError::Build(error.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(|error| SeccompError::Build(error.to_string()))
}

/// Builds the filters for this process (`own_pid` is the only process it may signal).
pub(crate) fn build(own_pid: u32) -> Result<Filters, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| SeccompError::Architecture(std::env::consts::ARCH.to_owned()))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &call in DENIED.iter().chain(DENIED_X86_64) {
        rules.insert(call, Vec::new());
    }
    // New processes: clone without CLONE_THREAD (fork, vfork, posix_spawn). Threads pass.
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![condition(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
            0,
        )?])?],
    );
    // Signals only to itself: kill and tgkill naming any other process (or a group, or
    // every process with -1) are refused; abort() and raise() use this process's own id.
    let own = u64::from(own_pid);
    for signal_call in [libc::SYS_kill, libc::SYS_tgkill] {
        rules.insert(
            signal_call,
            vec![rule(vec![condition(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                own,
            )?])?],
        );
    }
    // prlimit64 may read limits (glibc's getrlimit uses it with no new limit), but neither
    // set one nor touch another process.
    rules.insert(
        libc::SYS_prlimit64,
        vec![
            rule(vec![condition(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                0,
            )?])?,
            rule(vec![condition(
                2,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::Ne,
                0,
            )?])?,
        ],
    );
    let errno = |code: i32| SeccompAction::Errno(code as u32);
    let denied = SeccompFilter::new(rules, SeccompAction::Allow, errno(libc::EPERM), arch)
        .and_then(BpfProgram::try_from)
        .map_err(|error| SeccompError::Build(error.to_string()))?;
    let unimplemented = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        errno(libc::ENOSYS),
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|error| SeccompError::Build(error.to_string()))?;
    #[cfg(target_arch = "x86_64")]
    let x32 = Some(x32_fence());
    #[cfg(not(target_arch = "x86_64"))]
    let x32 = None;
    Ok(Filters {
        denied,
        unimplemented,
        x32,
    })
}

/// Installs `filters` on every thread of this process (and sets no_new_privs); they hold for
/// the rest of its life and are inherited by every thread it starts.
pub(crate) fn install(filters: &Filters) -> Result<(), SeccompError> {
    if let Some(x32) = &filters.x32 {
        seccompiler::apply_filter_all_threads(x32)?;
    }
    seccompiler::apply_filter_all_threads(&filters.unimplemented)?;
    seccompiler::apply_filter_all_threads(&filters.denied)?;
    Ok(())
}
