//! The third round (issue 42), what one request can do: messages of millions of empty
//! elements over gRPC and the door (decode amplification), webhook URLs that stand for
//! internal addresses, replacement images that decode to gigapixels, copies of the largest
//! raw uploads, JSON with a member twice. The pools' cases are in `third_round_pools`.

use super::images::one_pixel_png_uri;
use super::raw_calls::{
    attacker_address, connect_from, door_call, door_head, grpc_call, grpc_frame, grpc_headers,
    length_delimited, outcome_naming_field,
};
use super::templates::{animation, image_layer, png_chunk};
use super::{counted, Case, Target, ATTACKER_KEY, STOCK_CLIENT_MESSAGE_LIMIT};
use crate::cli::square_output;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Empty gradient stops of the gRPC SubmitRender: 16 MiB of them, two bytes each (8 MiB of
/// them grew the server by 1.6 GB; 16 MiB aborted one under a 3 GiB limit).
const WIRE_EMPTY_STOPS: usize = 8 << 20;
/// Empty stops of the door's JSON SubmitRender, `{},` each: 16 MiB of them.
const JSON_EMPTY_STOPS: usize = (16 << 20) / 3;
/// Empty entries of the CreateTemplate fonts map, two bytes each: 8 MiB.
const EMPTY_FONT_ENTRIES: usize = 4 << 20;
/// Replacement images of the image case, and their side: every slot a request may fill, at
/// the largest an image may be.
const SOLID_IMAGES: usize = 16;
const SOLID_SIDE: u32 = 4096;
/// How long the image case waits for a job it was given to end.
const JOB_END_LIMIT: Duration = Duration::from_secs(90);
/// The raw template uploads sent at once, from as many addresses, and the size of each:
/// just under CreateTemplate's 64 MiB.
const RAW_UPLOADS: usize = 4;
const RAW_UPLOAD_BYTES: usize = 63 << 20;
const SUBMIT_RENDER: &str = crate::grpc::methods::Method::SubmitRender.path();
const CREATE_TEMPLATE: &str = crate::grpc::methods::Method::CreateTemplate.path();

/// Webhook URLs whose hosts stand for loopback, link-local or special addresses, each as
/// the issue found it accepted (or accepted at submit): NAT64, 6to4, Teredo, SIIT,
/// IETF protocol assignments, benchmarking, and IPv4 written as browsers read it.
const INTERNAL_WEBHOOK_URLS: [&str; 10] = [
    "https://[64:ff9b::7f00:1]/hook",
    "https://[64:ff9b::a9fe:a9fe]/latest/meta-data",
    "https://[2002:7f00:1::1]/hook",
    "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",
    "https://[::ffff:0:7f00:1]/hook",
    "https://192.0.0.8/hook",
    "https://198.18.0.1/hook",
    "https://2130706433/hook",
    "https://0x7f.1/hook",
    "https://127.1/hook",
];

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "submit-16mib-of-empty-gradient-stops",
            expected: "InvalidArgument REQUEST_INVALID naming the stops, from a scan of the bytes before anything is decoded (8 MiB of them took the server up by 1.6 GB)",
            requests: 1,
            attack: |target| Box::pin(wire_empty_stops(target)),
        },
        Case {
            name: "door-16mib-of-empty-gradient-stops-json",
            expected: "HTTP 422 REQUEST_INVALID naming the stops, from the door's scan of the JSON (took the server up by 970 MB)",
            requests: 1,
            attack: |target| Box::pin(json_empty_stops(target)),
        },
        Case {
            name: "create-template-8mib-map-of-empty-fonts",
            expected: "InvalidArgument REQUEST_INVALID naming fonts, before decoding (took the server up by 470 MB)",
            requests: 1,
            attack: |target| Box::pin(empty_fonts(target)),
        },
        Case {
            name: "webhook-urls-nat64-6to4-teredo-siit-decimal",
            expected: "each InvalidArgument REQUEST_INVALID naming notify.webhook_url at submit (a URL let through would meet TEMPLATE_NOT_FOUND: no job, nothing sent)",
            requests: INTERNAL_WEBHOOK_URLS.len() as u32,
            attack: |target| Box::pin(internal_webhooks(target)),
        },
        Case {
            name: "16-solid-4096px-images-in-a-100px-still",
            expected: "InvalidArgument JOB_TOO_LARGE at submit (the images' 268 megapixels in the job budget), or a job that ends within its budget; never a retryable deadline (took 17.8 s of a worker, FAILED retryable under load)",
            requests: 2,
            attack: |target| Box::pin(solid_images(target)),
        },
        Case {
            name: "door-4x63mib-raw-template-uploads",
            expected: "each HTTP 422 TEMPLATE_TOO_LARGE (past 8 MiB) or 429 REQUEST_BUFFERS_BUSY; server RSS about the bodies once (252 MiB took 619 MB)",
            requests: RAW_UPLOADS as u32,
            attack: |target| Box::pin(raw_uploads(target)),
        },
        Case {
            name: "door-json-duplicate-members",
            expected: "each HTTP 422 REQUEST_INVALID (a member twice, by one name or both, or a map key twice; was: the last one won)",
            requests: 3,
            attack: |target| Box::pin(duplicate_members(target)),
        },
    ]
}

