//! Packed templates (issue 24): Telegram stickers (`.tgs`, gzip) and dotLottie archives
//! (`.lottie`, zip), unpacked in the analysis worker only, each entry through a bound. The
//! server only sees that they are packed (their first bytes) and hands them on.

use super::templates::animation;
use super::{outcome, Case, Target, ATTACKER_KEY, STOCK_CLIENT_MESSAGE_LIMIT};
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use std::io::Write;

/// Entries of the crowded archive: past the entry limit (1,000) and within the 8 MiB size.
const CROWDED_ENTRIES: usize = 50_000;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "packed-tgs-gzip-bomb-256mib",
            expected: "InvalidArgument TEMPLATE_TOO_LARGE (stops at 8 MiB inflated)",
            requests: 1,
            attack: |target| Box::pin(create(target, gzip_bomb())),
        },
        Case {
            name: "packed-lottie-zip-bomb-256mib",
            expected: "InvalidArgument TEMPLATE_TOO_LARGE (stops at 8 MiB inflated)",
            requests: 1,
            attack: |target| Box::pin(create(target, zip_bomb())),
        },
        Case {
            name: "packed-lottie-50000-entries",
            expected: "InvalidArgument TEMPLATE_INVALID (over 1,000 entries)",
            requests: 1,
            attack: |target| Box::pin(create(target, crowded())),
        },
        Case {
            name: "packed-lottie-entry-outside-the-archive",
            expected: "InvalidArgument TEMPLATE_INVALID (../ name)",
            requests: 1,
            attack: |target| Box::pin(create(target, escaping())),
        },
    ]
}

/// CreateTemplate of `bytes` as the attacking tenant; the answer and the size sent.
async fn create(target: &Target, bytes: anyhow::Result<Vec<u8>>) -> anyhow::Result<String> {
    let bytes = bytes?;
    let size = bytes.len();
    let mut client = TemplateServiceClient::new(target.channel().await?)
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let answer = client
        .create_template(target.template_request("packed", bytes, ATTACKER_KEY)?)
        .await;
    Ok(format!("{} ({} KiB sent)", outcome(&answer), size / 1024))
}

/// A valid animation's start, then 256 MiB of spaces in a string: 8 MiB is the limit.
fn padded_animation() -> anyhow::Result<Vec<u8>> {
    let mut json = serde_json::to_vec(&animation(Vec::new(), Vec::new()))?;
    json.pop();
    json.extend_from_slice(br#","x":""#);
    json.resize(json.len() + 256 * 1024 * 1024, b' ');
    json.extend_from_slice(br#""}"#);
    Ok(json)
}

fn gzip_bomb() -> anyhow::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&padded_animation()?)?;
    Ok(encoder.finish()?)
}

/// A dotLottie archive of `entries` (name, bytes), deflated.
fn archive(entries: Vec<(String, Vec<u8>)>) -> anyhow::Result<Vec<u8>> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        writer.start_file(name, options)?;
        writer.write_all(&bytes)?;
    }
    Ok(writer.finish()?.into_inner())
}

fn manifest() -> (String, Vec<u8>) {
    (
        "manifest.json".into(),
        br#"{"version":"1","animations":[{"id":"a"}]}"#.to_vec(),
    )
}

fn zip_bomb() -> anyhow::Result<Vec<u8>> {
    archive(vec![
        manifest(),
        ("animations/a.json".into(), padded_animation()?),
    ])
}

fn crowded() -> anyhow::Result<Vec<u8>> {
    let mut entries = vec![manifest()];
    entries.extend((0..CROWDED_ENTRIES).map(|index| (format!("{index}"), Vec::new())));
    archive(entries)
}

fn escaping() -> anyhow::Result<Vec<u8>> {
    let json = serde_json::to_vec(&animation(Vec::new(), Vec::new()))?;
    archive(vec![
        manifest(),
        ("animations/a.json".into(), json),
        ("../../etc/cron.d/x".into(), b"* * * * * root true".to_vec()),
    ])
}
