//! Image slots (issue 24): replacement images in SubmitRender and uploaded ones.
//!
//! The server reads only an image's header (its format, its size, a JPEG's scan count:
//! linear, nothing decoded), so a lying header is refused at submit for the cost of a
//! request; an image whose header passes but whose data does not decode reaches a worker,
//! which fails the job IMAGE_INVALID (not retryable) within its budget; uploads stop at the
//! tenant's quota.

use super::templates::{animation, image_layer, png_chunk};
use super::{counted, outcome, Case, Target, ATTACKER_KEY, STOCK_CLIENT_MESSAGE_LIMIT};
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use std::collections::BTreeMap;
use tonic::transport::Channel;

/// Submissions of 16 lying images each.
const HEADER_BOMB_SUBMISSIONS: usize = 100;
/// Renders whose 16 MP image is cut short.
const UNDECODABLE_RENDERS: usize = 8;
/// Uploads: a thousand fill the quota, the rest are refused.
const UPLOADS: usize = crate::storage::images::MAX_IMAGES_PER_TENANT + 20;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "100-submits-16-lying-images",
            expected: "InvalidArgument REQUEST_INVALID at submit, no job, no worker",
            requests: HEADER_BOMB_SUBMISSIONS as u32 + 1,
            attack: |target| Box::pin(lying_headers(target)),
        },
        Case {
            name: "8-renders-undecodable-image-16mp",
            expected: "FAILED IMAGE_INVALID (not retryable), in the worker",
            requests: UNDECODABLE_RENDERS as u32 + 1,
            attack: |target| Box::pin(undecodable(target)),
        },
        Case {
            name: "1020-image-uploads",
            expected: "1000× OK, then ResourceExhausted IMAGE_QUOTA_EXCEEDED",
            requests: UPLOADS as u32,
            attack: |target| Box::pin(uploads(target)),
        },
    ]
}

/// A PNG header declaring `width` × `height` (IHDR only, then one empty IDAT and IEND):
/// what a header-only check sees as an image of that size.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    png_chunk(&mut png, b"IHDR", &ihdr);
    png_chunk(
        &mut png,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    png_chunk(&mut png, b"IEND", &[]);
    png
}

/// A progressive JPEG (8×8) of 5,000 scans of a few bytes each.
fn many_scans() -> Vec<u8> {
    let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0];
    for _ in 0..5000 {
        jpeg.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0, 0x12, 0x34]);
    }
    jpeg.extend([0xFF, 0xD9]);
    jpeg
}

/// A 1×1 transparent PNG as a data URI: an image asset's default, the slot's placeholder.
pub(super) fn one_pixel_png_uri() -> String {
    use base64::Engine;
    let mut default = b"\x89PNG\r\n\x1a\n".to_vec();
    png_chunk(
        &mut default,
        b"IHDR",
        &[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0],
    );
    // zlib of one filter byte and four zero bytes (a transparent pixel).
    png_chunk(
        &mut default,
        b"IDAT",
        &[
            0x78, 0x9c, 0x63, 0x60, 0x00, 0x02, 0x00, 0x00, 0x05, 0x00, 0x01,
        ],
    );
    png_chunk(&mut default, b"IEND", &[]);
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(default)
    )
}

/// A template of one image layer showing asset "photo" (100², a 1×1 default).
fn photo_template() -> serde_json::Value {
    animation(
        vec![image_layer("photo")],
        vec![
            serde_json::json!({"id": "photo", "w": 100, "h": 100, "e": 1, "u": "", "p": one_pixel_png_uri()}),
        ],
    )
}

/// The attacker's template of [`photo_template`]; its id.
async fn photo_template_id(target: &Target, channel: Channel) -> anyhow::Result<String> {
    let mut templates =
        TemplateServiceClient::new(channel).max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let request = target.template_request(
        "photo",
        serde_json::to_vec(&photo_template())?,
        ATTACKER_KEY,
    )?;
    Ok(templates
        .create_template(request)
        .await?
        .into_inner()
        .template_id)
}

