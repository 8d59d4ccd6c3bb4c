//! The processes a test's server starts, seen from outside: worker processes and zygotes by
//! their executable, stand-in workers that count, crash or hold their starts.

use std::path::PathBuf;
use std::time::Duration;

/// Worker processes started from `executable`, anywhere on the machine: children of this
/// process and orphans adopted by init alike (tests run side by side in this process, so
/// each test that counts workers gives its server an executable path of its own).
pub fn worker_processes(executable: &std::path::Path) -> Vec<(u32, String)> {
    let prefix = format!("{} worker", executable.display());
    live_processes(|cmdline| cmdline.starts_with(&prefix))
        .into_iter()
        .filter(|(pid, cmdline)| !is_zygote(*pid, cmdline))
        .collect()
}

/// The worker zygotes of `executable` alive now (the process spares are forked from), a
/// zygote still loading its libraries included.
pub fn zygote_processes(executable: &std::path::Path) -> Vec<(u32, String)> {
    let prefix = format!("{} worker", executable.display());
    live_processes(|cmdline| cmdline.starts_with(&prefix))
        .into_iter()
        .filter(|(pid, cmdline)| is_zygote(*pid, cmdline))
        .collect()
}

/// A zygote's forks share its command line (`worker --zygote`) but take the worker's process
/// name before the zygote hands them out; the zygote itself never has that name.
fn is_zygote(pid: u32, cmdline: &str) -> bool {
    let worker = lottie_render::sandbox::zygote::WORKER_PROCESS_NAME.to_string_lossy();
    cmdline.contains(" worker --zygote")
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(&format!("({worker})")))
}

/// Live (not zombie) processes anywhere on the machine whose command line (arguments joined
/// by spaces) `matches`.
pub fn live_processes(matches: impl Fn(&str) -> bool) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // A zombie is already dead (its parent reaps it).
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        if !zombie && matches(&cmdline) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Waits (up to 10 s) until `count` workers of `executable` run: a job is RUNNING a moment
/// before its process exists.
pub async fn wait_for_workers(executable: &std::path::Path, count: usize) {
    for _ in 0..1000 {
        if worker_processes(executable).len() == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "expected {count} workers, found {:?}",
        worker_processes(executable)
    );
}

/// A path of its own for the real worker binary (a symlink in `dir`), so that a test can
/// tell its server's workers from those of the tests running beside it.
pub fn own_worker_executable(dir: &std::path::Path) -> PathBuf {
    let link = dir.join("lottie-render-under-test");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_lottie-render"), &link).unwrap();
    link
}

/// A worker stand-in that logs its start to `count_file`, then runs the real worker.
pub fn counting_worker(dir: &std::path::Path, count_file: &std::path::Path) -> PathBuf {
    stand_in(
        &dir.join("counting-worker"),
        &format!(
            "echo started >> '{}'\nexec '{}' \"$@\"",
            count_file.display(),
            env!("CARGO_BIN_EXE_lottie-render")
        ),
    )
}

/// The starts `counting_worker(dir, dir/starts)` logged.
pub fn worker_starts(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("starts"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// An executable shell script at `path` running `body`.
pub fn stand_in(path: &std::path::Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// [`own_worker_executable`] in a temporary directory of its own, which must outlive it.
pub fn own_worker() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let executable = own_worker_executable(dir.path());
    (dir, executable)
}

/// A stand-in worker that crashes (SIGSEGV) and appends a line to `count_file` per start.
pub fn crashing_worker(dir: &std::path::Path, count_file: &std::path::Path) -> PathBuf {
    stand_in(
        &dir.join("crashing-worker"),
        &format!(
            "echo started >> '{}'\ncat > /dev/null\nkill -SEGV $$",
            count_file.display()
        ),
    )
}

/// A stand-in for this crate's binary (as worker or analysis executable) that, while engaged,
/// stops itself (SIGSTOP) before it runs the real binary: a test holds a render or an analysis
/// at its very start for as long as it needs, deterministically, where stopping a fast
/// process from outside would race it. Disengaged, it runs the real binary at once.
pub struct Hold {
    pub script: PathBuf,
    flag: PathBuf,
}

impl Hold {
    /// The stand-in script in `dir`, disengaged.
    pub fn new(dir: &std::path::Path) -> Hold {
        let flag = dir.join("hold");
        // Shell builtins only: the sandbox clears the environment (no PATH needed).
        let script = stand_in(
            &dir.join("holding-lottie-render"),
            &format!(
                "if [ -e '{}' ]; then kill -STOP $$; fi\nexec '{}' \"$@\"",
                flag.display(),
                env!("CARGO_BIN_EXE_lottie-render")
            ),
        );
        Hold { script, flag }
    }

    /// Processes started from now on stop at the hold.
    pub fn engage(&self) {
        std::fs::write(&self.flag, b"").unwrap();
    }

    /// Processes started from now on run at once (those held stay held).
    pub fn disengage(&self) {
        let _ = std::fs::remove_file(&self.flag);
    }

    /// Processes stopped at the hold now.
    pub fn held(&self) -> Vec<u32> {
        let script = self.script.display().to_string();
        live_processes(|cmdline| cmdline.contains(&script))
            .into_iter()
            .map(|(pid, _)| pid)
            .filter(|pid| process_state(*pid) == Some('T'))
            .collect()
    }

    /// Waits (up to a minute) until `count` processes are held; their ids.
    pub async fn wait_for_held(&self, count: usize) -> Vec<u32> {
        for _ in 0..6000 {
            let held = self.held();
            if held.len() == count {
                return held;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {count} held processes, found {:?}", self.held());
    }

    /// Disengages the hold and lets every process held at it go on.
    pub fn let_go(&self) {
        self.disengage();
        for pid in self.held() {
            self.release(pid);
        }
    }

    /// Lets a held process go on (SIGCONT).
    pub fn release(&self, pid: u32) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &pid.to_string()])
            .status();
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // A failed test must not leave stopped processes behind.
        self.disengage();
        for pid in self.held() {
            self.release(pid);
        }
    }
}

/// The open file descriptors of process `pid`: each one's number and what it points to, in
/// the order /proc lists them.
pub fn open_descriptors(pid: &dyn std::fmt::Display) -> Vec<(String, String)> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let target = std::fs::read_link(entry.path()).unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                target.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `Z` zombie…), `None` if gone.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Process `pid` (a worker) has exactly the allow-listed environment, and the OOM killer's
/// first pick as its score adjustment, as read from /proc.
pub fn assert_worker_environment_and_oom_score(pid: &dyn std::fmt::Display) {
    let environment = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut environment: Vec<String> = environment
        .split(|byte| *byte == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| String::from_utf8_lossy(entry).into_owned())
        .collect();
    environment.sort();
    let mut expected: Vec<String> = lottie_render::sandbox::WORKER_ENVIRONMENT
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    expected.sort();
    assert_eq!(environment, expected);
    let oom = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    assert_eq!(oom.trim(), "1000");
}
