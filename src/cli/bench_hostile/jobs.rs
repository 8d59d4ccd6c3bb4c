//! Jobs a caller can make the server keep: instant reuses, retained records, refusals in Redis (issue 21, items 2, 7).

use super::{
    outcome, parent_chain, start_server, Case, Target, ATTACKER_KEY, STOCK_CLIENT_MESSAGE_LIMIT,
};
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use futures_util::StreamExt;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Identical submissions under fresh keys, each SUCCEEDED at once from the stored output:
/// beyond the default bound of jobs kept per tenant (10,000), so the oldest are evicted.
const INSTANT_REUSES: usize = 12_000;
/// Calls in flight at once in the reuse case (one client's worth).
const REUSE_CONCURRENCY: usize = 16;
/// Submissions refused for the tenant's job limit in the Redis case.
const REFUSALS: usize = 2_000;
/// How long the rendered job of the reuse case may take.
const RENDER_LIMIT: Duration = Duration::from_secs(60);

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "12000-instant-reuses-fresh-keys",
            expected: "all SUCCEEDED; oldest evicted, RSS bounded",
            requests: INSTANT_REUSES as u32 + 1,
            attack: |target| Box::pin(instant_reuses(target)),
        },
        Case {
            name: "2000-job-limit-refusals-in-redis",
            expected: "TENANT_JOB_LIMIT; no key left in Redis",
            requests: REFUSALS as u32 + 1,
            attack: |target| Box::pin(refusals_in_redis(target)),
        },
    ]
}

/// A small render request of `template_id` (`width` px wide: another width, another render).
pub(super) fn small_render(template_id: &str, width: u32) -> proto::RenderRequest {
    proto::RenderRequest {
        template_id: template_id.into(),
        modifications: None,
        output: Some(proto::OutputSpec {
            format: proto::Format::Gif as i32,
            fps: 30,
            width,
            height: 100,
            background: None,
            ..Default::default()
        }),
        notify: None,
        theme: String::new(),
    }
}

/// A job state as the wire names it.
fn state_name(state: i32) -> String {
    proto::JobState::try_from(state)
        .map_or_else(|_| format!("state {state}"), |state| format!("{state:?}"))
}

/// `request` as the attacker's call under idempotency key `key`.
pub(super) fn attackers<T>(
    target: &Target,
    request: T,
    key: &str,
) -> anyhow::Result<tonic::Request<T>> {
    let mut request = target.as_tenant(request, ATTACKER_KEY)?;
    request
        .metadata_mut()
        .insert("idempotency-key", key.parse()?);
    Ok(request)
}

/// Registers `template` as the attacker; answers its id.
pub(super) async fn attackers_template(
    target: &Target,
    channel: Channel,
    template: serde_json::Value,
) -> anyhow::Result<String> {
    let mut templates =
        TemplateServiceClient::new(channel).max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let request = proto::CreateTemplateRequest {
        name: "kept-jobs".into(),
        lottie_json: serde_json::to_vec(&template)?.into(),
        fonts: Default::default(),
        animation_id: String::new(),
    };
    let created = templates
        .create_template(attackers(
            target,
            request,
            &format!("bench-kept-{}", uuid::Uuid::new_v4()),
        )?)
        .await?;
    Ok(created.into_inner().template_id)
}

/// The job's state as its tenant's GetRenderJob answers it (`NotFound` once evicted).
async fn job_state(
    target: &Target,
    renders: &mut RenderServiceClient<Channel>,
    job_id: &str,
) -> anyhow::Result<String> {
    let request = proto::GetRenderJobRequest {
        job_id: job_id.into(),
    };
    Ok(
        match renders
            .get_render_job(target.as_tenant(request, ATTACKER_KEY)?)
            .await
        {
            Ok(job) => state_name(job.into_inner().state),
            Err(status) => format!("{:?}", status.code()),
        },
    )
}

