//! The client subcommands (`template create`, `submit --wait -o`, `job …`) against a real
//! server, as people run them.

use crate::helpers::{corpus_path, spawn_app};
use std::process::{Command, Output};

fn cli(server: &std::net::SocketAddr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lottie-render"))
        .args(args)
        .args(["--server", &format!("http://{server}")])
        .output()
        .unwrap()
}

fn field<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {name} in {stdout}"))
}

#[tokio::test]
async fn a_person_registers_a_template_renders_it_and_gets_the_file() {
    let app = spawn_app().await;
    let server = app.address;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ball.gif");
    let template = corpus_path("slots-ball-colors-opacity.json");
    let outcome = tokio::task::spawn_blocking(move || {
        let created = cli(&server, &["template", "create", template.to_str().unwrap()]);
        assert!(created.status.success(), "{created:?}");
        let stdout = String::from_utf8(created.stdout).unwrap();
        let template_id = field(&stdout, "template").to_owned();
        assert!(stdout.contains("color slot ball_color"), "{stdout}");

        let submitted = cli(
            &server,
            &[
                "submit",
                "--template",
                &template_id,
                "--format",
                "gif",
                "--width",
                "120",
                "--height",
                "120",
                "--color",
                "ball_color=#00ff00",
                "--wait",
                "-o",
                out.to_str().unwrap(),
            ],
        );
        assert!(submitted.status.success(), "{submitted:?}");
        let stdout = String::from_utf8(submitted.stdout).unwrap();
        assert_eq!(field(&stdout, "state"), "SUCCEEDED");
        let job_id = field(&stdout, "job").to_owned();
        let bytes = std::fs::read(&out).unwrap();
        assert!(bytes.starts_with(b"GIF89a"));

        let shown = cli(&server, &["job", "get", &job_id]);
        assert!(shown.status.success());
        assert!(String::from_utf8(shown.stdout)
            .unwrap()
            .contains("image/gif"));

        // A refusal exits 65 (do not retry) and prints the field that is wrong.
        let refused = cli(
            &server,
            &[
                "submit",
                "--template",
                &template_id,
                "--format",
                "mp4",
                "--fps",
                "24",
            ],
        );
        assert_eq!(refused.status.code(), Some(65));
        assert!(String::from_utf8(refused.stderr)
            .unwrap()
            .contains("output.fps"));
        let unknown = cli(&server, &["job", "get", &uuid::Uuid::new_v4().to_string()]);
        assert_eq!(unknown.status.code(), Some(65));
    })
    .await;
    outcome.unwrap();
    app.stop().await;
}