/// A template id no template has: a request that passes its checks is refused by admission.
fn unknown_template() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A PNG still of 100×100, of the first frame.
fn still_spec() -> Option<proto::OutputSpec> {
    let mut output = square_output(proto::Format::Png, 30, 100)?;
    output.at = Some(proto::TimePoint {
        point: Some(proto::time_point::Point::Frame(0)),
    });
    Some(output)
}

/// [`still_spec`], encoded.
fn still_output() -> Vec<u8> {
    still_spec()
        .map(|output| prost::Message::encode_to_vec(&output))
        .unwrap_or_default()
}

/// The headers of a SubmitRender of the attacker's under a fresh idempotency key.
fn keyed_submit(target: &Target) -> anyhow::Result<http::Request<()>> {
    let mut headers = grpc_headers(target, SUBMIT_RENDER, Some(ATTACKER_KEY))?;
    headers.headers_mut().insert(
        "idempotency-key",
        format!("bench-third-{}", uuid::Uuid::new_v4()).parse()?,
    );
    Ok(headers)
}

/// One SubmitRender whose one gradient holds [`WIRE_EMPTY_STOPS`] empty stops, written as
/// bytes (RenderRequest.modifications = 2, Modifications.gradients = 6, a map entry's key 1
/// and value 2, Gradient.stops = 1).
async fn wire_empty_stops(target: &Target) -> anyhow::Result<String> {
    let gradient = [0x0a, 0x00].repeat(WIRE_EMPTY_STOPS);
    let mut entry = Vec::with_capacity(gradient.len() + 16);
    length_delimited(1, b"g", &mut entry);
    length_delimited(2, &gradient, &mut entry);
    drop(gradient);
    let mut modifications = Vec::with_capacity(entry.len() + 16);
    length_delimited(6, &entry, &mut modifications);
    drop(entry);
    let mut request = Vec::with_capacity(modifications.len() + 128);
    length_delimited(1, unknown_template().as_bytes(), &mut request);
    length_delimited(2, &modifications, &mut request);
    length_delimited(3, &still_output(), &mut request);
    drop(modifications);
    let size = request.len();
    let answer = grpc_call(target, keyed_submit(target)?, grpc_frame(&request)).await?;
    Ok(format!("{answer} ({:.1} MiB sent)", mib(size)))
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// The door's SubmitRender of one gradient of [`JSON_EMPTY_STOPS`] empty stops.
async fn json_empty_stops(target: &Target) -> anyhow::Result<String> {
    let mut body = format!(
        r#"{{"templateId":"{}","output":{{"format":"FORMAT_PNG","width":100,"height":100,"at":{{"frame":0}}}},"modifications":{{"gradients":{{"g":{{"stops":["#,
        unknown_template()
    )
    .into_bytes();
    body.reserve(JSON_EMPTY_STOPS * 3 + 8);
    for index in 0..JSON_EMPTY_STOPS {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(b"{}");
    }
    body.extend_from_slice(b"]}}}}");
    let key = format!("bench-third-{}", uuid::Uuid::new_v4());
    let head = door_head(
        target,
        ("POST", "/v1/renders"),
        Some(ATTACKER_KEY),
        Some(body.len()),
        &[
            ("content-type", "application/json"),
            ("idempotency-key", &key),
        ],
    );
    let stream = tokio::net::TcpStream::connect(target.address).await?;
    let (answer, _) = door_call(stream, &head, &body).await?;
    Ok(format!("{answer} ({:.1} MiB sent)", mib(body.len())))
}

/// One CreateTemplate whose fonts map holds [`EMPTY_FONT_ENTRIES`] empty entries
/// (CreateTemplateRequest.fonts = 3), beside a small valid template.
async fn empty_fonts(target: &Target) -> anyhow::Result<String> {
    let mut request = Vec::with_capacity(2 * EMPTY_FONT_ENTRIES + 1024);
    length_delimited(1, b"fonts", &mut request);
    let template = serde_json::to_vec(&animation(Vec::new(), Vec::new()))?;
    length_delimited(2, &template, &mut request);
    for _ in 0..EMPTY_FONT_ENTRIES {
        request.extend_from_slice(&[0x1a, 0x00]);
    }
    let headers = grpc_headers(target, CREATE_TEMPLATE, Some(ATTACKER_KEY))?;
    let answer = grpc_call(target, headers, grpc_frame(&request)).await?;
    Ok(format!("{answer} ({:.1} MiB sent)", mib(request.len())))
}

/// SubmitRenders naming each of [`INTERNAL_WEBHOOK_URLS`], of a template that does not exist.
async fn internal_webhooks(target: &Target) -> anyhow::Result<String> {
    let mut renders = RenderServiceClient::new(target.channel().await?);
    let mut answers = BTreeMap::<String, usize>::new();
    for url in INTERNAL_WEBHOOK_URLS {
        let request = proto::RenderRequest {
            template_id: unknown_template(),
            modifications: None,
            output: still_spec(),
            notify: Some(proto::Notify {
                webhook_url: url.into(),
                events: Vec::new(),
            }),
            theme: String::new(),
        };
        let mut request = target.as_tenant(request, ATTACKER_KEY)?;
        request.metadata_mut().insert(
            "idempotency-key",
            format!("bench-third-{}", uuid::Uuid::new_v4()).parse()?,
        );
        let answer = match renders.submit_render(request).await {
            Ok(_) => format!("OK (accepted: {url})"),
            Err(status) => outcome_naming_field(status),
        };
        *answers.entry(answer).or_default() += 1;
    }
    Ok(counted(answers))
}

/// A template of [`SOLID_IMAGES`] image layers, each showing an asset of its own (100², a
/// 1×1 default): as many image slots.
fn image_slots_template() -> serde_json::Value {
    let layers = (0..SOLID_IMAGES)
        .map(|index| {
            let mut layer = image_layer(&format!("image{index}"));
            layer["ind"] = json!(index + 1);
            layer
        })
        .collect();
    let assets = (0..SOLID_IMAGES)
        .map(|index| {
            json!({"id": format!("image{index}"), "w": 100, "h": 100, "e": 1, "u": "",
                   "p": one_pixel_png_uri()})
        })
        .collect();
    animation(layers, assets)
}

/// Solid [`SOLID_SIDE`]² images: half PNGs (each made distinct by a text chunk), half
/// lossless WebPs.
fn solid_image_files() -> anyhow::Result<Vec<Vec<u8>>> {
    use image::ImageEncoder;
    let pixels = image::RgbImage::from_pixel(SOLID_SIDE, SOLID_SIDE, image::Rgb([200, 30, 30]));
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png).write_image(
        pixels.as_raw(),
        SOLID_SIDE,
        SOLID_SIDE,
        image::ExtendedColorType::Rgb8,
    )?;
    let mut webp = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut webp).encode(
        pixels.as_raw(),
        SOLID_SIDE,
        SOLID_SIDE,
        image::ExtendedColorType::Rgb8,
    )?;
    // IEND is the last 12 bytes: the text goes before it.
    let iend = png.len().saturating_sub(12);
    Ok((0..SOLID_IMAGES)
        .map(|index| {
            if index % 2 == 1 {
                return webp.clone();
            }
            let mut distinct = png[..iend].to_vec();
            png_chunk(
                &mut distinct,
                b"tEXt",
                format!("Comment\0{index}").as_bytes(),
            );
            distinct.extend_from_slice(&png[iend..]);
            distinct
        })
        .collect())
}

