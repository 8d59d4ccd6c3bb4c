//! The analysis workers shared between tenants, and image data bombs (issue 21, items 5, 11).

use super::payloads::zlib_of_zeros;
use super::{
    animation, image_layer, outcome, Case, Target, ATTACKER_KEY, BYSTANDER_KEY,
    STOCK_CLIENT_MESSAGE_LIMIT,
};
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use base64::Engine as _;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// CPU-hog templates the attacker sends in the hog case, one every [`HOG_EVERY`].
const HOGS: u32 = 20;
const HOG_EVERY: Duration = Duration::from_secs(1);
/// The bystander's pause between its creations in the hog case.
const BYSTANDER_EVERY: Duration = Duration::from_millis(250);
/// What the PNG bomb's 1×1 image data inflates to.
const PNG_BOMB_INFLATED_BYTES: usize = 1024 * 1024 * 1024;

/// The hog case last: it leaves the attacking tenant backed off, which would answer the
/// attacker's later cases before they are tried.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "png-inflate-bomb",
            expected: "InvalidArgument TEMPLATE_INVALID, fast",
            requests: 1,
            attack: |target| Box::pin(png_inflate_bomb(target)),
        },
        Case {
            name: "analysis hog from one tenant",
            expected: "attacker ANALYSIS_BACKOFF, bystander tenant creates",
            requests: HOGS,
            attack: |target| Box::pin(analysis_hog(target)),
        },
    ]
}

/// Box text that never fits its 1×1 box, a thousand documents of 5,000 characters: far over
/// the 5 s analysis budget (5 MB of template).
fn analysis_hog_template() -> Value {
    let documents: Vec<Value> = (0..1000)
        .map(|frame| {
            json!({"t": frame, "s": {"s": 100, "f": "x", "t": "W".repeat(5000),
                "sz": [1, 1], "ps": [0, 0], "j": 0, "fc": [0, 0, 0]}})
        })
        .collect();
    json!({"v": "5.7", "fr": 30, "ip": 0, "op": 30, "w": 200, "h": 200,
        "layers": [{"ty": 5, "nm": "hog", "ind": 1, "ks": {}, "ip": 0, "op": 30, "st": 0,
            "t": {"d": {"k": documents}}}]})
}

/// "N× OUTCOME" counts of answers, most frequent first.
fn tally(outcomes: impl IntoIterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for outcome in outcomes {
        *counts.entry(outcome).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    super::counted(counts)
}

/// The attacker sends a CPU hog every second as its own tenant (without waiting for the
/// answers) while a bystander of the other tenant creates a small template again and again.
async fn analysis_hog(target: &Target) -> anyhow::Result<String> {
    let template = serde_json::to_vec(&analysis_hog_template())?;
    let honest = serde_json::to_vec(&animation(vec![], vec![]))?;
    let attacker = TemplateServiceClient::new(target.channel().await?)
        .max_encoding_message_size(64 * 1024 * 1024)
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let mut bystander = TemplateServiceClient::new(target.channel().await?)
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let (attacking, attack_over) = tokio::sync::watch::channel(false);
    let attack = async {
        let outcomes = send_hogs(target, &attacker, &template).await;
        // Also when sending failed: the bystander stops.
        let _ = attacking.send(true);
        outcomes
    };
    let bystand = async {
        let (mut outcomes, mut worst) = (Vec::new(), Duration::ZERO);
        while !*attack_over.borrow() {
            let request = target.template_request("bystander", honest.clone(), BYSTANDER_KEY)?;
            let call = Instant::now();
            outcomes.push(outcome(&bystander.create_template(request).await));
            worst = worst.max(call.elapsed());
            tokio::time::sleep(BYSTANDER_EVERY).await;
        }
        anyhow::Ok((outcomes, worst))
    };
    let (attacker_outcomes, bystander) = tokio::join!(attack, bystand);
    let (bystander_outcomes, bystander_worst) = bystander?;
    Ok(format!(
        "attacker: {}; bystander tenant's CreateTemplate: {} (worst {} ms)",
        tally(attacker_outcomes?),
        tally(bystander_outcomes),
        bystander_worst.as_millis()
    ))
}

/// Sends [`HOGS`] CPU hogs as the attacker, one every [`HOG_EVERY`] without waiting for the
/// answers; their outcomes.
async fn send_hogs(
    target: &Target,
    attacker: &TemplateServiceClient<tonic::transport::Channel>,
    template: &[u8],
) -> anyhow::Result<Vec<String>> {
    let mut calls = Vec::new();
    for _ in 0..HOGS {
        let request = target.template_request("analysis hog", template.to_vec(), ATTACKER_KEY)?;
        let mut attacker = attacker.clone();
        calls.push(tokio::spawn(async move {
            outcome(&attacker.create_template(request).await)
        }));
        tokio::time::sleep(HOG_EVERY).await;
    }
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await?);
    }
    Ok(outcomes)
}

/// A 1×1 PNG (~1 MB) whose image data inflates to 1 GiB: the header check let it through and
/// stb_image inflated it all in the render worker.
async fn png_inflate_bomb(target: &Target) -> anyhow::Result<String> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = 1u32.to_be_bytes().to_vec();
    header.extend(1u32.to_be_bytes());
    header.extend([8, 6, 0, 0, 0]);
    super::png_chunk(&mut png, b"IHDR", &header);
    super::png_chunk(&mut png, b"IDAT", &zlib_of_zeros(PNG_BOMB_INFLATED_BYTES));
    super::png_chunk(&mut png, b"IEND", &[]);
    let uri = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    let template = animation(
        vec![image_layer("image")],
        vec![json!({"id": "image", "w": 1, "h": 1, "u": "", "p": uri, "e": 1})],
    );
    let mut client = TemplateServiceClient::new(target.channel().await?)
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let request = target.template_request(
        "png inflate bomb",
        serde_json::to_vec(&template)?,
        ATTACKER_KEY,
    )?;
    let started = Instant::now();
    let answer = client.create_template(request).await;
    Ok(format!(
        "{} in {} ms ({} KiB PNG)",
        outcome(&answer),
        started.elapsed().as_millis(),
        png.len() / 1024
    ))
}
