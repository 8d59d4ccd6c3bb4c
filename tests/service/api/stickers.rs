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

#[tokio::test]
async fn a_gzip_bomb_is_refused_at_the_size_limit_within_a_second() {
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
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    // Not gzip after all: a classified refusal too.
    let status = app
        .create("broken.tgs", vec![0x1f, 0x8b, 8, 0, 0, 0])
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "TEMPLATE_INVALID", "{status:?}");
    app.stop().await;
}