/// The attacker's 16-slot template, then a 100×100 PNG still of it with a solid 4096²
/// image in every slot; the job's end when it is given one.
async fn solid_images(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let template = TemplateServiceClient::new(channel.clone())
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT)
        .create_template(target.template_request(
            "sixteen images",
            serde_json::to_vec(&image_slots_template())?,
            ATTACKER_KEY,
        )?)
        .await?
        .into_inner();
    let files = tokio::task::spawn_blocking(solid_image_files).await??;
    let sent: usize = files.iter().map(Vec::len).sum();
    let images = files
        .into_iter()
        .enumerate()
        .map(|(index, data)| {
            let input = proto::ImageInput {
                source: Some(proto::image_input::Source::Data(data.into())),
                fit: proto::ImageFit::Cover as i32,
            };
            (format!("image{index}"), input)
        })
        .collect();
    let request = proto::RenderRequest {
        template_id: template.template_id,
        modifications: Some(proto::Modifications {
            images,
            ..Default::default()
        }),
        output: still_spec(),
        notify: None,
        theme: String::new(),
    };
    let mut request = target.as_tenant(request, ATTACKER_KEY)?;
    request.metadata_mut().insert(
        "idempotency-key",
        format!("bench-third-{}", uuid::Uuid::new_v4()).parse()?,
    );
    let mut renders = RenderServiceClient::new(channel);
    let started = Instant::now();
    let job = match renders.submit_render(request).await {
        Ok(job) => job.into_inner(),
        Err(status) => {
            return Ok(format!(
                "{} ({} KiB sent)",
                outcome_naming_field(status),
                sent / 1024
            ))
        }
    };
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
        if terminal.contains(&seen.state) || started.elapsed() > JOB_END_LIMIT {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let state = proto::JobState::try_from(end.state).map_or_else(
        |_| format!("state {}", end.state),
        |state| format!("{state:?}"),
    );
    let error = end.error.map_or_else(String::new, |error| {
        format!(" {} retryable={}", error.reason, error.retryable)
    });
    Ok(format!(
        "accepted; {state}{error} after {:.1} s ({} KiB sent)",
        started.elapsed().as_secs_f64(),
        sent / 1024
    ))
}

