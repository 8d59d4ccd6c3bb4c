//! Telegram stickers (`.tgs`: gzipped Lottie) as templates over the real gRPC stack: told
//! apart by content, inflated only in the workers, rendered exactly as their JSON, and a
//! gzip bomb refused at the size limit within a second.

use crate::helpers::*;
use lottie_render::grpc::proto;
use std::io::Write;
use std::time::{Duration, Instant};

const BALL: &str = "slots-ball-colors-opacity.json";

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test]
async fn a_tgs_template_has_the_slots_of_its_json_and_renders_the_same_frames() {
    let app = spawn_app().await;
    let json = corpus(BALL);
    let plain = app.create("ball.json", json.clone()).await.unwrap();
    let sticker = app.create("ball.tgs", gzip(&json)).await.unwrap();
    assert_eq!(sticker.color_slots, plain.color_slots);
    assert_eq!(sticker.text_slots, plain.text_slots);
    assert_eq!(
        (sticker.width, sticker.height, sticker.out_frame),
        (plain.width, plain.height, plain.out_frame)
    );
    let mut outputs = Vec::new();
    for template in [&plain, &sticker] {
        let done = app
            .render(small_request(&template.template_id, proto::Format::Gif))
            .await;
        outputs.push(done.output.unwrap().sha256);
    }
    assert_eq!(outputs[0], outputs[1], "the sticker renders as its JSON");
    app.stop().await;
}

/// How long refusing a hostile archive may take: an analysis worker started and the archive
/// read up to its bound, a fraction of a second; a floor a saturated 2-core machine (load
/// about 6) holds. The bound itself is proven by the refusal's words ("inflates"): a reader
/// without it would inflate the whole 64 MiB and answer otherwise.
const REFUSAL_LIMIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_gzip_bomb_is_refused_at_the_size_limit_at_once() {
    let app = spawn_app().await;
    // 64 MiB of spaces after a valid start: some 64 KiB gzipped, eight times the limit.
    let mut huge =
        br#"{"v":"5.7.0","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[],"x":""#.to_vec();
    huge.resize(64 * 1024 * 1024, b' ');
    let bomb = gzip(&huge);
    drop(huge);
    assert!(bomb.len() < 1024 * 1024, "{}", bomb.len());
    let started = Instant::now();
    let status = app.create("bomb.tgs", bomb).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "TEMPLATE_TOO_LARGE", "{status:?}");
    assert!(status.message().contains("inflates"), "{status:?}");
    assert!(took < REFUSAL_LIMIT, "refused after {took:?}");
    // Not gzip after all: a classified refusal too.
    let status = app
        .create("broken.tgs", vec![0x1f, 0x8b, 8, 0, 0, 0])
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "TEMPLATE_INVALID", "{status:?}");
    app.stop().await;
}

/// A zip written by Python's `zipfile` (an implementation not ours), deflated: `(name,
/// bytes, is a symbolic link)` in order.
fn python_zip(entries: &[(&str, Vec<u8>, bool)]) -> Vec<u8> {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("archive.zip");
    let spec: Vec<serde_json::Value> = entries
        .iter()
        .map(|(name, bytes, link)| {
            serde_json::json!([
                name,
                base64::engine::general_purpose::STANDARD.encode(bytes),
                link
            ])
        })
        .collect();
    let script = r#"
import base64, json, sys, zipfile
entries = json.load(sys.stdin)
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as archive:
    for name, data, link in entries:
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        if link:
            info.create_system = 3
            info.external_attr = 0o120777 << 16
        archive.writestr(info, base64.b64decode(data))
"#;
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(&out)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&spec).unwrap())
        .unwrap();
    assert!(child.wait().unwrap().success());
    std::fs::read(out).unwrap()
}

fn manifest(version: &str, id: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"version": version, "generator": "test",
        "animations": [{"id": id}]}))
    .unwrap()
}

