//! The client flags the README shows (`submit --scalar --vector --gradient --image --quality
//! --loop --theme --webhook`, `template create --animation`), each run as a person runs it:
//! the real binary against a real server, judged by what came of it. A flag's output is the
//! output of the same request made over the API (equal bytes: the render is deterministic),
//! and each flag is shown to matter (the request without it renders other bytes), so a flag
//! the client dropped or misread fails here.

use super::dotlottie_js::{dotlottie_js, image_layer_template};
use super::image_slots::{png, quadrants};
use super::webhooks::{secrets_file, verify, Answer, Receiver, BALL, SECRET};
use crate::helpers::*;
use base64::Engine;
use lottie_render::grpc::proto;
use std::net::SocketAddr;
use std::process::Output;

/// Runs `lottie-render ARGS` against `server` (`--server`; none: whatever `env` says), with
/// the extra environment `env`.
pub(crate) async fn lottie_render(
    server: Option<SocketAddr>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_lottie-render"));
    command.args(args).env_remove("LOTTIE_RENDER_SERVER");
    if let Some(server) = server {
        command.args(["--server", &format!("http://{server}")]);
    }
    command.envs(env.iter().copied()).output().await.unwrap()
}

/// The value of the line `NAME  value` the client printed.
pub(crate) fn field(output: &Output, name: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .map(|value| value.trim().to_owned())
        .unwrap_or_else(|| panic!("no {name} in {stdout}"))
}

#[track_caller]
pub(crate) fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A 100² template of five frames: a square whose position is the vector slot `where` and
/// whose fill opacity is the scalar slot `fade`, a band filled with the gradient slot `sky`,
/// and a 40² image asset `photo` in the top-left corner.
pub(crate) fn slots_template() -> Vec<u8> {
    let transform = |at: [f64; 2], sid: Option<&str>| {
        let mut position = serde_json::json!({"a": 0, "k": [at[0], at[1], 0]});
        if let Some(sid) = sid {
            position["sid"] = sid.into();
        }
        serde_json::json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": position,
            "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}})
    };
    let group = |size: [f64; 2], paint: serde_json::Value| {
        serde_json::json!([{"ty": "gr", "it": [
            {"ty": "rc", "d": 1, "p": {"a": 0, "k": [0, 0]}, "s": {"a": 0, "k": size},
             "r": {"a": 0, "k": 0}},
            paint,
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
             "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}}
        ]}])
    };
    let square = group(
        [40.0, 40.0],
        serde_json::json!({"ty": "fl", "c": {"a": 0, "k": [1, 0, 0, 1]}, "r": 1,
            "o": {"a": 0, "k": 100, "sid": "fade"}}),
    );
    let band = group(
        [100.0, 20.0],
        serde_json::json!({"ty": "gf", "o": {"a": 0, "k": 100}, "r": 1, "t": 1,
            "s": {"a": 0, "k": [-50, 0]}, "e": {"a": 0, "k": [50, 0]},
            "g": {"p": 2, "k": {"a": 0, "k": [0, 1, 1, 1, 1, 0, 0, 0]}, "sid": "sky"}}),
    );
    let grey = png(&image::RgbaImage::from_pixel(
        40,
        40,
        image::Rgba([128, 128, 128, 255]),
    ));
    let uri = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(grey)
    );
    let layer = |index: u32, kind: u32, extra: serde_json::Value| {
        let mut layer = serde_json::json!({"ddd": 0, "ind": index, "ty": kind, "sr": 1,
            "ip": 0, "op": 5, "st": 0, "bm": 0});
        for (key, value) in extra.as_object().unwrap() {
            layer[key] = value.clone();
        }
        layer
    };
    serde_json::json!({"v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": 100, "h": 100,
    "assets": [{"id": "photo", "w": 40, "h": 40, "e": 1, "u": "", "p": uri}],
    "layers": [
        layer(1, 2, serde_json::json!({"refId": "photo", "ks": transform([0.0, 0.0], None)})),
        layer(2, 4, serde_json::json!({"ks": transform([50.0, 50.0], Some("where")),
            "shapes": square})),
        layer(3, 4, serde_json::json!({"ks": transform([50.0, 90.0], None), "shapes": band}))
    ]})
    .to_string()
    .into_bytes()
}

fn stop(offset: f64, color: proto::Color) -> proto::GradientStop {
    proto::GradientStop {
        offset,
        color: Some(color),
    }
}

