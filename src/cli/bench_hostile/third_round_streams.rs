//! The third round (issue 42) against the streams a caller can hold open, from eight
//! loopback addresses at once (127.0.0.2 to .9): downloads never read, and watches over gRPC
//! and the door's server-sent events. The bystander tenant watches and downloads its own
//! job from 127.0.0.1 meanwhile.

use super::images::one_pixel_png_uri;
use super::raw_calls::{
    attacker_address, connect_from, door_call, door_head, grpc_frame, grpc_headers, h2_from,
    open_call, HeldCall,
};
use super::templates::{animation, image_layer};
use super::third_round_pools::{timed, ADDRESSES};
use super::{counted, parent_chain, Case, Target};
use super::{BYSTANDER_KEY, BYSTANDER_LIMIT};
use crate::cli::square_output;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use bytes::Bytes;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Watch streams each address opens (the 256), and the gRPC streams one HTTP/2
/// connection carries at most (the server's 100).
const WATCHES_PER_ADDRESS: usize = 256;
const STREAMS_PER_CONNECTION: usize = 100;
/// Unread downloads each address opens (the 16).
const DOWNLOADS_PER_ADDRESS: usize = 16;
/// The side of the attackers' output to download, a still of noise: 1800² pixels of RGB,
/// some 10 MB, more than the 4 MiB a download reads ahead.
const NOISE_SIDE: u32 = 1800;
const WATCH: &str = crate::grpc::methods::Method::WatchRenderJob.path();
const DOWNLOAD: &str = crate::grpc::methods::Method::DownloadRenderOutput.path();

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "downloads-8-addresses-x-16-unread",
            expected: "each address its share of the 64 downloads, the rest TOO_MANY_DOWNLOADS at once; the bystander's download served (was 58 of 70 refused)",
            requests: (ADDRESSES * DOWNLOADS_PER_ADDRESS) as u32,
            attack: |target| Box::pin(unread_downloads(target)),
        },
        Case {
            name: "watches-8-addresses-x-256-sse-and-grpc",
            expected: "each address its share of the 64 watchers, the rest TOO_MANY_WATCHERS (HTTP 429) at once; the bystander's gRPC and SSE watches served (was refused at once)",
            requests: (ADDRESSES * WATCHES_PER_ADDRESS) as u32,
            attack: |target| Box::pin(watchers(target)),
        },
    ]
}

/// `message` as the call of the tenant of `key`, anonymous without (its address's then).
fn as_caller<T>(
    target: &Target,
    message: T,
    key: Option<&str>,
) -> anyhow::Result<tonic::Request<T>> {
    match key {
        Some(key) => target.as_tenant(message, key),
        None => Ok(tonic::Request::new(message)),
    }
}

/// A job of `template` rendered to `output` with `modifications`, as the tenant of `key`
/// (anonymous without).
async fn job_of(
    target: &Target,
    channel: &Channel,
    (template, output, modifications): (
        serde_json::Value,
        Option<proto::OutputSpec>,
        Option<proto::Modifications>,
    ),
    key: Option<&str>,
) -> anyhow::Result<String> {
    let request = proto::CreateTemplateRequest {
        name: "third-round".into(),
        lottie_json: serde_json::to_vec(&template)?.into(),
        fonts: Default::default(),
        animation_id: String::new(),
    };
    let template_id = TemplateServiceClient::new(channel.clone())
        .create_template(as_caller(target, request, key)?)
        .await?
        .into_inner()
        .template_id;
    let request = proto::RenderRequest {
        template_id,
        modifications,
        output,
        notify: None,
        theme: String::new(),
    };
    let mut request = as_caller(target, request, key)?;
    request.metadata_mut().insert(
        "idempotency-key",
        format!("bench-third-{}", uuid::Uuid::new_v4()).parse()?,
    );
    Ok(RenderServiceClient::new(channel.clone())
        .submit_render(request)
        .await?
        .into_inner()
        .job_id)
}

