//! The first round of attacks: paths, devices, decoder and glyph bombs, stream
//! floods, fan-out and a poisoned listing.

use super::{
    animation, fonts, image_layer, outcome, parent_chain, png_chunk, raw_connection, text_layer,
    Case, Target, STOCK_CLIENT_MESSAGE_LIMIT,
};
use crate::cli::square_output;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use base64::Engine as _;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tonic::{Request, Status};

/// Watch streams the watcher case opens (the started server allows 64).
const WATCH_STREAMS: usize = 80;
/// Streams opened without a body by the stream-flood case (the old global in-flight limit).
const FLOOD_STREAMS: usize = 512;
/// Identical submissions with fresh keys in the fan-out case.
const IDENTICAL_SUBMISSIONS: usize = 60;

/// The first round of attacks: paths, devices, decoder and glyph bombs, stream floods.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "image-asset-path-traversal",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| {
                Box::pin(create(
                    target,
                    image_path_template("/../../../../usr/share/", "debian-logo.png"),
                ))
            },
        },
        Case {
            name: "image-asset-device-path",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| Box::pin(create(target, image_path_template("/dev/", "ptmx"))),
        },
        Case {
            name: "image-asset-url",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| {
                Box::pin(create(
                    target,
                    image_path_template("http://169.254.169.254/", "x.png"),
                ))
            },
        },
        Case {
            name: "embedded-png-100000x100000",
            expected: "InvalidArgument",
            requests: 1,
            attack: |target| Box::pin(create(target, huge_png_template())),
        },
        Case {
            name: "chars-glyph-memory-bomb",
            expected: "InvalidArgument TEMPLATE_TOO_COMPLEX",
            requests: 1,
            attack: |target| Box::pin(create(target, chars_memory_bomb())),
        },
        Case {
            name: "box-text-cpu-bomb",
            expected: "bounded (OK or TEMPLATE_TOO_COMPLEX)",
            requests: 1,
            attack: |target| Box::pin(create(target, box_text_cpu_bomb())),
        },
        Case {
            name: "parent-chain-5000-layers",
            expected: "OK, fast",
            requests: 1,
            attack: |target| Box::pin(create(target, parent_chain(5000))),
        },
        Case {
            name: "512-streams-without-body",
            expected: "bystander served",
            requests: FLOOD_STREAMS as u32,
            attack: |target| Box::pin(streams_without_body(target)),
        },
        Case {
            name: "headers-then-silence",
            expected: "REQUEST_BODY_TIMEOUT at the body deadline",
            requests: 1,
            attack: |target| Box::pin(headers_then_silence(target)),
        },
        Case {
            name: "80-health-watches",
            expected: "TOO_MANY_WATCHERS beyond the caller's share (24 of 64 alone)",
            requests: WATCH_STREAMS as u32,
            attack: |target| Box::pin(many_watches(target)),
        },
        Case {
            name: "60-identical-submissions-new-keys",
            expected: "QUEUE_FULL beyond capacity",
            requests: IDENTICAL_SUBMISSIONS as u32 + 1,
            attack: |target| Box::pin(identical_submissions(target)),
        },
        Case {
            name: "7mb-default-text-then-list",
            expected: "create TEMPLATE_RECORD_TOO_LARGE (record over 1 MiB); list < 4 MiB",
            requests: 2,
            attack: |target| Box::pin(huge_default_text_listing(target)),
        },
    ]
}

/// CreateTemplate of `template`; answers the outcome.
async fn create(target: &Target, template: Value) -> anyhow::Result<String> {
    let mut client = TemplateServiceClient::new(target.channel().await?)
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let answer = client
        .create_template(proto::CreateTemplateRequest {
            name: "hostile".into(),
            lottie_json: serde_json::to_vec(&template)?.into(),
            fonts: Default::default(),
            animation_id: String::new(),
        })
        .await;
    Ok(outcome(&answer))
}

fn image_path_template(directory: &str, file: &str) -> Value {
    animation(
        vec![image_layer("image")],
        vec![json!({"id": "image", "w": 64, "h": 64, "u": directory, "p": file, "e": 0})],
    )
}