/// The modifications `--scalar fade=40 --vector where=30,60,0 --gradient
/// sky=0:#0000ff,1:#00ff00 --image photo=FILE:contain` stand for, as the API takes them.
fn flag_modifications(photo: &[u8]) -> proto::Modifications {
    proto::Modifications {
        scalars: [("fade".to_owned(), 40.0)].into(),
        vectors: [(
            "where".to_owned(),
            proto::Vector {
                values: vec![30.0, 60.0, 0.0],
            },
        )]
        .into(),
        gradients: [(
            "sky".to_owned(),
            proto::Gradient {
                stops: vec![
                    stop(0.0, color(0.0, 0.0, 1.0)),
                    stop(1.0, color(0.0, 1.0, 0.0)),
                ],
            },
        )]
        .into(),
        images: [(
            "photo".to_owned(),
            proto::ImageInput {
                source: Some(proto::image_input::Source::Data(photo.to_vec().into())),
                fit: proto::ImageFit::Contain as i32,
            },
        )]
        .into(),
        ..Default::default()
    }
}

/// A change to a request: a flag left out.
type RequestChange = dyn Fn(&mut proto::RenderRequest);

/// The sha256 of the output of `request` rendered over the API.
async fn api_sha(app: &TestApp, request: proto::RenderRequest) -> String {
    app.render(request).await.output.unwrap().sha256
}

