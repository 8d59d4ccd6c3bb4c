//! The crate's only unsafe code, all of it thin calls into C: resource limits, the
//! parent-death signal, the OOM killer's preference and closing inherited descriptors, applied
//! in a forked child before exec; killing a process group, reaping a child with its resource
//! usage, this process's own usage and the calling thread's CPU time, ending a worker without
//! its libraries' finalizers, thread priority, the one FFmpeg call its safe wrapper lacks
//! (making a frame writable before reuse), and the few raw calls the sandbox self-test makes
//! to prove a worker cannot do them (fork, signalling another process, an inheritable
//! descriptor).

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// Per-worker resource limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceLimits {
    /// Address space, bytes (RLIMIT_AS).
    pub address_space_bytes: u64,
    /// CPU time, seconds (RLIMIT_CPU): SIGXCPU past it.
    pub cpu_seconds: u64,
    /// Largest file the worker may write, bytes (RLIMIT_FSIZE).
    pub file_size_bytes: u64,
    /// Open file descriptors (RLIMIT_NOFILE).
    pub open_files: u64,
    /// Processes and threads of the worker's user (RLIMIT_NPROC). Not enforced for root,
    /// which is why the worker's seccomp filter also refuses new processes.
    pub processes: u64,
}

/// `oom_score_adj` of a worker: the most the kernel's OOM killer can prefer a process, so
/// under memory pressure it takes a worker (one job, retried) before the server (every job).
pub const WORKER_OOM_SCORE_ADJ: i32 = 1000;
/// [`WORKER_OOM_SCORE_ADJ`] as written to `/proc/self/oom_score_adj` between fork and exec,
/// where formatting a number (it allocates) is not allowed.
const WORKER_OOM_SCORE_ADJ_TEXT: &[u8] = b"1000";

/// Applies `limits`, disables core dumps, asks the kernel to SIGKILL the worker if its
/// parent dies (so no worker outlives the process that started it), makes the worker the
/// OOM killer's first choice ([`WORKER_OOM_SCORE_ADJ`]) and marks every descriptor above
/// stderr close-on-exec, so the worker inherits nothing but its three pipes whatever the
/// parent (or a C library in it) left open without `O_CLOEXEC`.
pub fn apply_in_child(command: &mut Command, limits: ResourceLimits) {
    let ResourceLimits {
        address_space_bytes,
        cpu_seconds,
        file_size_bytes,
        open_files,
        processes,
    } = limits;
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (setrlimit, prctl, getppid, open, write, close, syscall(close_range)) on
    // values copied into it or on static C strings; it allocates nothing on the success path.
    // close_range only sets FD_CLOEXEC (it closes nothing), so the pipe std uses to report an
    // exec failure, itself close-on-exec already, keeps working until exec.
    unsafe {
        command.pre_exec(move || {
            let set = |resource, value: u64| {
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            set(libc::RLIMIT_AS, address_space_bytes)?;
            // Soft limit sends SIGXCPU; the hard limit one second later SIGKILL.
            let cpu = libc::rlimit {
                rlim_cur: cpu_seconds,
                rlim_max: cpu_seconds + 1,
            };
            if libc::setrlimit(libc::RLIMIT_CPU, &cpu) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            set(libc::RLIMIT_FSIZE, file_size_bytes)?;
            set(libc::RLIMIT_NOFILE, open_files)?;
            set(libc::RLIMIT_CORE, 0)?;
            set(libc::RLIMIT_NPROC, processes)?;
            // Best effort, like every mechanism the kernel may lack (Linux < 5.11 has no
            // CLOSE_RANGE_CLOEXEC): the self-test reports what is in force.
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
            );
            let oom_score_adj = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if oom_score_adj >= 0 {
                libc::write(
                    oom_score_adj,
                    WORKER_OOM_SCORE_ADJ_TEXT.as_ptr().cast(),
                    WORKER_OOM_SCORE_ADJ_TEXT.len(),
                );
                libc::close(oom_score_adj);
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
            // The parent may have died before prctl took effect.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::other(
                    "parent exited before the worker started",
                ));
            }
            Ok(())
        });
    }
}