/// Renders one small request, then sends it [`INSTANT_REUSES`] times under fresh keys: each
/// is SUCCEEDED at once and kept; the tenant's bound of jobs kept makes the oldest go.
async fn instant_reuses(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let template = attackers_template(target, channel.clone(), parent_chain(1)).await?;
    let mut renders = RenderServiceClient::new(channel);
    let run = uuid::Uuid::new_v4();
    let first = renders
        .submit_render(attackers(
            target,
            small_render(&template, 100),
            &format!("bench-reuse-{run}"),
        )?)
        .await?
        .into_inner();
    let give_up = Instant::now() + RENDER_LIMIT;
    while job_state(target, &mut renders, &first.job_id).await? != "Succeeded" {
        if Instant::now() > give_up {
            anyhow::bail!("the first render did not succeed within {RENDER_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answers: Vec<_> = futures_util::stream::iter(0..INSTANT_REUSES)
        .map(|index| {
            let mut renders = renders.clone();
            let request = attackers(
                target,
                small_render(&template, 100),
                &format!("bench-reuse-{run}-{index}"),
            );
            async move {
                let answer = renders.submit_render(request?).await;
                anyhow::Ok((outcome(&answer), answer.ok().map(|job| job.into_inner())))
            }
        })
        .buffered(REUSE_CONCURRENCY)
        .collect()
        .await;
    let mut counts = BTreeMap::<String, usize>::new();
    let mut kept = Vec::new();
    for answer in answers {
        let (outcome, job) = answer?;
        let outcome = match &job {
            Some(job) => state_name(job.state),
            None => outcome,
        };
        *counts.entry(outcome).or_default() += 1;
        kept.extend(job.map(|job| job.job_id));
    }
    let oldest = match kept.first() {
        Some(id) => job_state(target, &mut renders, id).await?,
        None => "none".into(),
    };
    let newest = match kept.last() {
        Some(id) => job_state(target, &mut renders, id).await?,
        None => "none".into(),
    };
    Ok(format!(
        "{}; rendered job {}, first reuse {oldest}, last reuse {newest}",
        super::counted(&counts),
        job_state(target, &mut renders, &first.job_id).await?
    ))
}

/// Keys under `prefix`: how many, their bytes (`MEMORY USAGE`) and how many live longer
/// than a minute.
async fn redis_keys(url: &str, prefix: &str) -> anyhow::Result<(usize, u64, usize)> {
    use deadpool_redis::redis;
    let mut connection = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut connection)
        .await?;
    let (mut bytes, mut long_lived) = (0, 0);
    for key in &keys {
        let usage: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query_async(&mut connection)
            .await?;
        bytes += usage.unwrap_or(0);
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut connection)
            .await?;
        if ttl > 60_000 {
            long_lived += 1;
        }
    }
    Ok((keys.len(), bytes, long_lived))
}

/// On a server of its own with Redis and a job limit of one: one long render, then
/// [`REFUSALS`] other requests, each refused for the limit; what they left under the prefix.
async fn refusals_in_redis(target: &Target) -> anyhow::Result<String> {
    let Some(redis) = &target.redis else {
        return Ok("skipped: needs --redis-url".into());
    };
    let prefix = format!("{}refusals-{}:", redis.key_prefix, uuid::Uuid::new_v4());
    let flags: Vec<String> = [
        "--tenant-max-jobs",
        "1",
        "--redis-url",
        redis.url.as_str(),
        "--redis-key-prefix",
        prefix.as_str(),
    ]
    .iter()
    .map(|flag| (*flag).to_owned())
    .collect();
    let (_server, address) = start_server(&flags, target.address_space_bytes)?;
    let own = Target {
        address,
        pid: None,
        keys: true,
        redis: None,
        address_space_bytes: target.address_space_bytes,
    };
    let channel = own.channel().await?;
    // Long enough to hold the tenant's one slot for the whole case.
    let mut slow = parent_chain(20);
    slow["op"] = json!(1800);
    for layer in slow["layers"].as_array_mut().into_iter().flatten() {
        layer["op"] = json!(1800);
    }
    let template = attackers_template(&own, channel.clone(), slow).await?;
    let mut renders = RenderServiceClient::new(channel);
    let run = uuid::Uuid::new_v4();
    let mut held = small_render(&template, 1920);
    if let Some(output) = held.output.as_mut() {
        output.height = 1920;
        output.fps = 60;
        output.format = proto::Format::Mp4 as i32;
    }
    renders
        .submit_render(attackers(&own, held, &format!("bench-held-{run}"))?)
        .await?;
    let (keys_before, bytes_before, _) = redis_keys(&redis.url, &prefix).await?;
    let mut counts = BTreeMap::<String, usize>::new();
    for index in 0..REFUSALS {
        // Each another render (another size), so each would lead.
        let width = 100 + (index % 1000) as u32;
        let mut request = small_render(&template, width);
        if let Some(output) = request.output.as_mut() {
            output.height = 100 + (index / 1000) as u32;
        }
        let answer = renders
            .submit_render(attackers(
                &own,
                request,
                &format!("bench-refused-{run}-{index}"),
            )?)
            .await;
        *counts.entry(outcome(&answer)).or_default() += 1;
    }
    let (keys_after, bytes_after, long_lived) = redis_keys(&redis.url, &prefix).await?;
    Ok(format!(
        "{}; keys under the prefix {keys_before} → {keys_after} ({} bytes left by the \
         refusals, {long_lived} keys with a TTL over 60 s in all)",
        super::counted(&counts),
        bytes_after.saturating_sub(bytes_before)
    ))
}