#[tokio::test]
async fn slot_quality_and_loop_flags_render_what_the_same_api_request_renders() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let template = app.create("slots", slots_template()).await.unwrap();
    assert_eq!(
        (
            template.scalar_slots.len(),
            template.vector_slots.len(),
            template.gradient_slots.len(),
            template.image_slots.len()
        ),
        (1, 1, 1, 1),
        "{template:?}"
    );
    // Wider than tall: contained, it leaves bands that covering would fill.
    let photo = png(&quadrants(64, 32));
    let photo_file = dir.path().join("photo.png");
    std::fs::write(&photo_file, &photo).unwrap();
    let out = dir.path().join("slots.gif");
    let image_flag = format!("photo={}:contain", photo_file.display());
    let submitted = lottie_render(
        Some(app.address),
        &[
            "submit",
            "--template",
            &template.template_id,
            "--format",
            "gif",
            "--width",
            "100",
            "--height",
            "100",
            "--scalar",
            "fade=40",
            "--vector",
            "where=30,60,0",
            "--gradient",
            "sky=0:#0000ff,1:#00ff00",
            "--image",
            &image_flag,
            "--quality",
            "high",
            "--wait",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_exit(&submitted, 0);
    let from_cli = sha256_hex(&std::fs::read(&out).unwrap());

    let request = |change: &RequestChange| {
        let mut request = small_request(&template.template_id, proto::Format::Gif);
        request.modifications = Some(flag_modifications(&photo));
        request.output.as_mut().unwrap().quality = proto::Quality::High as i32;
        change(&mut request);
        request
    };
    assert_eq!(
        api_sha(&app, request(&|_| {})).await,
        from_cli,
        "the flags are the API's request"
    );
    let without: [(&str, &RequestChange); 6] = [
        ("--scalar", &|r| {
            r.modifications.as_mut().unwrap().scalars.clear()
        }),
        ("--vector", &|r| {
            r.modifications.as_mut().unwrap().vectors.clear()
        }),
        ("--gradient", &|r| {
            r.modifications.as_mut().unwrap().gradients.clear()
        }),
        ("--image", &|r| {
            r.modifications.as_mut().unwrap().images.clear()
        }),
        ("--image …:contain", &|r| {
            let images = &mut r.modifications.as_mut().unwrap().images;
            images.get_mut("photo").unwrap().fit = proto::ImageFit::Cover as i32;
        }),
        ("--quality high", &|r| {
            r.output.as_mut().unwrap().quality = proto::Quality::Standard as i32;
        }),
    ];
    for (flag, change) in without {
        assert_ne!(
            api_sha(&app, request(change)).await,
            from_cli,
            "{flag} made no difference: this test could not see it dropped"
        );
    }

    // --loop 3 on an APNG: `num_plays` of its animation control chunk (acTL).
    let looped = dir.path().join("looped.png");
    let submitted = lottie_render(
        Some(app.address),
        &[
            "submit",
            "--template",
            &template.template_id,
            "--format",
            "apng",
            "--width",
            "100",
            "--height",
            "100",
            "--loop",
            "3",
            "--wait",
            "-o",
            looped.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_exit(&submitted, 0);
    let apng = std::fs::read(&looped).unwrap();
    let actl = apng
        .windows(4)
        .position(|window| window == b"acTL")
        .expect("an animated PNG has an acTL chunk")
        + 4;
    let plays = u32::from_be_bytes(apng[actl + 4..actl + 8].try_into().unwrap());
    assert_eq!(plays, 3, "num_plays");
    app.stop().await;
}

#[tokio::test]
async fn animation_and_theme_flags_choose_the_archives_animation_and_apply_its_theme() {
    let app = spawn_app().await;
    let dir = tempfile::tempdir().unwrap();
    let ball: serde_json::Value = serde_json::from_slice(&corpus(BALL)).unwrap();
    let green = png(&image::RgbaImage::from_pixel(
        100,
        100,
        image::Rgba([0, 255, 0, 255]),
    ));
    let photo = image_layer_template(serde_json::json!({"id": "img", "w": 100, "h": 100,
        "u": "", "e": 1, "p": format!("data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&green))}));
    let dark = serde_json::json!({"rules": [
        {"id": "ball_color", "type": "Color", "value": [0, 0, 1, 1]}]});
    let archive = dotlottie_js(serde_json::json!({"version": 2,
        "animations": [{"id": "ball", "data": ball}, {"id": "photo", "data": photo}],
        "themes": [{"id": "dark", "data": dark}]}));
    let archive_file = dir.path().join("anim.lottie");
    std::fs::write(&archive_file, archive).unwrap();
    let archive_path = archive_file.to_str().unwrap();

    let chosen = lottie_render(
        Some(app.address),
        &["template", "create", archive_path, "--animation", "photo"],
        &[],
    )
    .await;
    assert_exit(&chosen, 0);
    assert_eq!(
        field(&chosen, "animations"),
        "ball, photo (this template: photo)"
    );
    let photo_template = app.get_template(&field(&chosen, "template")).await.unwrap();
    assert_eq!(photo_template.animation_id, "photo");
    assert_eq!(photo_template.image_slots.len(), 1, "the photo animation");

    let first = lottie_render(
        Some(app.address),
        &["template", "create", archive_path],
        &[],
    )
    .await;
    assert_exit(&first, 0);
    let ball_id = field(&first, "template");
    assert_eq!(field(&first, "themes"), "dark");
    let out = dir.path().join("dark.gif");
    let submit = |theme: &'static str, out: &std::path::Path| {
        let (ball_id, out) = (ball_id.clone(), out.to_str().unwrap().to_owned());
        let app = &app;
        async move {
            lottie_render(
                Some(app.address),
                &[
                    "submit",
                    "--template",
                    &ball_id,
                    "--format",
                    "gif",
                    "--width",
                    "100",
                    "--height",
                    "100",
                    "--theme",
                    theme,
                    "--wait",
                    "-o",
                    &out,
                ],
                &[],
            )
            .await
        }
    };
    assert_exit(&submit("dark", &out).await, 0);
    let themed = sha256_hex(&std::fs::read(&out).unwrap());
    let mut blue = small_request(&ball_id, proto::Format::Gif);
    blue.modifications = Some(proto::Modifications {
        colors: [(
            "ball_color".to_owned(),
            proto::Color {
                a: Some(1.0),
                ..color(0.0, 0.0, 1.0)
            },
        )]
        .into(),
        ..Default::default()
    });
    assert_eq!(themed, api_sha(&app, blue).await, "the theme's colour");
    assert_ne!(
        themed,
        api_sha(&app, small_request(&ball_id, proto::Format::Gif)).await,
        "the theme changed the ball"
    );
    let unknown = submit("light", &dir.path().join("light.gif")).await;
    assert_exit(&unknown, 65);
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("THEME_UNKNOWN"),
        "{unknown:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_webhook_flag_has_the_jobs_events_posted_signed_to_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = secrets_file(dir.path(), &format!("default {SECRET}\n"));
    let app = spawn_app_with(|settings| {
        settings.webhooks.webhook_secrets = Some(secrets);
        settings.webhooks.webhook_allow_http = true;
        settings.webhooks.webhook_allow_networks =
            Some(lottie_render::webhooks::settings::Networks(vec![
                "127.0.0.0/8".parse().unwrap(),
            ]));
    })
    .await;
    let receiver = Receiver::start(|_, _| Answer::Status(204)).await;
    let template = app.create_template(BALL).await;
    let submitted = lottie_render(
        Some(app.address),
        &[
            "submit",
            "--template",
            &template.template_id,
            "--format",
            "gif",
            "--width",
            "100",
            "--height",
            "100",
            "--webhook",
            &receiver.url("/render"),
            "--webhook-event",
            "started",
            "--webhook-event",
            "succeeded",
            "--wait",
        ],
        &[],
    )
    .await;
    assert_exit(&submitted, 0);
    let job_id = field(&submitted, "job");
    let seen = receiver
        .wait_until("the started and succeeded events", |seen| seen.len() >= 2)
        .await;
    let mut kinds: Vec<String> = seen
        .iter()
        .map(|request| {
            assert!(verify(SECRET, request), "signature of {request:#?}");
            assert_eq!(request.json()["data"]["jobId"], job_id.as_str());
            request.json()["type"].as_str().unwrap().to_owned()
        })
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["render.started", "render.succeeded"]);
    app.stop().await;
}