/// A PNG whose header claims 100000×100000 pixels (40 GB decoded): only the signature,
/// IHDR and IEND, with correct CRCs, so a decoder believes it.
fn huge_png_template() -> Value {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&100_000u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    png_chunk(&mut png, b"IHDR", &ihdr);
    png_chunk(&mut png, b"IEND", &[]);
    let uri = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    animation(
        vec![image_layer("image")],
        vec![json!({"id": "image", "w": 100000, "h": 100000, "u": "", "p": uri, "e": 1})],
    )
}

/// The template's own glyph for "W": 64 paths of 150 vertices each, and a text of 5,000 W
/// in 4 keyframes: ~20,000 glyphs of 9,600 vertices each if expanded naively (hundreds of
/// millions of points), from a template under 1 MB.
fn chars_memory_bomb() -> Value {
    let path = |offset: f64| {
        let vertices: Vec<Value> = (0..150)
            .map(|i| {
                let angle = f64::from(i) / 150.0 * std::f64::consts::TAU;
                json!([offset + 10.0 * angle.cos(), 10.0 * angle.sin()])
            })
            .collect();
        let tangents = vec![json!([0, 0]); 150];
        json!({"ty": "sh", "ks": {"a": 0, "k": {"c": true, "v": vertices, "i": tangents, "o": tangents}}})
    };
    let shapes: Vec<Value> = (0..64).map(|i| path(f64::from(i) * 0.1)).collect();
    let glyph = json!({"ch": "W", "size": 100, "style": "Regular", "w": 60, "fFamily": "Bomb",
                       "data": {"shapes": [{"ty": "gr", "it": shapes}]}});
    let text = "W".repeat(5000);
    let documents = (0..4)
        .map(|frame| {
            json!({"s": {"s": 12, "f": "Bomb", "t": text, "j": 0, "tr": 0, "lh": 14,
                                   "ls": 0, "fc": [0, 0, 0]}, "t": frame * 5})
        })
        .collect();
    let mut template = animation(vec![text_layer(documents)], vec![]);
    template["fonts"] = fonts();
    template["chars"] = json!([glyph]);
    template
}

/// Box text that never fits (a 1×1 px box) in 1,000 keyframes: each document is shrunk and
/// wrapped again and again.
fn box_text_cpu_bomb() -> Value {
    let text = "lorem ipsum dolor sit amet ".repeat(8);
    let documents = (0..1000)
        .map(|frame| {
            json!({"s": {"s": 400, "f": "Bomb", "t": text, "j": 0, "tr": 0, "lh": 400,
                                   "ls": 0, "fc": [0, 0, 0], "sz": [1, 1], "ps": [0, 0]},
                            "t": frame})
        })
        .collect();
    let mut template = animation(vec![text_layer(documents)], vec![]);
    template["fonts"] = fonts();
    template
}

/// The headers of a ListTemplates call, whose body the caller then sends or withholds.
fn list_templates_headers(target: &Target) -> anyhow::Result<http::Request<()>> {
    Ok(http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/lottie.render.v1.TemplateService/ListTemplates",
            target.address
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?)
}

/// One HTTP/2 connection opens [`FLOOD_STREAMS`] calls with headers and no body; another
/// connection's call must still be served.
async fn streams_without_body(target: &Target) -> anyhow::Result<String> {
    let (mut client, driver) = raw_connection(target).await?;
    let mut opened = 0;
    let mut streams = Vec::new();
    for _ in 0..FLOOD_STREAMS {
        let request = list_templates_headers(target)?;
        // Beyond the server's stream limit, h2 makes the caller wait: stop there.
        match tokio::time::timeout(Duration::from_millis(200), client.clone().ready()).await {
            Ok(Ok(ready)) => client = ready,
            _ => break,
        }
        match client.send_request(request, false) {
            Ok(stream) => {
                streams.push(stream);
                opened += 1;
            }
            Err(_) => break,
        }
    }
    // Let the server receive every stream's headers before the bystander calls.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut bystander = TemplateServiceClient::new(target.channel().await?);
    let started = Instant::now();
    let answer = bystander
        .list_templates(proto::ListTemplatesRequest {
            page_size: 1,
            page_token: String::new(),
        })
        .await;
    let waited = started.elapsed();
    drop(streams);
    driver.abort();
    Ok(format!(
        "{opened} calls started without a body on one connection (h2 holds those beyond the server's stream limit); bystander {} in {:.0} ms",
        outcome(&answer),
        waited.as_secs_f64() * 1e3
    ))
}

