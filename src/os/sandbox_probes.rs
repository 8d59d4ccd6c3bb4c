//! The raw calls the sandbox self-test ([`crate::sandbox::self_test`]) makes to prove a
//! worker cannot do them: fork, raise its address-space limit, signal another process, keep
//! an inheritable descriptor.

/// Tries to fork (the sandbox self-test proves a worker cannot). A child that comes into being
/// exits at once and is reaped; Ok means the fork worked.
pub(crate) fn try_fork() -> std::io::Result<()> {
    // SAFETY: fork has no preconditions here; the child calls only _exit (async-signal-safe)
    // and touches no memory of ours; the parent reaps it with waitpid on its own stack.
    unsafe {
        match libc::fork() {
            -1 => Err(std::io::Error::last_os_error()),
            0 => libc::_exit(0),
            child => {
                let mut status = 0;
                libc::waitpid(child, &mut status, 0);
                Ok(())
            }
        }
    }
}

/// Tries to raise this process's hard address-space limit by one page (the sandbox self-test
/// proves a worker cannot: running as root, it could otherwise lift its memory budget).
pub(crate) fn try_raise_address_space_limit() -> std::io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes into the struct on our stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_max == libc::RLIM_INFINITY {
        return Err(std::io::Error::other(
            "there is no address-space limit to raise",
        ));
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_cur,
        rlim_max: limit.rlim_max.saturating_add(4096),
    };
    // SAFETY: setrlimit only reads the struct on our stack.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &raised) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Asks the kernel whether this process may signal `process` (signal 0: nothing is
/// delivered, only the permission check runs). The sandbox self-test proves a worker may not
/// signal its parent.
pub(crate) fn may_signal(process: u32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(process).map_err(std::io::Error::other)?;
    // SAFETY: kill with signal 0 delivers nothing and touches no memory of ours.
    if unsafe { libc::kill(pid, 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A duplicate of `descriptor` without close-on-exec, so it would be inherited by any child
/// exec'd while it is open. The sandbox self-test plants one to prove workers inherit no
/// descriptor beyond their pipes.
pub(crate) fn inheritable_duplicate(
    descriptor: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: dup only reads a live descriptor (the borrow keeps it open) and returns a new
    // one (without FD_CLOEXEC, which dup never sets) or -1.
    let duplicate = unsafe { libc::dup(descriptor.as_raw_fd()) };
    if duplicate < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `duplicate` is a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(duplicate) })
}
