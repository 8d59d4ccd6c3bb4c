//! Safe by default (DESIGN.md, "Trust boundaries"): `serve` does not answer anonymous callers
//! beyond loopback unless told so, a keys file cannot merge a tenant with the anonymous one,
//! the shipped deployment authenticates, encrypts and bounds every tenant, and its probes
//! (plain HTTP on the metrics port, as the kubelet cannot speak TLS) answer.

use crate::helpers::ServerProcess;
use clap::Parser;
use lottie_render::auth::AuthMode;
use lottie_render::cli::{Cli, Command};
use lottie_render::config::ServerSettings;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a refused `serve` may take to exit: it refuses before starting anything.
const REFUSAL_LIMIT: Duration = Duration::from_secs(30);

/// Runs `serve ARGS` with a data directory of its own; answers its exit status and stderr
/// once it exits, or kills it once it logs that it serves and answers `None` with the log.
fn serve_until_refused_or_serving(args: &[&str]) -> (Option<std::process::ExitStatus>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lottie-render"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .env("RUST_LOG", "info")
        .env("LOTTIE_RENDER_SPARE_WORKERS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + REFUSAL_LIMIT;
    let mut log = String::new();
    while Instant::now() < deadline {
        match received.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                let serving = line.contains(" serving ");
                log.push_str(&line);
                log.push('\n');
                if serving {
                    let _ = child.kill();
                    let _ = child.wait();
                    return (None, log);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().unwrap();
                return (Some(status), log);
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("serve neither refused nor served within {REFUSAL_LIMIT:?}: {log}");
}

#[test]
fn serve_with_auth_off_beyond_loopback_refuses_to_start_and_names_the_flag_that_allows_it() {
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let (status, log) = serve_until_refused_or_serving(&["--listen", listen]);
        let status = status.unwrap_or_else(|| panic!("{listen}: served anonymous callers: {log}"));
        assert!(!status.success(), "{listen}: {log}");
        assert!(
            log.contains("--auth off") && log.contains("--allow-unauthenticated-network"),
            "{listen}: the refusal says neither why nor how: {log}"
        );
    }
}

#[test]
fn serve_beyond_loopback_starts_when_the_operator_allows_it_or_callers_authenticate() {
    let (status, log) = serve_until_refused_or_serving(&[
        "--listen",
        "0.0.0.0:0",
        "--allow-unauthenticated-network",
    ]);
    assert!(status.is_none(), "refused with the flag: {log}");
    let dir = tempfile::tempdir().unwrap();
    let keys = crate::helpers::api_keys_file(dir.path(), &[("acme", "billing", "key-of-acme")]);
    let (status, log) = serve_until_refused_or_serving(&[
        "--listen",
        "0.0.0.0:0",
        "--auth",
        "required",
        "--api-keys",
        keys.to_str().unwrap(),
    ]);
    assert!(status.is_none(), "refused with --auth required: {log}");
}

#[test]
fn a_keys_file_that_names_the_anonymous_tenant_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let keys = crate::helpers::api_keys_file(dir.path(), &[("default", "billing", "key-1")]);
    let (status, log) = serve_until_refused_or_serving(&[
        "--auth",
        "optional",
        "--api-keys",
        keys.to_str().unwrap(),
    ]);
    let status = status.unwrap_or_else(|| panic!("served a keys file naming 'default': {log}"));
    assert!(!status.success());
    assert!(log.contains("'default'"), "{log}");
}

/// The settings `serve` would run with for `args` (the words after the executable's name).
fn serve_settings(args: &[String]) -> ServerSettings {
    let cli = Cli::try_parse_from(
        std::iter::once("lottie-render".to_string()).chain(args.iter().cloned()),
    )
    .unwrap_or_else(|error| panic!("{args:?} do not parse: {error}"));
    match cli.command {
        Command::Serve(serve) => serve.settings,
        _ => panic!("{args:?} is not serve"),
    }
}

/// What every shipped way of running the service must say.
fn assert_safe(settings: &ServerSettings, source: &str) {
    assert!(
        settings
            .auth
            .check_exposure(settings.application.listen)
            .is_ok(),
        "{source}: would answer anonymous callers on {}",
        settings.application.listen
    );
    assert_eq!(settings.auth.mode, AuthMode::Required, "{source}");
    assert!(
        settings.auth.api_keys.is_some() || settings.auth.identities.is_some(),
        "{source}"
    );
    assert!(settings.tls.files().is_some(), "{source}: no TLS");
    assert!(
        settings.tenant_job_limit().is_some(),
        "{source}: no job limit"
    );
    assert!(settings.limits.tenant_rate().is_some(), "{source}: no rate");
    assert!(
        settings.storage.max_templates_per_tenant > 0,
        "{source}: no template quota"
    );
    assert!(
        settings.storage.max_template_storage_mb_per_tenant > 0,
        "{source}: no storage quota"
    );
    assert!(
        !settings.auth.allow_unauthenticated_network,
        "{source}: allows anonymous callers"
    );
}

fn deploy_file(name: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy")
            .join(name),
    )
    .unwrap()
}

#[test]
fn the_kubernetes_manifest_authenticates_encrypts_and_bounds_every_tenant() {
    let manifest = deploy_file("kubernetes.yaml");
    // The container's `args:` list: `- WORD` lines up to the next key.
    let args: Vec<String> = manifest
        .lines()
        .skip_while(|line| line.trim() != "args:")
        .skip(1)
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .take_while(|line| line.starts_with("- "))
        .map(|line| line.trim_start_matches("- ").to_string())
        .collect();
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{args:?}");
    assert_safe(&serve_settings(&args), "deploy/kubernetes.yaml");
    // The probes ask the HTTP paths the metrics listener answers.
    for path in [
        lottie_render::mesh::probes::HTTP_LIVENESS_PATH,
        lottie_render::mesh::probes::HTTP_READINESS_PATH,
    ] {
        assert!(
            manifest.contains(&format!("httpGet: {{port: metrics, path: {path}}}")),
            "no probe asks {path}"
        );
    }
}

#[test]
fn the_container_image_authenticates_encrypts_and_bounds_every_tenant() {
    let dockerfile = deploy_file("Dockerfile").replace("\\\n", " ");
    let command = dockerfile
        .lines()
        .find_map(|line| line.strip_prefix("CMD "))
        .expect("the Dockerfile has a CMD");
    let args: Vec<String> = serde_json::from_str(command).unwrap();
    assert_safe(&serve_settings(&args), "deploy/Dockerfile");
}

/// `GET path` on the metrics listener: the status code.
async fn http_status(address: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {response}"))
}

#[tokio::test]
async fn the_http_probes_on_the_metrics_port_follow_liveness_and_readiness() {
    let mut server = ServerProcess::start(&["--drain-min-seconds", "3"]);
    let metrics = server.metrics_address;
    assert_eq!(http_status(metrics, "/livez").await, 200);
    assert_eq!(http_status(metrics, "/readyz").await, 200);
    assert_eq!(http_status(metrics, "/nothing").await, 404);
    // Draining: no longer ready, still alive (the listener stays for --drain-min-seconds).
    server.terminate();
    let deadline = Instant::now() + Duration::from_secs(2);
    while http_status(metrics, "/readyz").await != 503 {
        assert!(Instant::now() < deadline, "readiness never turned 503");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(http_status(metrics, "/livez").await, 200);
    assert!(server
        .wait_for_exit(Duration::from_secs(30))
        .await
        .is_some());
}