/// One call whose headers arrive and whose body never does; answers what the server said.
async fn headers_then_silence(target: &Target) -> anyhow::Result<String> {
    let (mut client, driver) = raw_connection(target).await?;
    let request = list_templates_headers(target)?;
    let (response, _body_sender) = client.send_request(request, false)?;
    let started = Instant::now();
    let response = response.await?;
    // A refusal comes as trailers-only headers; a served call would need a body first.
    let status = Status::from_header_map(response.headers());
    let answer = match status {
        Some(status) => outcome::<()>(&Err(status)),
        None => format!("HTTP {}", response.status()),
    };
    driver.abort();
    Ok(format!(
        "{answer} after {:.1} s",
        started.elapsed().as_secs_f64()
    ))
}

/// Opens [`WATCH_STREAMS`] health Watch streams over four connections and holds them; counts
/// the answers.
async fn many_watches(target: &Target) -> anyhow::Result<String> {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(target.channel().await?);
    }
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut held = Vec::new();
    for index in 0..WATCH_STREAMS {
        let mut health = HealthClient::new(channels[index % channels.len()].clone());
        let answer = health
            .watch(HealthCheckRequest {
                service: String::new(),
            })
            .await;
        *counts.entry(outcome(&answer)).or_default() += 1;
        if let Ok(stream) = answer {
            held.push(stream.into_inner());
        }
    }
    drop(held);
    Ok(super::counted(&counts))
}

/// Registers a template that renders for a few seconds, then sends
/// [`IDENTICAL_SUBMISSIONS`] identical renders with fresh keys; counts the answers.
async fn identical_submissions(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let mut templates = TemplateServiceClient::new(channel.clone());
    let mut slow = parent_chain(20);
    slow["op"] = json!(1800);
    for layer in slow["layers"].as_array_mut().into_iter().flatten() {
        layer["op"] = json!(1800);
    }
    let template = templates
        .create_template(proto::CreateTemplateRequest {
            name: "slow".into(),
            lottie_json: serde_json::to_vec(&slow)?.into(),
            fonts: Default::default(),
            animation_id: String::new(),
        })
        .await?
        .into_inner();
    let mut renders = RenderServiceClient::new(channel);
    let run = std::process::id();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut accepted = Vec::new();
    for index in 0..IDENTICAL_SUBMISSIONS {
        let mut request = Request::new(proto::RenderRequest {
            template_id: template.template_id.clone(),
            modifications: None,
            output: square_output(proto::Format::Mp4, 60, 1920),
            notify: None,
            theme: String::new(),
        });
        request.metadata_mut().insert(
            "idempotency-key",
            format!("bench-hostile-{run}-{index}").parse()?,
        );
        let answer = renders.submit_render(request).await;
        *counts.entry(outcome(&answer)).or_default() += 1;
        if let Ok(job) = answer {
            accepted.push(job.into_inner().job_id);
        }
    }
    for job_id in accepted {
        let _ = renders
            .cancel_render_job(proto::CancelRenderJobRequest { job_id })
            .await;
    }
    Ok(super::counted(&counts))
}

/// A template whose text slot's default is 7 MB, then ListTemplates with a stock client's
/// 4 MiB message limit.
async fn huge_default_text_listing(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let mut templates =
        TemplateServiceClient::new(channel).max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let text = "x".repeat(7 * 1000 * 1000);
    let document = json!({"s": {"s": 12, "f": "Bomb", "t": text, "j": 0, "tr": 0, "lh": 14,
                               "ls": 0, "fc": [0, 0, 0]}, "t": 0});
    let mut template = animation(vec![text_layer(vec![document])], vec![]);
    template["fonts"] = fonts();
    let created = templates
        .create_template(proto::CreateTemplateRequest {
            name: "huge default".into(),
            lottie_json: serde_json::to_vec(&template)?.into(),
            fonts: Default::default(),
            animation_id: String::new(),
        })
        .await;
    let listed = templates
        .list_templates(proto::ListTemplatesRequest {
            page_size: 100,
            page_token: String::new(),
        })
        .await;
    let size = listed
        .as_ref()
        .map(|page| prost::Message::encoded_len(page.get_ref()))
        .unwrap_or_default();
    Ok(format!(
        "create {}; list {} ({:.1} KiB)",
        outcome(&created),
        outcome(&listed),
        size as f64 / 1024.0
    ))
}