/// Gives process `pid` (a child of ours, same user) `cpu_seconds` of CPU time from now: its
/// RLIMIT_CPU becomes what it has used so far, rounded up to a whole second, plus
/// `cpu_seconds` (soft limit: SIGXCPU; hard limit one second later: SIGKILL), as
/// [`apply_in_child`] sets it for a process started with its job. For a worker started ahead
/// of its job, so that its budget counts the job and not the wait. Only ever lowers the
/// limit the process was started with (raising a hard limit needs privilege).
pub fn limit_cpu_from_now(pid: u32, cpu_seconds: u64) -> std::io::Result<()> {
    let used = cpu_time_of(pid)?;
    let soft = used
        .as_secs()
        .saturating_add(u64::from(used.subsec_nanos() > 0))
        .saturating_add(cpu_seconds);
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: soft.saturating_add(1),
    };
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    // SAFETY: prlimit reads the limit from our stack and writes nothing (null old value).
    if unsafe { libc::prlimit(pid, libc::RLIMIT_CPU, &limit, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// User + system CPU time of process `pid` so far, from `/proc/PID/stat`.
pub fn cpu_time_of(pid: u32) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    cpu_time_of_stat(&stat, clock_ticks_per_second())
        .ok_or_else(|| std::io::Error::other(format!("cannot read /proc/{pid}/stat")))
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line; the command name (field 2,
/// in parentheses) may hold spaces and parentheses, so fields are counted after its last `)`.
fn cpu_time_of_stat(stat: &str, ticks_per_second: u64) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    let ticks = user.checked_add(system)?;
    let per_second = ticks_per_second.max(1);
    Some(
        Duration::from_secs(ticks / per_second)
            + Duration::from_nanos((ticks % per_second) * 1_000_000_000 / per_second),
    )
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// Sends SIGKILL to a whole process group.
pub fn kill_process_group(process_group: u32) {
    let Ok(pgid) = libc::pid_t::try_from(process_group) else {
        return;
    };
    // SAFETY: kill(2) with a negative pid signals the group; it touches no memory of ours.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// CPU time and peak memory of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResourceUsage {
    /// User + system CPU time.
    pub cpu: Duration,
    /// Peak resident set size, bytes.
    pub max_rss_bytes: u64,
}

impl ResourceUsage {
    fn from_rusage(usage: &libc::rusage) -> ResourceUsage {
        let seconds = |time: libc::timeval| {
            Duration::from_secs(time.tv_sec.max(0) as u64)
                + Duration::from_micros(time.tv_usec.max(0) as u64)
        };
        ResourceUsage {
            cpu: seconds(usage.ru_utime) + seconds(usage.ru_stime),
            // Linux reports ru_maxrss in KiB.
            max_rss_bytes: usage.ru_maxrss.max(0) as u64 * 1024,
        }
    }
}

/// Waits for process `pid` (a child of this process) to exit and returns its status with its
/// own resource usage (`Child::wait` discards the usage the kernel reports).
pub fn wait_with_usage(pid: u32) -> std::io::Result<(ExitStatus, ResourceUsage)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 writes only into the two out-parameters, which live on our stack.
        let result = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if result == pid {
            return Ok((
                ExitStatus::from_raw(status),
                ResourceUsage::from_rusage(&usage),
            ));
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Whether process `pid` (a child of this process) has exited, reaping it if so; an error
/// (it is not our child, or no longer exists) counts as exited.
pub fn has_exited(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes only into `status` on our stack.
    let result = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    result != 0
}

/// CPU time and peak RSS of this process so far (all threads).
pub fn own_usage() -> ResourceUsage {
    // SAFETY: as above, a zeroed rusage is valid and getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out-pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    ResourceUsage::from_rusage(&usage)
}

/// CPU time the calling thread has used (user + system), from
/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`: what the expression engine's CPU cap measures,
/// unaffected by other threads or by time spent waiting. Zero if the clock cannot be read.
pub fn current_thread_cpu_time() -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec on our stack.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

/// Peak resident set size of this process image, bytes: `VmHWM` from /proc/self/status.
/// Unlike `ru_maxrss` it starts afresh at exec, so a worker forked from a large parent
/// reports only its own memory.
pub fn own_peak_rss_bytes() -> Option<u64> {
    peak_rss_of_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn peak_rss_of_status(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `/proc/self/status`, opened once so that [`own_peak_rss_bytes`] can still be read after
/// the worker has confined itself (Landlock then refuses to open it again; procfs renders
/// the file anew on every read from the start of an open descriptor).
#[derive(Debug)]
pub struct PeakRssProbe(std::fs::File);

impl PeakRssProbe {
    pub fn open() -> Option<PeakRssProbe> {
        std::fs::File::open("/proc/self/status")
            .ok()
            .map(PeakRssProbe)
    }

    /// Peak resident set size so far, bytes.
    pub fn read(&mut self) -> Option<u64> {
        use std::io::{Read, Seek};
        self.0.rewind().ok()?;
        let mut status = String::new();
        self.0.read_to_string(&mut status).ok()?;
        peak_rss_of_status(&status)
    }
}

/// Lowers the scheduling priority of the calling thread by `increment` nice steps. Render
/// threads use it so that the encoder, the pipeline's critical path, gets the CPU first and
/// rendering fills whatever is left.
pub fn lower_current_thread_priority(increment: i32) {
    // SAFETY: gettid has no preconditions; getpriority/setpriority on our own thread id only
    // change a scheduling attribute and touch no memory.
    unsafe {
        let thread = libc::gettid() as libc::id_t;
        let current = libc::getpriority(libc::PRIO_PROCESS, thread);
        // Failure (e.g. a restrictive seccomp profile) only loses the optimisation.
        let _ = libc::setpriority(libc::PRIO_PROCESS, thread, (current + increment).min(19));
    }
}

/// Whether `frame`'s buffers are referenced by nothing else (FFmpeg's `av_frame_is_writable`):
/// an encoder may still hold a reference to a frame it was sent, and a held frame shares its
/// buffers with the one before ([`new_frame_reference`]), so a frame is overwritten only when
/// this is true.
pub fn frame_is_writable(frame: &mut ffmpeg_next::frame::Video) -> bool {
    // SAFETY: the pointer comes from a live, owned frame; av_frame_is_writable only reads the
    // reference counts of its buffers.
    unsafe { ffmpeg_next::sys::av_frame_is_writable(frame.as_mut_ptr()) > 0 }
}

/// A second frame sharing `frame`'s buffers (FFmpeg's `av_frame_ref`, reference counted, no
/// copy); `None` when FFmpeg cannot allocate the new frame or `frame` has no buffers.
pub fn new_frame_reference(frame: &ffmpeg_next::frame::Video) -> Option<ffmpeg_next::frame::Video> {
    let mut reference = ffmpeg_next::frame::Video::empty();
    // SAFETY: both pointers come from live frames we own (a null one, from a failed
    // av_frame_alloc, is refused first); `reference` is freshly allocated with no buffers, as
    // av_frame_ref requires of its destination, and av_frame_ref only adds references to
    // `frame`'s buffers, reading `frame` without changing it.
    unsafe {
        if reference.as_ptr().is_null() || frame.is_empty() {
            return None;
        }
        (ffmpeg_next::sys::av_frame_ref(reference.as_mut_ptr(), frame.as_ptr()) >= 0)
            .then_some(reference)
    }
}

/// Every plane of `frame` as its bytes (`stride × rows` of that plane) and its stride, all
/// borrowed at once (ffmpeg-next lends one plane at a time), for a conversion that writes all
/// planes in one pass.
pub fn frame_planes_mut(frame: &mut ffmpeg_next::frame::Video) -> Vec<(&mut [u8], usize)> {
    (0..frame.planes())
        .map(|index| {
            let stride = frame.stride(index);
            let data = frame.data_mut(index);
            let (pointer, length) = (data.as_mut_ptr(), data.len());
            // SAFETY: FFmpeg's planes of one frame never overlap (separate buffers, or disjoint
            // parts of one buffer, laid out by av_frame_get_buffer), each slice covers exactly
            // what `data_mut` lent for that plane, and all of them borrow `frame` mutably for
            // their whole life, so nothing else can reach these bytes meanwhile.
            let plane = unsafe { std::slice::from_raw_parts_mut(pointer, length) };
            (plane, stride)
        })
        .collect()
}

/// Sets the colour description fields ffmpeg-next has no encoder setters for (primaries,
/// transfer characteristics, chroma location); the encoder copies them into its bitstream
/// headers when it opens and `Stream::set_parameters` into the container.
pub fn set_encoder_colour_description(
    encoder: &mut ffmpeg_next::encoder::video::Video,
    primaries: ffmpeg_next::color::Primaries,
    transfer: ffmpeg_next::color::TransferCharacteristic,
    chroma_location: ffmpeg_next::chroma::Location,
) {
    // SAFETY: the pointer is the live codec context this encoder owns (not yet opened); these
    // are plain enum fields of it, written with valid values of their C enums.
    unsafe {
        let context = encoder.as_mut_ptr();
        (*context).color_primaries = primaries.into();
        (*context).color_trc = transfer.into();
        (*context).chroma_sample_location = chroma_location.into();
    }
}

/// Hands memory this process has freed back to the kernel (glibc's `malloc_trim`). glibc keeps
/// freed small allocations in the arena of the thread that made them; after a parse of
/// hundreds of megabytes of small JSON values on a blocking thread, that memory would stay
/// resident in that thread's arena, so parses spread over several threads would add up in
/// RSS even though at most two run at once.
pub fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own heaps and returns unused pages; it has no
    // preconditions and touches no memory of ours.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Ends this process at once with `code`: no atexit handlers and no destructors of the
/// shared libraries. A worker whose output is written and closed and whose last event is
/// flushed has nothing left to tidy, and running the finalizers of its ~140 libraries (each
/// a first touch of code pages) cost about a millisecond on the job's path before its
/// parent saw it end.
pub fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit only asks the kernel to end the process; it reads and writes no memory
    // of ours, and nothing runs after it.
    unsafe { libc::_exit(code) }
}

/// Bytes an unprivileged process may still write on the file system holding `path`
/// (statvfs: available blocks × fragment size).
pub fn available_disk_bytes(path: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and statvfs writes
    // only into `stats`, which lives on our stack.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The field types differ between platforms (u32 or u64).
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let (blocks, block_size) = (stats.f_bavail as u64, stats.f_frsize as u64);
    Ok(blocks.saturating_mul(block_size))
}

/// Tries to fork (the sandbox self-test proves a worker cannot). A child that comes into being
/// exits at once and is reaped; Ok means the fork worked.
pub fn try_fork() -> std::io::Result<()> {
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
pub fn try_raise_address_space_limit() -> std::io::Result<()> {
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
pub fn may_signal(process: u32) -> std::io::Result<()> {
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
pub fn inheritable_duplicate(
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

/// Sends `payload` with the descriptors `passed` (SCM_RIGHTS) on the unix socket `socket`:
/// how the server hands the zygote ([`crate::sandbox::zygote`]) the pipes of a new worker.
/// rustix builds the control message (safe code, no hand-written CMSG arithmetic).
pub fn send_with_descriptors(
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
pub fn receive_with_descriptors(
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
pub fn fork_as_sibling() -> std::io::Result<Option<u32>> {
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
pub fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    let parent = unsafe { libc::getppid() };
    u32::try_from(parent).unwrap_or(0)
}

/// What [`apply_in_child`] does for a started worker, for a worker forked by the zygote:
/// `pipes` (stdin, stdout, stderr) become descriptors 0, 1 and 2, and it leads a process
/// group of its own and is SIGKILLed when `parent` (the server) dies. Limits, `oom_score_adj`
/// and the environment are the zygote's, inherited. Descriptors above 2 are closed by
/// [`close_descriptors_above_stderr`] once the caller has dropped the ones it owns.
pub fn become_forked_worker(pipes: [std::os::fd::OwnedFd; 3], parent: u32) -> std::io::Result<()> {
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
pub fn close_descriptors_above_stderr() -> std::io::Result<()> {
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
pub fn set_process_name(name: &std::ffi::CStr) {
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

    #[test]
    fn the_oom_score_written_before_exec_is_the_named_one() {
        assert_eq!(
            WORKER_OOM_SCORE_ADJ.to_string().as_bytes(),
            WORKER_OOM_SCORE_ADJ_TEXT
        );
    }

    #[test]
    fn the_peak_rss_probe_reads_again_from_an_open_descriptor() {
        let mut probe = PeakRssProbe::open().unwrap();
        let first = probe.read().unwrap();
        let second = probe.read().unwrap();
        assert!(first > 0 && second >= first, "{first} then {second}");
    }

    #[test]
    fn cpu_time_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194304 100 0 0 0 250 130 0 0 20 0 1 0";
        assert_eq!(
            cpu_time_of_stat(stat, 100),
            Some(Duration::from_millis(3800))
        );
        assert_eq!(cpu_time_of_stat("42 (x) S 1", 100), None);
        assert_eq!(cpu_time_of_stat("no name at all", 100), None);
    }

    #[test]
    fn a_child_given_cpu_seconds_from_now_has_its_limit_lowered_to_them() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep is installed");
        limit_cpu_from_now(child.id(), 7).unwrap();
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let line = limits
            .lines()
            .find(|line| line.starts_with("Max cpu time"))
            .unwrap();
        let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
        // A fresh sleep has used under a second: 0 or 1 (rounded up) plus 7.
        assert!(numbers == ["7", "8"] || numbers == ["8", "9"], "{line}");
    }
}
