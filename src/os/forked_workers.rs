//! The calls of the worker zygote ([`crate::sandbox::zygote`]) and of the workers it forks:
//! descriptors passed over a unix socket, a fork whose copy is the server's child, the copy
//! turned into a worker (its pipes as stdio, its own process group, the parent-death
//! signal), and its name.

/// Sends `payload` with the descriptors `passed` (SCM_RIGHTS) on the unix socket `socket`:
/// how the server hands the zygote ([`crate::sandbox::zygote`]) the pipes of a new worker.
/// rustix builds the control message (safe code, no hand-written CMSG arithmetic).
pub(crate) fn send_with_descriptors(
    socket: std::os::fd::BorrowedFd<'_>,
    payload: &[u8],
    passed: &[std::os::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(passed.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(passed)) {
        return Err(std::io::Error::other(
            "the descriptors do not fit their control message",
        ));
    }
    let payload = [std::io::IoSlice::new(payload)];
    loop {
        match sendmsg(socket, &payload, &mut control, SendFlags::NOSIGNAL) {
            Ok(sent) if sent == payload[0].len() => return Ok(()),
            Ok(_) => return Err(std::io::Error::other("the message was sent in part")),
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// Receives one message of at most `payload.len()` bytes and up to `max_descriptors`
/// descriptors (SCM_RIGHTS, close-on-exec) from the unix socket `socket`: the bytes read (0
/// at the end of the stream) and the descriptors, owned.
pub(crate) fn receive_with_descriptors(
    socket: std::os::fd::BorrowedFd<'_>,
    payload: &mut [u8],
    max_descriptors: usize,
) -> std::io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    let mut space =
        vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(max_descriptors))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut buffer = [std::io::IoSliceMut::new(payload)];
    let message = loop {
        match recvmsg(socket, &mut buffer, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(message) => break message,
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    };
    let mut received = Vec::new();
    for ancillary in control.drain() {
        if let RecvAncillaryMessage::ScmRights(descriptors) = ancillary {
            received.extend(descriptors);
        }
    }
    // The buffer may hold a few more than asked for (rustix pads it for alignment): more than
    // `max_descriptors` is refused all the same, and those received are closed.
    if message.flags.contains(ReturnFlags::CTRUNC) || received.len() > max_descriptors {
        return Err(std::io::Error::other(
            "more descriptors than expected were sent",
        ));
    }
    Ok((message.bytes, received))
}

/// Forks this process so that the copy is a child of this process's *parent* (clone with
/// CLONE_PARENT), not of this one: Ok(None) in the copy, Ok(Some(its pid)) here. The zygote
/// ([`crate::sandbox::zygote`]) forks workers this way so that the server can wait for them,
/// read their resource usage and have the kernel kill them when it dies, exactly as for a
/// worker it started itself.
///
/// Only for a single-threaded process: the raw system call runs none of glibc's fork
/// handlers, which only matter for locks another thread may hold.
pub(crate) fn fork_as_sibling() -> std::io::Result<Option<u32>> {
    // SAFETY: clone without CLONE_VM and without a new stack is fork: the copy continues here
    // on a copy-on-write image of this (single-threaded, as documented) process, so no lock
    // is held by a thread that does not exist there. glibc's cached thread id of the copy's
    // only thread is left stale; glibc reads it only for recursive and error-checking mutex
    // owners (consistent within the copy, as that id stays taken by this live process) and
    // asks the kernel (gettid) when signalling itself.
    let result = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    match result {
        -1 => Err(std::io::Error::last_os_error()),
        0 => Ok(None),
        pid => u32::try_from(pid).map(Some).map_err(std::io::Error::other),
    }
}

/// This process's parent.
pub(crate) fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    let parent = unsafe { libc::getppid() };
    u32::try_from(parent).unwrap_or(0)
}

/// What [`super::apply_in_child`] does for a started worker, for a worker forked by the
/// zygote: `pipes` (stdin, stdout, stderr) become descriptors 0, 1 and 2, and it leads a
/// process group of its own and is SIGKILLed when `parent` (the server) dies. Limits, `oom_score_adj`
/// and the environment are the zygote's, inherited. Descriptors above 2 are closed by
/// [`close_descriptors_above_stderr`] once the caller has dropped the ones it owns.
pub(crate) fn become_forked_worker(
    pipes: [std::os::fd::OwnedFd; 3],
    parent: u32,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    for (target, pipe) in pipes.iter().enumerate() {
        // SAFETY: dup2 onto 0, 1 or 2 only replaces those standard descriptors, which Rust
        // owns as the process's stdio (it never closes them); `pipe` is alive.
        if unsafe { libc::dup2(pipe.as_raw_fd(), target as libc::c_int) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    drop(pipes);
    // SAFETY: setpgid(0, 0) makes this process a group leader; prctl and getppid touch no
    // memory of ours.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    // The server may have died before prctl took effect.
    if parent_pid() != parent {
        return Err(std::io::Error::other(
            "the server exited before the worker started",
        ));
    }
    Ok(())
}

/// Closes every descriptor above stderr: a forked worker inherits nothing but its pipes.
/// Descriptors owned by Rust values must have been dropped before.
pub(crate) fn close_descriptors_above_stderr() -> std::io::Result<()> {
    // SAFETY: close_range only closes descriptors; the caller dropped every value owning one.
    let result = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Names this process (its `comm`, at most 15 bytes: what `ps` and `/proc/PID/stat` show).
pub(crate) fn set_process_name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (truncated to 16 bytes by the kernel)
    // from a pointer that is alive for the call.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_sent_over_a_unix_socket_arrive_usable_and_close_on_exec() {
        use std::io::{Read, Write};
        use std::os::fd::{AsFd, AsRawFd};
        let (sender, receiver) = std::os::unix::net::UnixStream::pair().unwrap();
        let (mut pipe_read, pipe_write) = std::io::pipe().unwrap();
        send_with_descriptors(sender.as_fd(), b"x", &[pipe_write.as_fd()]).unwrap();
        drop(pipe_write);
        let mut payload = [0u8; 1];
        let (read, descriptors) =
            receive_with_descriptors(receiver.as_fd(), &mut payload, 3).unwrap();
        assert_eq!((read, &payload), (1, b"x"));
        let [received] = <[std::os::fd::OwnedFd; 1]>::try_from(descriptors).unwrap();
        let fdinfo =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", received.as_raw_fd())).unwrap();
        let flags = fdinfo
            .lines()
            .find_map(|line| line.strip_prefix("flags:"))
            .map(|flags| u32::from_str_radix(flags.trim(), 8).unwrap())
            .unwrap();
        assert_ne!(flags & libc::O_CLOEXEC as u32, 0, "{fdinfo}");
        let mut received = std::fs::File::from(received);
        received.write_all(b"through the socket").unwrap();
        drop(received);
        let mut text = String::new();
        pipe_read.read_to_string(&mut text).unwrap();
        assert_eq!(text, "through the socket");
        // The sender gone: the end of the stream, no descriptors.
        drop(sender);
        let (read, descriptors) =
            receive_with_descriptors(receiver.as_fd(), &mut payload, 3).unwrap();
        assert_eq!((read, descriptors.len()), (0, 0));
    }

    #[test]
    fn more_descriptors_than_expected_are_an_error_and_none_is_kept_open() {
        use std::os::fd::AsFd;
        let (sender, receiver) = std::os::unix::net::UnixStream::pair().unwrap();
        let pipes: Vec<_> = (0..3).map(|_| std::io::pipe().unwrap()).collect();
        let passed: Vec<_> = pipes.iter().map(|(_, write)| write.as_fd()).collect();
        send_with_descriptors(sender.as_fd(), b"x", &passed).unwrap();
        drop(passed);
        let open_before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        let mut payload = [0u8; 1];
        let refused = receive_with_descriptors(receiver.as_fd(), &mut payload, 1).unwrap_err();
        assert!(
            refused.to_string().contains("more descriptors"),
            "{refused}"
        );
        // The one that fitted was closed with the error (tests run in threads of one process,
        // so others may open descriptors meanwhile: none of ours is left, at most).
        assert!(std::fs::read_dir("/proc/self/fd").unwrap().count() <= open_before + 1);
    }
}