#[tokio::test]
async fn a_webp_of_a_dotlottie_is_embedded_as_the_image_it_is() {
    use image::ImageEncoder;
    let app = spawn_app().await;
    // (Versions 1 and 2 as dotlottie-js writes them: `dotlottie_js`.)
    // Version 2: a/ and i/, an image layer showing a green WebP of the archive.
    let mut webp = Vec::new();
    let green = image::RgbaImage::from_pixel(100, 100, image::Rgba([0, 255, 0, 255]));
    image::codecs::webp::WebPEncoder::new_lossless(&mut webp)
        .write_image(green.as_raw(), 100, 100, image::ExtendedColorType::Rgba8)
        .unwrap();
    let photo = super::dotlottie_js::image_layer_template(
        serde_json::json!({"id": "img", "w": 100, "h": 100, "u": "/i/", "p": "green.webp", "e": 0}),
    );
    let v2 = python_zip(&[
        ("manifest.json", manifest("2", "photo"), false),
        ("a/photo.json", serde_json::to_vec(&photo).unwrap(), false),
        ("i/green.webp", webp, false),
    ]);
    let template = app.create("photo.lottie", v2).await.unwrap();
    assert_eq!(template.image_slots.len(), 1);
    assert!(template.image_slots[0].has_default);
    let mut request = small_request(&template.template_id, proto::Format::Webm);
    request.output.as_mut().unwrap().width = 100;
    let done = app.render(request).await;
    let webm = app.download(&done.job_id).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.webm");
    std::fs::write(&path, webm).unwrap();
    let frame = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-c:v", "libvpx-vp9", "-i"])
        .arg(&path)
        .args(["-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgba", "-"])
        .output()
        .unwrap()
        .stdout;
    let centre = &frame[(50 * 100 + 50) * 4..(50 * 100 + 50) * 4 + 4];
    assert!(
        centre[1] > 200 && centre[0] < 60 && centre[3] > 200,
        "{centre:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn hostile_dotlottie_archives_are_refused_with_their_reason() {
    let app = spawn_app().await;
    let ball = corpus(BALL);
    let with = |extra: Vec<(&'static str, Vec<u8>, bool)>| {
        let mut entries = vec![
            ("manifest.json", manifest("1", "ball"), false),
            ("animations/ball.json", ball.clone(), false),
        ];
        entries.extend(extra);
        python_zip(&entries)
    };
    // A zip bomb: 64 MiB of spaces in the animation's entry, some 64 KiB deflated.
    let mut huge = ball.clone();
    huge.resize(64 * 1024 * 1024, b' ');
    let bomb = python_zip(&[
        ("manifest.json", manifest("1", "ball"), false),
        ("animations/ball.json", huge, false),
    ]);
    let names: Vec<String> = (0..20_000).map(|index| format!("x/{index}")).collect();
    let many = python_zip(
        &names
            .iter()
            .map(|name| (name.as_str(), Vec::new(), false))
            .collect::<Vec<_>>(),
    );
    // A font list naming a file of the archive that is no font.
    let mut text: serde_json::Value =
        serde_json::from_slice(&corpus("slots-text-document-sid.json")).unwrap();
    text["fonts"]["list"][0]["fPath"] = "/f/brand.ttf".into();
    let not_a_font = python_zip(&[
        ("manifest.json", manifest("2", "text"), false),
        ("a/text.json", serde_json::to_vec(&text).unwrap(), false),
        ("f/brand.ttf", b"<html>not a font</html>".to_vec(), false),
    ]);
    let cases = [
        (
            "a font that is not one",
            not_a_font,
            "TEMPLATE_INVALID",
            "not a TrueType or OpenType font",
        ),
        ("zip bomb", bomb, "TEMPLATE_TOO_LARGE", "inflates"),
        ("20,000 entries", many, "TEMPLATE_INVALID", "entries"),
        (
            "a name outside the archive",
            with(vec![("../evil.json", b"{}".to_vec(), false)]),
            "TEMPLATE_INVALID",
            "outside the archive",
        ),
        (
            "a symbolic link",
            with(vec![("images/link.png", b"/etc/passwd".to_vec(), true)]),
            "TEMPLATE_INVALID",
            "symbolic link",
        ),
        (
            "no manifest",
            python_zip(&[("animations/ball.json", ball.clone(), false)]),
            "TEMPLATE_INVALID",
            "manifest",
        ),
    ];
    for (what, archive, expected, words) in cases {
        let started = Instant::now();
        let status = app.create("hostile.lottie", archive).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{what}: {status:?}"
        );
        assert_eq!(reason(&status), expected, "{what}: {status:?}");
        assert!(status.message().contains(words), "{what}: {status:?}");
        assert!(
            started.elapsed() < REFUSAL_LIMIT,
            "{what}: {:?}",
            started.elapsed()
        );
    }
    app.stop().await;
}