/// A GIF render of `template_id` with `images` (slot → bytes), keyed.
fn render_request(
    target: &Target,
    template_id: &str,
    images: Vec<(String, Vec<u8>)>,
) -> anyhow::Result<tonic::Request<proto::RenderRequest>> {
    let request = proto::RenderRequest {
        template_id: template_id.into(),
        modifications: Some(proto::Modifications {
            images: images
                .into_iter()
                .map(|(slot, data)| {
                    (
                        slot,
                        proto::ImageInput {
                            source: Some(proto::image_input::Source::Data(data.into())),
                            fit: proto::ImageFit::Cover as i32,
                        },
                    )
                })
                .collect(),
            ..Default::default()
        }),
        output: crate::cli::square_output(proto::Format::Gif, 30, 100),
        notify: None,
        theme: String::new(),
    };
    let mut request = target.as_tenant(request, ATTACKER_KEY)?;
    request.metadata_mut().insert(
        "idempotency-key",
        format!("bench-images-{}", uuid::Uuid::new_v4()).parse()?,
    );
    Ok(request)
}

/// Submissions of 16 images whose headers lie (8192² PNGs: past the pixel limit; 5,000-scan
/// JPEGs), a few bytes each: each is refused from its headers.
async fn lying_headers(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let template_id = photo_template_id(target, channel.clone()).await?;
    let mut renders = RenderServiceClient::new(channel);
    let mut answers = BTreeMap::<String, usize>::new();
    for round in 0..HEADER_BOMB_SUBMISSIONS {
        let images = (0..16)
            .map(|index| {
                let bytes = if (round + index) % 2 == 0 {
                    png_header(8192, 8192)
                } else {
                    many_scans()
                };
                (format!("slot{index}"), bytes)
            })
            .collect();
        // The slots do not exist either: the boundary answers first.
        let answer = renders
            .submit_render(render_request(target, &template_id, images)?)
            .await;
        *answers.entry(outcome(&answer)).or_default() += 1;
    }
    Ok(counted(answers))
}

/// Renders whose image's header (4000×4000, 16 MP) passes and whose data is a few bytes:
/// the worker's decoder fails on it.
async fn undecodable(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let template_id = photo_template_id(target, channel.clone()).await?;
    let mut renders = RenderServiceClient::new(channel);
    let mut ends = BTreeMap::<String, usize>::new();
    for index in 0..UNDECODABLE_RENDERS {
        let mut image = png_header(4000, 4000);
        // Distinct bytes: distinct renders, nothing de-duplicated.
        image.extend_from_slice(&(index as u32).to_be_bytes());
        let job = renders
            .submit_render(render_request(
                target,
                &template_id,
                vec![("photo".into(), image)],
            )?)
            .await?
            .into_inner();
        let end = loop {
            let request = proto::GetRenderJobRequest {
                job_id: job.job_id.clone(),
            };
            let seen = renders
                .get_render_job(target.as_tenant(request, ATTACKER_KEY)?)
                .await?
                .into_inner();
            let terminal = [
                proto::JobState::Succeeded as i32,
                proto::JobState::Failed as i32,
                proto::JobState::Cancelled as i32,
            ];
            if terminal.contains(&seen.state) {
                break seen;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let reason = end.error.map_or_else(
            || "no error".to_owned(),
            |error| format!("{} retryable={}", error.reason, error.retryable),
        );
        *ends.entry(reason).or_default() += 1;
    }
    Ok(counted(ends))
}

/// Uploads of distinct tiny PNGs past the tenant's quota.
async fn uploads(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let mut templates = TemplateServiceClient::new(channel);
    let mut answers = BTreeMap::<String, usize>::new();
    let run = uuid::Uuid::new_v4();
    for index in 0..UPLOADS {
        let mut image = png_header(1, 1);
        // Distinct images: each a new one for the quota.
        png_chunk(&mut image, b"tEXt", format!("{run} {index}").as_bytes());
        let request = proto::UploadImageRequest { data: image.into() };
        let answer = templates
            .upload_image(target.as_tenant(request, ATTACKER_KEY)?)
            .await;
        *answers.entry(outcome(&answer)).or_default() += 1;
    }
    Ok(counted(answers))
}
