//! The outputs of issue 26 attacked: a long animated WebP (whose encoder holds every frame), a
//! ProRes job past the job budget, and a still named by a marker of a hundred kilobytes. Each
//! is refused at admission, before any worker starts.

use super::jobs::{attackers, attackers_template, small_render};
use super::templates::parent_chain;
use super::{outcome, Case, Target};
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use serde_json::json;

/// A marker name far past the 200 characters a request may give.
const MARKER_NAME_BYTES: usize = 100 * 1024;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "animated-webp-60s-1920-60fps",
            expected: "InvalidArgument OUTPUT_TOO_LONG",
            requests: 1,
            attack: |target| Box::pin(submit(target, Output::LongWebp)),
        },
        Case {
            name: "prores-xq-600s-1920-60fps",
            expected: "InvalidArgument JOB_TOO_LARGE",
            requests: 1,
            attack: |target| Box::pin(submit(target, Output::HugeProres)),
        },
        Case {
            name: "png-at-a-100kib-marker-name",
            expected: "InvalidArgument REQUEST_INVALID",
            requests: 1,
            attack: |target| Box::pin(submit(target, Output::HugeMarker)),
        },
    ]
}

#[derive(Clone, Copy)]
enum Output {
    LongWebp,
    HugeProres,
    HugeMarker,
}

/// Registers a template of `seconds` at 30 fps and submits the case's output of it at
/// 1920², 60 fps.
async fn submit(target: &Target, output: Output) -> anyhow::Result<String> {
    let seconds = match output {
        Output::LongWebp => 60,
        Output::HugeProres => 600,
        Output::HugeMarker => 2,
    };
    let mut template = parent_chain(20);
    template["op"] = json!(seconds * 30);
    for layer in template["layers"].as_array_mut().into_iter().flatten() {
        layer["op"] = json!(seconds * 30);
    }
    let channel = target.channel().await?;
    let template_id = attackers_template(target, channel.clone(), template).await?;
    let mut request = small_render(&template_id, 1920);
    if let Some(spec) = request.output.as_mut() {
        (spec.height, spec.fps) = (1920, 60);
        match output {
            Output::LongWebp => spec.format = proto::Format::Webp as i32,
            Output::HugeProres => {
                spec.format = proto::Format::MovProres4444 as i32;
                spec.quality = proto::Quality::High as i32;
            }
            Output::HugeMarker => {
                spec.format = proto::Format::Png as i32;
                spec.at = Some(proto::TimePoint {
                    point: Some(proto::time_point::Point::Marker(
                        "m".repeat(MARKER_NAME_BYTES),
                    )),
                });
            }
        }
    }
    let key = format!("bench-output-{}", uuid::Uuid::new_v4());
    let answer = RenderServiceClient::new(channel)
        .submit_render(attackers(target, request, &key)?)
        .await;
    Ok(outcome(&answer))
}
