//! Template records (issue 21, item 10 and the storage quota): a template's record is
//! bounded (`TEMPLATE_RECORD_TOO_LARGE` beyond a mebibyte), admission keeps only slot lists,
//! so SubmitRenders naming unknown slots of templates with the largest records cost the
//! server little, and the template quota counts every object a template stores.

use crate::helpers::{corpus, create_request, reason, small_request, ServerProcess};
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tonic::Code;
use tonic_types::StatusExt;

/// A default text that leaves the record within its limit (1 MiB), with room to spare.
const LARGEST_ALLOWED_TEXT: usize = 900_000;

/// The text template whose document is bound to the root `slots` entry `text_doc`, with
/// that entry's text `chars` characters long: the slot's default text, kept in its record.
fn root_slot_text(chars: usize) -> Vec<u8> {
    let mut template: Value =
        serde_json::from_slice(&corpus("slots-text-document-sid.json")).unwrap();
    template["slots"] = json!({"text_doc": {"p": {"k": [{"s": {"f": "Ubuntu Light Italic",
        "fc": [0, 0, 0], "s": 100, "t": "x".repeat(chars), "j": 0}, "t": 0}]}}});
    serde_json::to_vec(&template).unwrap()
}

#[tokio::test]
async fn a_template_whose_record_would_pass_its_limit_is_refused_with_its_own_reason() {
    let server = ServerProcess::start(&[]);
    let mut templates =
        TemplateServiceClient::new(server.channel().await).max_encoding_message_size(64 << 20);
    let status = templates
        .create_template(create_request("huge record", root_slot_text(2_000_000)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "TEMPLATE_RECORD_TOO_LARGE", "{status:?}");
    assert!(status.message().contains("1048576"), "{status:?}");
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "-1"
    );
    let violations = status.get_error_details().bad_request().unwrap().clone();
    assert_eq!(violations.field_violations[0].field, "lottie_json");
    // Nothing was stored; the same template with a default text that fits is accepted.
    let listed = templates
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.templates.is_empty(), "{listed:?}");
    let created = templates
        .create_template(create_request("fits", root_slot_text(LARGEST_ALLOWED_TEXT)))
        .await
        .unwrap()
        .into_inner();
    assert!(created.text_slots[0].default_text_truncated);
    assert!(server.stop().await);
}

