//! The crate's only unsafe code, all of it thin calls into C. Here: resource limits (a
//! worker's, and this process's open files limit), the parent-death signal, the OOM killer's preference and closing inherited descriptors, applied
//! in a forked child before exec; killing a process group, reaping a child with its resource
//! usage, this process's own usage and the calling thread's CPU time, ending a worker without
//! its libraries' finalizers, thread priority, returning freed memory and free disk space.
//! Apart: the FFmpeg frame calls its safe wrapper lacks (`ffmpeg_frames`), the worker
//! zygote's calls (descriptor passing, forking a sibling, `forked_workers`) and the few raw
//! calls the sandbox self-test makes to prove a worker cannot do them (fork, signalling
//! another process, an inheritable descriptor: `sandbox_probes`).

pub(crate) mod ffmpeg_frames;
pub(crate) mod forked_workers;
pub(crate) mod sandbox_probes;

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
pub(crate) const WORKER_OOM_SCORE_ADJ: i32 = 1000;
/// [`WORKER_OOM_SCORE_ADJ`] as written to `/proc/self/oom_score_adj` between fork and exec,
/// where formatting a number (it allocates) is not allowed.
const WORKER_OOM_SCORE_ADJ_TEXT: &[u8] = b"1000";

/// Applies `limits`, disables core dumps, asks the kernel to SIGKILL the worker if its
/// parent dies (so no worker outlives the process that started it), makes the worker the
/// OOM killer's first choice ([`WORKER_OOM_SCORE_ADJ`]) and marks every descriptor above
/// stderr close-on-exec, so the worker inherits nothing but its three pipes whatever the
/// parent (or a C library in it) left open without `O_CLOEXEC`.
pub(crate) fn apply_in_child(command: &mut Command, limits: ResourceLimits) {
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
pub(crate) fn limit_cpu_from_now(pid: u32, cpu_seconds: u64) -> std::io::Result<()> {
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

/// A process's limit of open file descriptors (RLIMIT_NOFILE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenFilesLimit {
    /// The limit in force.
    pub(crate) soft: u64,
    /// The most the soft limit may be raised to without privilege.
    pub(crate) hard: u64,
}

/// This process's open files limit.
pub(crate) fn open_files_limit() -> std::io::Result<OpenFilesLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the rlimit, which lives on our stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OpenFilesLimit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// Sets this process's soft open files limit to `soft` (at most its hard limit), keeping the
/// hard limit. Workers are not affected: each is given its own limit before exec.
pub(crate) fn set_open_files_soft_limit(soft: u64) -> std::io::Result<()> {
    let hard = open_files_limit()?.hard;
    let limit = libc::rlimit {
        rlim_cur: soft.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the rlimit, which lives on our stack.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Address space one glibc malloc arena reserves when it is made (HEAP_MAX_SIZE on 64-bit
/// Linux: twice the largest mmap threshold), touched only as it is used.
const MALLOC_ARENA_RESERVE_BYTES: u64 = 64 << 20;

/// The part of an address-space limit (RLIMIT_AS) glibc's malloc arenas may reserve
/// together, as a divisor: an eighth. glibc makes up to eight arenas a core as threads
/// contend, 64 MiB of address space each: an idle server on 2 cores had reserved 512 MiB
/// that way, so under a 1 GiB limit (a container's memory limit) the requests' own buffers
/// found no room (four 63 MiB uploads aborted the server); 2 arenas serve a server whose
/// threads mostly wait on sockets, and without a limit nothing changes.
pub const ARENA_SHARE_OF_ADDRESS_SPACE_DIVISOR: u64 = 8;

/// Under an address-space limit (a finite soft RLIMIT_AS), caps glibc's malloc arenas so
/// that together they reserve at most [`ARENA_SHARE_OF_ADDRESS_SPACE_DIVISOR`]th of it (at
/// least one arena beside the main one). Called before the server starts its threads;
/// answers the limit and the arenas when it capped them.
pub(crate) fn fit_malloc_arenas_to_address_space_limit() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the rlimit, which lives on our stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let arenas =
        (limit.rlim_cur / ARENA_SHARE_OF_ADDRESS_SPACE_DIVISOR / MALLOC_ARENA_RESERVE_BYTES)
            .clamp(2, 64);
    cap_malloc_arenas(arenas)?;
    Some((limit.rlim_cur, arenas))
}

#[cfg(target_env = "gnu")]
fn cap_malloc_arenas(arenas: u64) -> Option<()> {
    let arenas = libc::c_int::try_from(arenas).ok()?;
    // SAFETY: mallopt only sets a parameter of glibc's allocator (M_ARENA_MAX takes effect
    // for arenas made from now on); it touches no memory of ours.
    (unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) } == 1).then_some(())
}

/// Other C libraries' allocators have no arenas to cap.
#[cfg(not(target_env = "gnu"))]
fn cap_malloc_arenas(_arenas: u64) -> Option<()> {
    None
}

/// Gives the process `command` starts an address-space limit (RLIMIT_AS) of `bytes` from its
/// exec on, as a container's memory limit would hold it (`bench-hostile`'s server). Only the
/// soft limit: the hard one is kept, so the workers that process starts can still give
/// themselves their own, larger budgets ([`apply_in_child`] sets both limits, and raising
/// a soft limit up to the hard one needs no privilege where raising a hard one does). The
/// process never raises its own limit, so the soft limit holds it as a hard one would.
pub(crate) fn limit_address_space_in_child(command: &mut Command, bytes: u64) {
    // SAFETY: the closure runs between fork and exec and only calls getrlimit and setrlimit
    // (async-signal-safe) on a struct on its own stack; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_AS, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = bytes.min(limit.rlim_max);
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// User + system CPU time of process `pid` so far, from `/proc/PID/stat`.
pub(crate) fn cpu_time_of(pid: u32) -> std::io::Result<Duration> {
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
pub(crate) fn kill_process_group(process_group: u32) {
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
pub(crate) fn wait_with_usage(pid: u32) -> std::io::Result<(ExitStatus, ResourceUsage)> {
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
pub(crate) fn has_exited(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes only into `status` on our stack.
    let result = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    result != 0
}

/// CPU time and peak RSS of this process so far (all threads).
pub(crate) fn own_usage() -> ResourceUsage {
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
pub(crate) struct PeakRssProbe(std::fs::File);

impl PeakRssProbe {
    pub(crate) fn open() -> Option<PeakRssProbe> {
        std::fs::File::open("/proc/self/status")
            .ok()
            .map(PeakRssProbe)
    }

    /// Peak resident set size so far, bytes.
    pub(crate) fn read(&mut self) -> Option<u64> {
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
pub(crate) fn lower_current_thread_priority(increment: i32) {
    // SAFETY: gettid has no preconditions; getpriority/setpriority on our own thread id only
    // change a scheduling attribute and touch no memory.
    unsafe {
        let thread = libc::gettid() as libc::id_t;
        let current = libc::getpriority(libc::PRIO_PROCESS, thread);
        // Failure (e.g. a restrictive seccomp profile) only loses the optimisation.
        let _ = libc::setpriority(libc::PRIO_PROCESS, thread, (current + increment).min(19));
    }
}

/// Hands memory this process has freed back to the kernel (glibc's `malloc_trim`). glibc keeps
/// freed small allocations in the arena of the thread that made them; after a parse of
/// hundreds of megabytes of small JSON values on a blocking thread, that memory would stay
/// resident in that thread's arena, so parses spread over several threads would add up in
/// RSS even though at most two run at once.
pub(crate) fn release_free_memory() {
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
pub(crate) fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit only asks the kernel to end the process; it reads and writes no memory
    // of ours, and nothing runs after it.
    unsafe { libc::_exit(code) }
}

/// Bytes an unprivileged process may still write on the file system holding `path`
/// (statvfs: available blocks × fragment size).
pub(crate) fn available_disk_bytes(path: &std::path::Path) -> std::io::Result<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_open_files_soft_limit_is_raised_to_the_hard_one_and_not_past_it() {
        let before = open_files_limit().unwrap();
        assert!(before.soft <= before.hard, "{before:?}");
        set_open_files_soft_limit(before.hard).unwrap();
        assert_eq!(open_files_limit().unwrap().soft, before.hard);
        // Asked for more than the hard limit: the hard limit, never an error. (Left raised:
        // as the server does at start.)
        set_open_files_soft_limit(u64::MAX).unwrap();
        let after = open_files_limit().unwrap();
        assert_eq!((after.soft, after.hard), (before.hard, before.hard));
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
