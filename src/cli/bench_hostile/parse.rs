//! The server's own template parse and the record cache (issue 21, items 4, 10).
//!
//! The server only syntax-checks a template (nothing kept per value); the parse, fence and
//! report run in an analysis worker, so a template of tiny values or a glyph bomb costs the
//! server at most ~20 bytes per template byte. Records are at most a mebibyte and admission
//! keeps only slot lists, so SubmitRenders naming unknown slots of templates with the largest
//! records cost a cache hit.

use super::payloads::glyph_bomb;
use super::{
    animation, fonts, outcome, text_layer, Case, Target, ATTACKER_KEY, STOCK_CLIENT_MESSAGE_LIMIT,
};
use crate::cli::square_output;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use serde_json::json;
use std::collections::BTreeMap;

/// Templates with large records in the record-cache case (the attack's twelve).
const BIG_RECORD_TEMPLATES: usize = 12;
/// The attack's records: 7 MB of default text in the root `slots` object.
const ATTACK_RECORD_TEXT: usize = 7_000_000;
/// A default text whose record fits the limit (1 MiB): used when the 7 MB one is refused.
const LARGEST_RECORD_TEXT: usize = 900_000;
/// Concurrent loops of submissions and rounds of each over every template.
const SUBMISSION_LOOPS: usize = 8;
const SUBMISSION_ROUNDS: usize = 4;

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "chars-tiny-values-4mb",
            expected: "bounded (OK or TEMPLATE_TOO_COMPLEX), server RSS ≤ 20 B per template byte",
            requests: 1,
            attack: |target| Box::pin(create(target, tiny_values_in_chars(4_000_000))),
        },
        Case {
            name: "chars-glyph-bomb-6.9mb",
            expected: "InvalidArgument TEMPLATE_TOO_COMPLEX, server RSS ≤ 20 B per template byte",
            requests: 1,
            attack: |target| Box::pin(create(target, glyph_bomb(900))),
        },
        Case {
            name: "8mb-of-zeros",
            expected: "InvalidArgument TEMPLATE_TOO_COMPLEX (values), no tree built",
            requests: 1,
            attack: |target| Box::pin(create(target, zeros(4_000_000))),
        },
        Case {
            name: "12-big-records-unknown-slots",
            expected: "TEMPLATE_RECORD_TOO_LARGE; SLOT_UNKNOWN from the cache",
            requests: (BIG_RECORD_TEMPLATES * (1 + SUBMISSION_LOOPS * SUBMISSION_ROUNDS)) as u32,
            attack: |target| Box::pin(big_records_unknown_slots(target)),
        },
    ]
}

/// CreateTemplate of `lottie_json` as the attacking tenant; the answer and the size sent.
async fn create(target: &Target, lottie_json: Vec<u8>) -> anyhow::Result<String> {
    let bytes = lottie_json.len();
    let mut client = TemplateServiceClient::new(target.channel().await?)
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let answer = client
        .create_template(target.template_request("hostile", lottie_json, ATTACKER_KEY)?)
        .await;
    Ok(format!(
        "{} ({:.1} MB sent)",
        outcome(&answer),
        bytes as f64 / 1e6
    ))
}

/// About `bytes` bytes of tiny values in `chars`: one glyph path of as many `[10,10]`
/// vertices as fit (3 JSON values per 8 bytes) in `v`, `i` and `o`.
fn tiny_values_in_chars(bytes: usize) -> Vec<u8> {
    let points = vec![json!([10, 10]); bytes / 24];
    let glyph = json!({"ch": "A", "size": 100, "style": "Regular", "w": 60, "fFamily": "Bomb",
        "data": {"shapes": [{"ty": "sh", "ks": {"a": 0,
            "k": {"c": true, "v": points, "i": points, "o": points}}}]}});
    let document = json!({"s": {"s": 12, "f": "Bomb", "t": "A", "j": 0, "fc": [0, 0, 0]},
        "t": 0});
    let mut template = animation(vec![text_layer(vec![document])], vec![]);
    template["fonts"] = fonts();
    template["chars"] = json!([glyph]);
    serde_json::to_vec(&template).unwrap_or_default()
}

