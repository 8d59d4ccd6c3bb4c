//! Image data bombs at CreateTemplate (issue 21, item 11): the check before any worker read
//! only an image's header, so a 1×1 PNG whose image data inflates to 1 GiB was accepted (and
//! took 1 GB of worker memory to render), as was a progressive JPEG of thousands of scans. Both
//! are INVALID_ARGUMENT now, at once; honest images are accepted as before.

use crate::helpers::{corpus, create_request, spawn_app, ServerProcess};
use base64::Engine as _;
use lottie_render::cli::bench_hostile::payloads::zlib_of_zeros;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use serde_json::json;
use std::time::{Duration, Instant};
use tonic::Code;
use tonic_types::StatusExt;

/// The analysis worker's CPU time refusing a bomb may take, as the server charges it to the
/// tenant (read from the worker process: the machine's load does not stretch it, as it did
/// the 5 s wall-clock bound this replaces): a worker's start, a parse of 1.4 MB of JSON and
/// the check, which stops inflating past a few pages: 30 ms in this debug build. Inflating
/// the whole GiB costs only some 100 ms more (miniz_oxide is optimised even here), so this
/// bound says the refusal is cheap; that the check stops early is its unit tests' to prove
/// (`lottie::reading::assets`).
const REFUSAL_CPU: Duration = Duration::from_millis(500);
/// How long the server may take to log an ended analysis' charge.
const CHARGE_LOGGED_WITHIN: Duration = Duration::from_secs(10);

fn png_chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend((data.len() as u32).to_be_bytes());
    png.extend(kind);
    png.extend(data);
    // Neither the check nor stb_image reads the CRC.
    png.extend([0; 4]);
}

/// A PNG of `width`×`height` RGBA pixels whose image data is `zlib`.
fn png(width: u32, height: u32, zlib: &[u8]) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = width.to_be_bytes().to_vec();
    header.extend(height.to_be_bytes());
    header.extend([8, 6, 0, 0, 0]);
    png_chunk(&mut png, b"IHDR", &header);
    png_chunk(&mut png, b"IDAT", zlib);
    png_chunk(&mut png, b"IEND", &[]);
    png
}

/// A progressive JPEG of 8×8 pixels with `scans` scans of a few bytes each.
fn progressive_jpeg(scans: usize) -> Vec<u8> {
    let mut jpeg = vec![0xFF, 0xD8];
    jpeg.extend([0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0]);
    for _ in 0..scans {
        jpeg.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0, 0x12, 0x34]);
    }
    jpeg.extend([0xFF, 0xD9]);
    jpeg
}

/// A template showing one embedded image of `media` type.
fn image_template(media: &str, bytes: &[u8], width: u32, height: u32) -> Vec<u8> {
    let uri = format!(
        "data:{media};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    );
    let transform = json!({"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
        "p": {"a": 0, "k": [50, 50, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
        "s": {"a": 0, "k": [100, 100, 100]}});
    serde_json::to_vec(&json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
        "assets": [{"id": "image", "w": width, "h": height, "u": "", "p": uri, "e": 1}],
        "layers": [{"ddd": 0, "ind": 1, "ty": 2, "refId": "image", "ks": transform,
            "ip": 0, "op": 30, "st": 0, "sr": 1}],
    }))
    .unwrap()
}

fn assert_image_refused(status: &tonic::Status, expected: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let details = status.get_error_details();
    assert_eq!(details.error_info().unwrap().reason, "TEMPLATE_INVALID");
    let violation = &details.bad_request().unwrap().field_violations[0];
    assert_eq!(violation.field, "lottie_json", "{violation:?}");
    assert!(
        violation.description.contains("$.assets[0].p") && violation.description.contains(expected),
        "{violation:?}"
    );
}

/// The CPU time of the one analysis `server` has charged to its tenant, once logged.
async fn analysis_cpu(server: &ServerProcess) -> Duration {
    let deadline = Instant::now() + CHARGE_LOGGED_WITHIN;
    loop {
        let charged = server
            .log()
            .into_iter()
            .find(|line| line.contains("template analysis charged to its tenant"));
        if let Some(line) = charged {
            let cpu_ms: u64 = line
                .split("cpu_ms=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("no cpu_ms in {line}"));
            return Duration::from_millis(cpu_ms);
        }
        assert!(
            Instant::now() < deadline,
            "no charge logged: {:?}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_1x1_png_whose_data_inflates_to_1_gib_is_refused_at_once() {
    let server = ServerProcess::start(&[]);
    let bomb = png(1, 1, &zlib_of_zeros(1024 * 1024 * 1024));
    assert!(bomb.len() < 2 * 1024 * 1024, "{} bytes", bomb.len());
    let status = TemplateServiceClient::new(server.channel().await)
        .max_encoding_message_size(64 * 1024 * 1024)
        .create_template(create_request(
            "png bomb",
            image_template("image/png", &bomb, 1, 1),
        ))
        .await
        .unwrap_err();
    assert_image_refused(&status, "inflates to more than");
    let cpu = analysis_cpu(&server).await;
    println!("a 1 GiB PNG bomb refused after {cpu:?} of the analysis worker's CPU");
    assert!(cpu < REFUSAL_CPU, "the analysis took {cpu:?} of CPU");
    assert!(server.stop().await);
}

#[tokio::test]
async fn a_progressive_jpeg_of_thousands_of_scans_is_refused() {
    let app = spawn_app().await;
    let bomb = progressive_jpeg(5000);
    let status = app
        .create("jpeg bomb", image_template("image/jpeg", &bomb, 8, 8))
        .await
        .unwrap_err();
    assert_image_refused(&status, "scans");
}

#[tokio::test]
async fn honest_images_are_still_accepted() {
    let app = spawn_app().await;
    // 2×2 RGBA: two rows of a filter byte and eight samples.
    let honest = png(
        2,
        2,
        &miniz_oxide::deflate::compress_to_vec_zlib(
            &[
                0, 255, 0, 0, 255, 0, 255, 0, 255, 0, 0, 0, 255, 255, 255, 255, 255, 255,
            ],
            6,
        ),
    );
    for (name, template) in [
        ("generated png", image_template("image/png", &honest, 2, 2)),
        (
            "jpeg of ten scans",
            image_template("image/jpeg", &progressive_jpeg(10), 8, 8),
        ),
        ("corpus heart", corpus("image-base64-heart.json")),
        (
            "corpus 43 images",
            corpus("image-base64-43-images-precomps.json"),
        ),
    ] {
        let created = app
            .templates()
            .create_template(create_request(name, template))
            .await;
        assert!(created.is_ok(), "{name}: {created:?}");
    }
}
