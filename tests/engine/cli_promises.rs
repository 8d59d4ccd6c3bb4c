//! `render` promises of the README that `cli.rs` does not hold it to: a dotLottie archive
//! renders the animation `--animation ID` names and the values of the theme `--theme NAME`
//! names (the same bytes as the animation's JSON rendered with those values as flags), and
//! a worker that crashes mid-render (killed by a signal, as a segfault in rlottie would) exits
//! 70, neither the caller's fault (65) nor a passing one (75), leaving no file behind.

use crate::helpers::{corpus, executable, tempdir};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the crash test waits for the render's worker to start.
const WORKER_START_LIMIT: Duration = Duration::from_secs(60);
/// How many SIGSEGVs a worker is sent, 200 ms apart, until it is gone (the first may be
/// caught by Rust's stack-overflow handler; see the test).
const SEGV_ATTEMPTS: usize = 50;

fn render(template: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(executable())
        .arg("render")
        .arg(template)
        .args(["--format", "gif", "--width", "100", "--height", "100", "-o"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[track_caller]
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A version-2 archive of the ball and the checkmark, with a theme `dark` that makes the
/// ball blue (opaque).
fn archive() -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    let entries: [(&str, Vec<u8>); 4] = [
        (
            "manifest.json",
            br#"{"version":"2","animations":[{"id":"ball"},{"id":"check"}],"themes":[{"id":"dark"}]}"#
                .to_vec(),
        ),
        (
            "a/ball.json",
            std::fs::read(corpus("slots-ball-colors-opacity.json")).unwrap(),
        ),
        (
            "a/check.json",
            std::fs::read(corpus("tiny-checkmark-done-70x70.json")).unwrap(),
        ),
        (
            "t/dark.json",
            br#"{"rules":[{"id":"ball_color","type":"Color","value":[0,0,1,1]}]}"#.to_vec(),
        ),
    ];
    for (name, bytes) in entries {
        zip.start_file(name, options).unwrap();
        zip.write_all(&bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[test]
fn render_takes_the_archives_animation_and_theme_by_their_flags() {
    let dir = tempdir();
    let packed = dir.path().join("anim.lottie");
    std::fs::write(&packed, archive()).unwrap();
    let output = |name: &str| dir.path().join(name);
    let bytes = |name: &str| std::fs::read(output(name)).unwrap();

    assert_exit(
        &render(&packed, &output("check.gif"), &["--animation", "check"]),
        0,
    );
    assert_exit(
        &render(
            &corpus("tiny-checkmark-done-70x70.json"),
            &output("check-json.gif"),
            &[],
        ),
        0,
    );
    assert!(
        bytes("check.gif") == bytes("check-json.gif"),
        "--animation check renders the checkmark"
    );

    assert_exit(
        &render(&packed, &output("dark.gif"), &["--theme", "dark"]),
        0,
    );
    assert_exit(
        &render(
            &corpus("slots-ball-colors-opacity.json"),
            &output("blue.gif"),
            &["--color", "ball_color=#0000ffff"],
        ),
        0,
    );
    assert_exit(&render(&packed, &output("plain.gif"), &[]), 0);
    assert!(
        bytes("dark.gif") == bytes("blue.gif"),
        "--theme dark is its colour"
    );
    assert!(
        bytes("dark.gif") != bytes("plain.gif"),
        "the theme changed the ball"
    );

    let unknown = render(&packed, &output("light.gif"), &["--theme", "light"]);
    assert_exit(&unknown, 64);
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        said.contains("--theme light: the template has no such theme"),
        "{said}"
    );
    let unknown = render(&packed, &output("nope.gif"), &["--animation", "nope"]);
    assert_exit(&unknown, 65);
    assert!(!output("light.gif").exists() && !output("nope.gif").exists());
}

/// The process ids whose parent is `parent` and whose command line is `lottie-render worker`.
fn workers_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the command name (which may hold spaces): state, then ppid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
        if ppid == Some(parent) && args.get(1) == Some(&&b"worker"[..]) && args.len() == 3 {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_worker_that_crashes_mid_render_exits_70_and_leaves_nothing_behind() {
    let dir = tempdir();
    let out = dir.path().join("never.gif");
    // rlottie never finishes this one: the worker is still rendering when it is killed.
    let render = Command::new(executable())
        .arg("render")
        .arg(corpus("malformed/real-rlottie-repro-infinite-loop.json"))
        .args(["--format", "gif", "--width", "100", "--height", "100"])
        .args(["--timeout", "300", "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let worker = loop {
        if let Some(worker) = workers_of(render.id()).first() {
            break *worker;
        }
        assert!(
            start.elapsed() < WORKER_START_LIMIT,
            "no worker of the render started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Rust's runtime catches the first SIGSEGV of a process (its stack-overflow handler): a
    // signal that is no fault only puts the default action back, and the worker renders on.
    // On an idle machine the signal came before the handler was installed; on a loaded one
    // the worker was found later, and it rendered on until its CPU budget ended it. The
    // second signal is the crash.
    for _ in 0..SEGV_ATTEMPTS {
        let killed = Command::new("kill")
            .args(["-SEGV", &worker.to_string()])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        // A worker that died is a zombie (an empty command line) until the render reaps it.
        let alive = std::fs::read(format!("/proc/{worker}/cmdline"))
            .is_ok_and(|cmdline| !cmdline.is_empty());
        if !killed.success() || !alive {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let output = render.wait_with_output().unwrap();
    assert_exit(&output, 70);
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("SIGSEGV"), "the signal is named: {said}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