/// Waits until the job `job_id` of the tenant of `key` has succeeded.
async fn succeeded(
    target: &Target,
    channel: &Channel,
    job_id: &str,
    key: Option<&str>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let request = proto::GetRenderJobRequest {
            job_id: job_id.into(),
        };
        let job = RenderServiceClient::new(channel.clone())
            .get_render_job(as_caller(target, request, key)?)
            .await?
            .into_inner();
        if job.state == proto::JobState::Succeeded as i32 {
            return Ok(());
        }
        anyhow::ensure!(
            job.state != proto::JobState::Failed as i32
                && started.elapsed() < Duration::from_secs(60),
            "job {job_id} did not succeed: {:?}",
            job.error
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens `count` calls of `path` with `message` from the attacker address `index` on
/// connections of at most [`STREAMS_PER_CONNECTION`] streams whose windows let the server
/// send `window` bytes; the calls taken (held) and the refusals.
async fn hold_streams(
    target: &Target,
    (index, count, window): (usize, usize, Option<u32>),
    (path, message): (&str, Bytes),
) -> anyhow::Result<(Vec<HeldCall>, BTreeMap<String, usize>)> {
    let (mut held, mut refused) = (Vec::new(), BTreeMap::<String, usize>::new());
    let mut client = None;
    for call in 0..count {
        if call % STREAMS_PER_CONNECTION == 0 {
            // The connection's task lives on (detached) as long as calls on it are held.
            let (connection, _driver) = h2_from(target, attacker_address(index), window).await?;
            client = Some(connection);
        }
        let Some(client) = &client else { break };
        let headers = grpc_headers(target, path, None)?;
        match open_call(client, headers, (message.clone(), true)).await? {
            Ok(call) => held.push(call),
            Err(answer) => *refused.entry(answer).or_default() += 1,
        }
    }
    Ok((held, refused))
}

/// Adds `more` counts to `counts`.
fn add_counts(counts: &mut BTreeMap<String, usize>, more: BTreeMap<String, usize>) {
    for (answer, count) in more {
        *counts.entry(answer).or_default() += count;
    }
}

/// "8 addresses hold 3, 3, …" of the calls each address holds.
fn held_per_address(held: &[usize]) -> String {
    let each: Vec<String> = held.iter().map(usize::to_string).collect();
    format!("{} addresses hold {}", held.len(), each.join(", "))
}

/// A PNG of [`NOISE_SIDE`]² pixels of noise (incompressible: some 9.7 MB, within the 10 MiB
/// an image may be).
fn noise_png() -> anyhow::Result<Vec<u8>> {
    use image::ImageEncoder;
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let pixels: Vec<u8> = (0..NOISE_SIDE * NOISE_SIDE * 3)
        .map(|_| {
            // xorshift64: noise enough for a compressor, made here and nowhere else.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect();
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png).write_image(
        &pixels,
        NOISE_SIDE,
        NOISE_SIDE,
        image::ExtendedColorType::Rgb8,
    )?;
    Ok(png)
}

/// A render whose output is large (a PNG still of noise, [`NOISE_SIDE`]² pixels, some
/// 10 MB: far more than a download reads ahead), as the tenant of `key` (anonymous
/// without): its job id.
async fn large_output_job(
    target: &Target,
    channel: &Channel,
    key: Option<&str>,
) -> anyhow::Result<String> {
    let side = json!(NOISE_SIDE);
    let mut layer = image_layer("photo");
    layer["ks"]["p"] = json!({"a": 0, "k": [0, 0, 0]});
    let mut template = animation(
        vec![layer],
        vec![
            json!({"id": "photo", "w": side, "h": side, "e": 1, "u": "", "p": one_pixel_png_uri()}),
        ],
    );
    (template["w"], template["h"]) = (side.clone(), side);
    let noise = tokio::task::spawn_blocking(noise_png).await??;
    let mut output = square_output(proto::Format::Png, 30, NOISE_SIDE);
    if let Some(output) = output.as_mut() {
        output.at = Some(proto::TimePoint {
            point: Some(proto::time_point::Point::Frame(0)),
        });
    }
    let images = [(
        "photo".to_owned(),
        proto::ImageInput {
            source: Some(proto::image_input::Source::Data(noise.into())),
            fit: proto::ImageFit::Cover as i32,
        },
    )];
    let modifications = proto::Modifications {
        images: images.into_iter().collect(),
        ..Default::default()
    };
    job_of(
        target,
        channel,
        (template, output, Some(modifications)),
        key,
    )
    .await
}

/// A succeeded job each for the attackers (anonymous: each address's) and the bystander,
/// the attackers' output large; then [`DOWNLOADS_PER_ADDRESS`] downloads of it from each
/// address on streams the server may send nothing on, held unread, while the bystander
/// downloads its output.
async fn unread_downloads(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let attackers_job = large_output_job(target, &channel, None).await?;
    let small = (
        parent_chain(3),
        square_output(proto::Format::Gif, 30, 100),
        None,
    );
    let bystanders_job = job_of(target, &channel, small, Some(BYSTANDER_KEY)).await?;
    succeeded(target, &channel, &attackers_job, None).await?;
    succeeded(target, &channel, &bystanders_job, Some(BYSTANDER_KEY)).await?;
    let message = grpc_frame(&prost::Message::encode_to_vec(
        &proto::DownloadRenderOutputRequest {
            job_id: attackers_job,
            ..Default::default()
        },
    ));
    let attacks = (0..ADDRESSES).map(|index| {
        let message = message.clone();
        async move {
            hold_streams(
                target,
                (index, DOWNLOADS_PER_ADDRESS, Some(0)),
                (DOWNLOAD, message),
            )
            .await
        }
    });
    let mut held = Vec::new();
    let mut refused = BTreeMap::new();
    for attack in futures_util::future::join_all(attacks).await {
        let (calls, refusals) = attack?;
        held.push(calls);
        add_counts(&mut refused, refusals);
    }
    let started = Instant::now();
    let request = proto::DownloadRenderOutputRequest {
        job_id: bystanders_job,
        ..Default::default()
    };
    let download = async {
        let mut stream = RenderServiceClient::new(channel.clone())
            .download_render_output(target.as_tenant(request, BYSTANDER_KEY)?)
            .await?
            .into_inner();
        let mut bytes = 0;
        while let Some(chunk) = stream.message().await? {
            bytes += chunk.data.len();
        }
        Ok::<_, anyhow::Error>(bytes)
    };
    let bystander = match tokio::time::timeout(BYSTANDER_LIMIT * 5, download).await {
        Ok(Ok(bytes)) => format!("OK ({bytes} bytes)"),
        Ok(Err(error)) => format!("{error:#}"),
        Err(_) => "no answer within 5 s".into(),
    };
    let bystander = (bystander, started.elapsed());
    let counts: Vec<usize> = held.iter().map(Vec::len).collect();
    drop(held);
    Ok(format!(
        "{} unread; refused: {}; the bystander's download {}",
        held_per_address(&counts),
        counted(&refused),
        timed(&bystander)
    ))
}

/// A render that runs for minutes (cancelled at the end of the case).
fn long_render() -> (
    serde_json::Value,
    Option<proto::OutputSpec>,
    Option<proto::Modifications>,
) {
    let mut slow = parent_chain(20);
    slow["op"] = json!(1800);
    for layer in slow["layers"].as_array_mut().into_iter().flatten() {
        layer["op"] = json!(1800);
    }
    let mut output = square_output(proto::Format::Mp4, 60, 1920);
    if let Some(output) = output.as_mut() {
        output.height = 1920;
    }
    (slow, output, None)
}

/// [`WATCHES_PER_ADDRESS`] event streams (`GET /v1/renders/{id}/events`) of `job_id` from
/// the attacker address `index`, one connection each; the streams taken (held) and the
/// refusals.
async fn hold_event_streams(
    target: &Target,
    index: usize,
    job_id: &str,
) -> anyhow::Result<(Vec<tokio::net::TcpStream>, BTreeMap<String, usize>)> {
    let (mut held, mut refused) = (Vec::new(), BTreeMap::<String, usize>::new());
    let path = format!("/v1/renders/{job_id}/events");
    for _ in 0..WATCHES_PER_ADDRESS {
        let head = door_head(target, ("GET", &path), None, None, &[]);
        let stream = connect_from(attacker_address(index), target.address).await?;
        let (answer, stream) = door_call(stream, &head, &[]).await?;
        if answer.success() {
            held.push(stream);
        } else {
            *refused.entry(answer.to_string()).or_default() += 1;
        }
    }
    Ok((held, refused))
}

/// The bystander's watches of its job, over gRPC (to its first snapshot) and the door's
/// events (to the answer's head), from 127.0.0.1.
async fn bystander_watches(target: &Target, channel: &Channel, job_id: &str) -> (String, String) {
    let started = Instant::now();
    let request = proto::WatchRenderJobRequest {
        job_id: job_id.into(),
    };
    let grpc = async {
        let mut stream = RenderServiceClient::new(channel.clone())
            .watch_render_job(target.as_tenant(request, BYSTANDER_KEY)?)
            .await?
            .into_inner();
        stream.message().await?;
        Ok::<_, anyhow::Error>("OK".to_owned())
    };
    let grpc = match tokio::time::timeout(BYSTANDER_LIMIT * 5, grpc).await {
        Ok(answer) => answer.unwrap_or_else(|error| format!("{error:#}")),
        Err(_) => "no answer within 5 s".into(),
    };
    let grpc = timed(&(grpc, started.elapsed()));
    let started = Instant::now();
    let head = door_head(
        target,
        ("GET", &format!("/v1/renders/{job_id}/events")),
        Some(BYSTANDER_KEY),
        None,
        &[],
    );
    let sse = async {
        let stream = tokio::net::TcpStream::connect(target.address).await?;
        let (answer, _stream) = door_call(stream, &head, &[]).await?;
        Ok::<_, anyhow::Error>(answer.to_string())
    };
    let sse = match tokio::time::timeout(BYSTANDER_LIMIT * 5, sse).await {
        Ok(answer) => answer.unwrap_or_else(|error| format!("{error:#}")),
        Err(_) => "no answer within 5 s".into(),
    };
    (grpc, timed(&(sse, started.elapsed())))
}

/// An unended job each for the attackers (anonymous) and the bystander; then
/// [`WATCHES_PER_ADDRESS`] watches of it from each address, the first four over the door's
/// events, the others over gRPC, all held; the bystander watches its own meanwhile.
async fn watchers(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let attackers_job = job_of(target, &channel, long_render(), None).await?;
    let bystanders_job = job_of(target, &channel, long_render(), Some(BYSTANDER_KEY)).await?;
    let message = grpc_frame(&prost::Message::encode_to_vec(
        &proto::WatchRenderJobRequest {
            job_id: attackers_job.clone(),
        },
    ));
    let attacks = (0..ADDRESSES).map(|index| {
        let (message, job_id) = (message.clone(), attackers_job.as_str());
        async move {
            if index < ADDRESSES / 2 {
                let (held, refused) = hold_event_streams(target, index, job_id).await?;
                Ok::<_, anyhow::Error>((held.len(), refused, (held, Vec::new())))
            } else {
                let (held, refused) =
                    hold_streams(target, (index, WATCHES_PER_ADDRESS, None), (WATCH, message))
                        .await?;
                Ok((held.len(), refused, (Vec::new(), held)))
            }
        }
    });
    let (mut counts, mut refused, mut holding) = (Vec::new(), BTreeMap::new(), Vec::new());
    for attack in futures_util::future::join_all(attacks).await {
        let (count, refusals, held) = attack?;
        counts.push(count);
        add_counts(&mut refused, refusals);
        holding.push(held);
    }
    let (grpc, sse) = bystander_watches(target, &channel, &bystanders_job).await;
    drop(holding);
    for (job_id, key) in [(attackers_job, None), (bystanders_job, Some(BYSTANDER_KEY))] {
        let request = proto::CancelRenderJobRequest { job_id };
        let _ = RenderServiceClient::new(channel.clone())
            .cancel_render_job(as_caller(target, request, key)?)
            .await;
    }
    Ok(format!(
        "{} (SSE, then gRPC); refused: {}; the bystander's gRPC watch {grpc}, SSE watch {sse}",
        held_per_address(&counts),
        counted(&refused)
    ))
}