#[tokio::test]
async fn submissions_naming_unknown_slots_of_templates_with_the_largest_records_cost_the_server_little(
) {
    /// Templates, each with as large a record as the server allows (the attack: twelve
    /// records near the 1 MiB limit, more than the old cache of whole records held; a
    /// larger one is refused, as the test above shows).
    const TEMPLATES: usize = 12;
    /// Concurrent loops of submissions, over as many connections; rounds of each over
    /// every template.
    const LOOPS: usize = 8;
    const ROUNDS: usize = 2;
    /// What the loops may add to the server's peak RSS: buffers and answers. Re-reading
    /// and re-parsing a 7 MB record per submission took it from 105 to 627 MB.
    const RSS_BUDGET_BYTES: u64 = 48 * 1024 * 1024;
    /// Server CPU per refused submission, on average: decoding, a cache hit, the answer.
    /// A 7 MB record parse per submission was tens to hundreds of milliseconds.
    const CPU_PER_SUBMISSION: Duration = Duration::from_millis(10);
    // Twelve creations in a row from one tenant: a budget of 60 s keeps the analyses' CPU
    // rate (half a core beyond a burst of two budgets) from backing the tenant off on a slow
    // machine; what this test weighs is the server's cost of the submissions.
    let server = ServerProcess::start(&["--analysis-cpu-seconds", "60"]);
    let mut templates =
        TemplateServiceClient::new(server.channel().await).max_encoding_message_size(64 << 20);
    let mut ids = Vec::new();
    for index in 0..TEMPLATES {
        let request = create_request(
            &format!("big {index}"),
            root_slot_text(LARGEST_ALLOWED_TEXT),
        );
        let created = templates
            .create_template(request)
            .await
            .unwrap()
            .into_inner();
        ids.push(created.template_id);
    }
    let mut clients = Vec::new();
    for _ in 0..LOOPS {
        clients.push(RenderServiceClient::new(server.channel().await));
    }
    let submit = |client: &RenderServiceClient<tonic::transport::Channel>, id: &str| {
        // A slot the template lacks: refused at admission, after its record is read, so
        // nothing renders.
        let mut request = small_request(id, proto::Format::Gif);
        request.modifications = Some(proto::Modifications {
            texts: [("no-such-slot".to_owned(), "x".to_owned())].into(),
            colors: Default::default(),
            ..Default::default()
        });
        let mut client = client.clone();
        async move {
            let request =
                crate::helpers::with_idempotency_key(request, &crate::helpers::unique_key());
            let status = client.submit_render(request).await.unwrap_err();
            assert_eq!(reason(&status), "SLOT_UNKNOWN", "{status:?}");
        }
    };
    // Each template read once (what any cache costs).
    for id in &ids {
        submit(&clients[0], id).await;
    }
    let (rss_before, cpu_before) = (server.peak_rss_bytes(), server.cpu_time());
    let started = Instant::now();
    let loops = clients.iter().map(|client| {
        let ids = ids.clone();
        async move {
            for _ in 0..ROUNDS {
                for id in &ids {
                    submit(client, id).await;
                }
            }
        }
    });
    futures_util::future::join_all(loops).await;
    let submissions = (LOOPS * ROUNDS * TEMPLATES) as u32;
    let grown = server.peak_rss_bytes().saturating_sub(rss_before);
    let spent = server.cpu_time().saturating_sub(cpu_before);
    println!(
        "{submissions} submissions naming unknown slots of {TEMPLATES} templates in {:?}: server peak RSS +{} MiB, {spent:?} of server CPU",
        started.elapsed(),
        grown / (1024 * 1024)
    );
    assert!(
        grown < RSS_BUDGET_BYTES,
        "server peak RSS grew by {grown} bytes"
    );
    assert!(
        spent < CPU_PER_SUBMISSION * submissions,
        "{spent:?} of server CPU for {submissions} submissions"
    );
    drop(clients);
    assert!(server.stop().await);
}

#[tokio::test]
async fn the_template_quota_counts_the_record_and_summary_too() {
    let server = ServerProcess::start(&["--max-template-storage-mb-per-tenant", "1"]);
    let mut templates =
        TemplateServiceClient::new(server.channel().await).max_encoding_message_size(64 << 20);
    // 600 KB of JSON, and as much again in its record (the default text): 1.2 MB stored,
    // over the 1 MiB quota; the JSON alone is not.
    let template = root_slot_text(600_000);
    assert!(template.len() < 1024 * 1024 * 2 / 3, "{}", template.len());
    let status = templates
        .create_template(create_request("double", template))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(reason(&status), "TEMPLATE_QUOTA_EXCEEDED", "{status:?}");
    // The quota is not simply full: a small template is stored, and its index entry counts
    // every file the template wrote.
    let created = templates
        .create_template(create_request("small", corpus("tiny-solid-layer.json")))
        .await
        .unwrap()
        .into_inner();
    let templates_dir = server.data_dir.path().join("data").join("templates");
    let stored: u64 = walk(&templates_dir.join(&created.template_id))
        .iter()
        .map(|path| std::fs::metadata(path).unwrap().len())
        .sum();
    let index: Vec<String> = std::fs::read_dir(templates_dir.join(".index"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(index.len(), 1, "{index:?}");
    // `<created ms>.<id>.<stored bytes>`.
    let counted: u64 = index[0].rsplit('.').next().unwrap().parse().unwrap();
    assert_eq!(counted, stored, "{index:?}");
    assert!(
        stored > corpus("tiny-solid-layer.json").len() as u64 + 200,
        "{stored}"
    );
    assert!(server.stop().await);
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