/// [`RAW_UPLOADS`] raw uploads (`POST /v1/templates?name=…`, the body the Lottie file) of
/// [`RAW_UPLOAD_BYTES`] each at once, from as many addresses: a valid animation's start
/// and a string of spaces.
async fn raw_uploads(target: &Target) -> anyhow::Result<String> {
    let mut body = serde_json::to_vec(&animation(Vec::new(), Vec::new()))?;
    body.pop();
    body.extend_from_slice(br#","x":""#);
    body.resize(RAW_UPLOAD_BYTES - 2, b' ');
    body.extend_from_slice(br#""}"#);
    let body = &body;
    let uploads = (0..RAW_UPLOADS).map(|index| async move {
        let head = door_head(
            target,
            ("POST", &format!("/v1/templates?name=raw-{index}")),
            None,
            Some(body.len()),
            &[("content-type", "application/json")],
        );
        let stream = connect_from(attacker_address(index), target.address).await?;
        let (answer, _) = door_call(stream, &head, body).await?;
        Ok::<_, anyhow::Error>(answer.to_string())
    });
    let mut answers = BTreeMap::<String, usize>::new();
    for answer in futures_util::future::join_all(uploads).await {
        let answer = answer.unwrap_or_else(|error| format!("bench error: {error:#}"));
        *answers.entry(answer).or_default() += 1;
    }
    Ok(counted(answers))
}

/// The door's SubmitRender with a member twice: by its JSON name, by both its names, and a
/// map key twice.
async fn duplicate_members(target: &Target) -> anyhow::Result<String> {
    let output = r#""output":{"format":"FORMAT_PNG","width":100,"height":100,"at":{"frame":0}}"#;
    let (first, second) = (unknown_template(), unknown_template());
    let bodies = [
        format!(r#"{{"templateId":"{first}","templateId":"{second}",{output}}}"#),
        format!(r#"{{"templateId":"{first}","template_id":"{second}",{output}}}"#),
        format!(
            r#"{{"templateId":"{first}",{output},"modifications":{{"texts":{{"title":"a","title":"b"}}}}}}"#
        ),
    ];
    let mut answers = BTreeMap::<String, usize>::new();
    for body in bodies {
        let key = format!("bench-third-{}", uuid::Uuid::new_v4());
        let head = door_head(
            target,
            ("POST", "/v1/renders"),
            Some(ATTACKER_KEY),
            Some(body.len()),
            &[
                ("content-type", "application/json"),
                ("idempotency-key", &key),
            ],
        );
        let stream = tokio::net::TcpStream::connect(target.address).await?;
        let (answer, _) = door_call(stream, &head, body.as_bytes()).await?;
        *answers.entry(answer.to_string()).or_default() += 1;
    }
    Ok(counted(answers))
}