/// A valid animation with `count` zeros in an extra array: more JSON values than allowed.
fn zeros(count: usize) -> Vec<u8> {
    format!(
        "{{\"v\":\"5.7\",\"fr\":30,\"ip\":0,\"op\":30,\"w\":9,\"h\":9,\"layers\":[],\"x\":[{}0]}}",
        "0,".repeat(count)
    )
    .into_bytes()
}

/// A text template whose document takes its value from the root `slots` object, a text of
/// `chars` characters: the slot's default text, kept in the record, never laid out.
fn root_slot_text(chars: usize) -> Vec<u8> {
    let mut layer = text_layer(vec![
        json!({"s": {"s": 12, "f": "Bomb", "t": "short", "j": 0},
        "t": 0}),
    ]);
    layer["t"]["d"]["sid"] = json!("title");
    let mut template = animation(vec![layer], vec![]);
    template["fonts"] = fonts();
    template["slots"] = json!({"title": {"p": {"k": [{"s": {"s": 12, "f": "Bomb",
        "t": "x".repeat(chars), "j": 0}, "t": 0}]}}});
    serde_json::to_vec(&template).unwrap_or_default()
}

/// Twelve templates with 7 MB records (the largest allowed when those are refused), then
/// concurrent loops of SubmitRenders naming a slot none has: each re-read and re-parsed its
/// 7 MB record when the cache kept whole records.
async fn big_records_unknown_slots(target: &Target) -> anyhow::Result<String> {
    let channel = target.channel().await?;
    let mut templates = TemplateServiceClient::new(channel.clone())
        .max_decoding_message_size(STOCK_CLIENT_MESSAGE_LIMIT);
    let mut creations = BTreeMap::<String, usize>::new();
    let mut ids = Vec::new();
    for index in 0..BIG_RECORD_TEMPLATES {
        let mut created = None;
        for chars in [ATTACK_RECORD_TEXT, LARGEST_RECORD_TEXT] {
            let answer = templates
                .create_template(target.template_request(
                    format!("big record {index}"),
                    root_slot_text(chars),
                    ATTACKER_KEY,
                )?)
                .await;
            *creations
                .entry(format!("{} {}", outcome(&answer), chars / 1000))
                .or_default() += 1;
            if let Ok(template) = answer {
                created = Some(template.into_inner().template_id);
                break;
            }
        }
        ids.extend(created);
    }
    let run = std::process::id();
    let mut loops = Vec::new();
    for loop_index in 0..SUBMISSION_LOOPS {
        let mut renders = RenderServiceClient::new(target.channel().await?);
        let ids = ids.clone();
        let requests: anyhow::Result<Vec<_>> = (0..SUBMISSION_ROUNDS)
            .flat_map(|_| ids.iter())
            .enumerate()
            .map(|(index, id)| {
                let mut request = target.as_tenant(
                    proto::RenderRequest {
                        template_id: id.clone(),
                        modifications: Some(proto::Modifications {
                            texts: [("no-such-slot".to_owned(), "x".to_owned())].into(),
                            colors: Default::default(),
                            ..Default::default()
                        }),
                        output: square_output(proto::Format::Gif, 30, 100),
                        notify: None,
                        theme: String::new(),
                    },
                    ATTACKER_KEY,
                )?;
                request.metadata_mut().insert(
                    "idempotency-key",
                    format!("bench-hostile-{run}-{loop_index}-{index}").parse()?,
                );
                Ok(request)
            })
            .collect();
        let requests = requests?;
        loops.push(async move {
            let mut answers = BTreeMap::<String, usize>::new();
            for request in requests {
                *answers
                    .entry(outcome(&renders.submit_render(request).await))
                    .or_default() += 1;
            }
            answers
        });
    }
    let mut submissions = BTreeMap::<String, usize>::new();
    for answers in futures_util::future::join_all(loops).await {
        for (answer, count) in answers {
            *submissions.entry(answer).or_default() += count;
        }
    }
    Ok(format!(
        "creations (answer, thousand characters of default text): {}; submissions: {}",
        super::counted(&creations),
        super::counted(&submissions)
    ))
}
