//! Hostile uploads over the wire: image assets that name files, URLs or devices, images whose
//! headers claim enormous sizes, default texts of megabytes, listings of large templates,
//! quotas and a full disk. Each is refused with a classified error or answered within bounds
//! a stock gRPC client (4 MiB message limit) reads.

use crate::helpers::{
    corpus, files_under, pushback_ms, refusal_delay, small_request, spawn_app, spawn_app_with,
    ServerProcess, TestApp,
};
use base64::Engine;
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use prost::Message;
use serde_json::{json, Value};
use std::time::Duration;
use tonic::{Code, Status};
use tonic_types::StatusExt;

const HEART: &str = "image-base64-heart.json";
const FORTY_THREE_IMAGES: &str = "image-base64-43-images-precomps.json";
/// gRPC's default message limit, which stock clients apply to what they receive.
const STOCK_CLIENT_LIMIT: usize = 4 * 1024 * 1024;

fn create_request(name: &str, json: &Value) -> proto::CreateTemplateRequest {
    crate::helpers::create_request(name, json.to_string())
}

/// The heart template with its image asset changed by `edit`.
fn heart_with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut json: Value = serde_json::from_slice(&corpus(HEART)).unwrap();
    edit(&mut json["assets"][0]);
    json
}

fn set_reference(asset: &mut Value, e: Option<i64>, u: &str, p: &str) {
    let object = asset.as_object_mut().unwrap();
    match e {
        Some(e) => object.insert("e".into(), e.into()),
        None => object.remove("e"),
    };
    object.insert("u".into(), u.into());
    object.insert("p".into(), p.into());
}

/// A PNG signature and IHDR declaring `width` × `height`, then a little filler.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend(13u32.to_be_bytes());
    bytes.extend(b"IHDR");
    bytes.extend(width.to_be_bytes());
    bytes.extend(height.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0]);
    bytes.extend([0u8; 64]);
    bytes
}

fn png_data_uri(bytes: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// INVALID_ARGUMENT TEMPLATE_INVALID whose lottie_json violation starts with `path`, never
/// to be retried.
fn assert_template_refused(case: &str, status: &Status, path: &str) {
    assert_eq!(
        refusal_delay(status, Code::InvalidArgument, "TEMPLATE_INVALID"),
        None,
        "{case}"
    );
    let details = status.get_error_details();
    let violations = &details.bad_request().unwrap().field_violations;
    assert_eq!(violations.len(), 1, "{case}: {violations:?}");
    assert_eq!(violations[0].field, "lottie_json", "{case}");
    assert!(
        violations[0].description.starts_with(path),
        "{case}: {}",
        violations[0].description
    );
}

/// RESOURCE_EXHAUSTED with `reason` and a retry delay in RetryInfo and the pushback header.
fn assert_retry_later(case: &str, status: &Status, reason: &str) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{case}: {status:?}");
    let details = status.get_error_details();
    assert_eq!(details.error_info().unwrap().reason, reason, "{case}");
    assert!(
        details.retry_info().unwrap().retry_delay.is_some(),
        "{case}"
    );
    let pushback = pushback_ms(status);
    assert!(pushback > 0, "{case}: pushback {pushback}");
}

async fn list_all(app: &TestApp) -> Vec<proto::Template> {
    let mut templates = Vec::new();
    let mut token = String::new();
    loop {
        let page = app.list_templates_page(100, token).await;
        templates.extend(page.templates);
        if page.next_page_token.is_empty() {
            return templates;
        }
        token = page.next_page_token;
    }
}

#[tokio::test]
async fn image_assets_naming_files_urls_or_devices_are_refused_naming_the_asset_and_nothing_is_stored(
) {
    let app = spawn_app().await;
    let heart_data = heart_with(|_| {})["assets"][0]["p"]
        .as_str()
        .unwrap()
        .to_owned();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "a file outside, through u",
            heart_with(|a| set_reference(a, Some(0), "/../../../../usr/share/doc/", "logo.png")),
            "$.assets[0]: image asset names a file or URL",
        ),
        (
            "a device",
            heart_with(|a| set_reference(a, Some(0), "/dev/", "ptmx")),
            "$.assets[0]: image asset names a file or URL",
        ),
        (
            "a device claiming to be embedded",
            heart_with(|a| set_reference(a, Some(1), "", "/dev/ptmx")),
            "$.assets[0]: image asset names a file or URL",
        ),
        (
            "a relative file",
            heart_with(|a| set_reference(a, None, "images/", "img_0.png")),
            "$.assets[0]: image asset names a file or URL",
        ),
        (
            "a URL",
            heart_with(|a| set_reference(a, Some(0), "https://example.com/", "a.png")),
            "$.assets[0]: image asset names a file or URL",
        ),
        (
            "data the renderer would open as a path (no \"e\": 1)",
            heart_with(|a| set_reference(a, None, "", &heart_data)),
            "$.assets[0].e: ",
        ),
        (
            "an image format the renderer does not decode",
            heart_with(|a| {
                set_reference(a, Some(1), "", "data:image/gif;base64,R0lGODlhAQABAAAAACw=")
            }),
            "$.assets[0].p: embedded image must be PNG or JPEG",
        ),
    ];
    for (case, json, path) in cases {
        let status = app
            .templates()
            .create_template(create_request(case, &json))
            .await
            .unwrap_err();
        assert_template_refused(case, &status, path);
    }
    assert!(list_all(&app).await.is_empty(), "nothing was stored");
    // Nor written where the listing does not look: no template, image or output file of
    // any refused upload is left in the server's data directory (a store written before the
    // refusal, or a render of it, would leave one).
    let left = files_under(app.data_dir.path());
    assert!(left.is_empty(), "refused uploads left files: {left:?}");
    app.stop().await;
}

#[tokio::test]
async fn an_embedded_image_whose_header_claims_100000_by_100000_pixels_is_refused() {
    let app = spawn_app().await;
    let uri = png_data_uri(&png_header(100_000, 100_000));
    let json = heart_with(|a| set_reference(a, Some(1), "", &uri));
    let status = app
        .templates()
        .create_template(create_request("bomb", &json))
        .await
        .unwrap_err();
    assert_template_refused("100000×100000", &status, "$.assets[0].p: ");
    let description = &status
        .get_error_details()
        .bad_request()
        .unwrap()
        .field_violations[0]
        .description
        .clone();
    assert!(description.contains("100000×100000"), "{description}");
    app.stop().await;
}

#[tokio::test]
async fn the_corpus_templates_with_embedded_images_are_created_and_rendered() {
    let app = spawn_app().await;
    for name in [HEART, FORTY_THREE_IMAGES] {
        let template = app.create_template(name).await;
        assert!(
            template.warnings.iter().all(|w| !w.contains("image")),
            "{name}: {:?}",
            template.warnings
        );
    }
    // The 43-image template lasts four seconds: rendered here end to end (the heart's pixels
    // are checked in the engine tests).
    let template = app.create_template(FORTY_THREE_IMAGES).await;
    let job = app.submit_small(&template, proto::Format::Webm).await;
    let last = app
        .watch(&job.job_id, crate::helpers::WATCH_LIMIT)
        .await
        .pop()
        .unwrap();
    assert_eq!(
        last.state,
        proto::JobState::Succeeded as i32,
        "{:?}",
        last.error
    );
    assert!(!app.download(&job.job_id).await.unwrap().is_empty());
    app.stop().await;
}

/// The longest default text a template's record leaves room for, about (records are at most
/// a mebibyte; a longer one is refused, `hostile_records`).
const LONG_DEFAULT_TEXT: usize = 900_000;

/// A text template whose one text slot shows `chars` characters by default.
fn template_with_default_text(chars: usize) -> Value {
    let mut json: Value =
        serde_json::from_slice(&corpus("text-dynamic-name-template.json")).unwrap();
    json["layers"][0]["t"]["d"]["k"][0]["s"]["t"] = "x".repeat(chars).into();
    json
}

#[tokio::test]
async fn a_long_default_text_leaves_get_and_list_readable_by_a_stock_client() {
    let app = spawn_app().await;
    // Stock clients: tonic's default 4 MiB limit on what they receive.
    let mut client = TemplateServiceClient::new(app.channel.clone());
    let created = client
        .create_template(create_request(
            "long default",
            &template_with_default_text(LONG_DEFAULT_TEXT),
        ))
        .await
        .unwrap()
        .into_inner();
    let read = client
        .get_template(proto::GetTemplateRequest {
            template_id: created.template_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read, created);
    let slot = &read.text_slots[0];
    assert_eq!(slot.default_text, "x".repeat(1000));
    assert!(slot.default_text_truncated);
    assert!(
        read.encoded_len() < STOCK_CLIENT_LIMIT / 8,
        "{}",
        read.encoded_len()
    );
    // Beside it, a template with a short text: not flagged.
    client
        .create_template(create_request("short", &template_with_default_text(5)))
        .await
        .unwrap();
    let page = client
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let flags: Vec<(String, bool)> = page
        .templates
        .iter()
        .map(|t| (t.name.clone(), t.text_slots[0].default_text_truncated))
        .collect();
    assert_eq!(
        flags,
        [
            ("short".to_owned(), false),
            ("long default".to_owned(), true)
        ]
    );
    app.stop().await;
}

/// A template with `fills` colour slots whose ids are `name_chars` long.
fn template_with_long_slot_ids(tag: usize, fills: usize, name_chars: usize) -> Value {
    let shapes: Vec<Value> = (0..fills)
        .map(|index| {
            json!({
                "ty": "fl",
                "nm": format!("{tag}-{index:04}-{}", "n".repeat(name_chars)),
                "c": {"a": 0, "k": [1, 0, 0, 1]},
                "o": {"a": 0, "k": 100},
            })
        })
        .collect();
    json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 100, "h": 100,
        "layers": [{
            "ty": 4, "ind": 1, "ip": 0, "op": 30, "st": 0,
            "ks": {},
            "shapes": [{"ty": "gr", "it": shapes}],
        }],
    })
}

#[tokio::test]
async fn pages_of_templates_with_large_answers_stay_within_a_mebibyte_without_gaps() {
    let app = spawn_app().await;
    let mut created = Vec::new();
    for tag in 0..6 {
        // 200 slots of about 1 KiB each: about 200 KiB per template, under its 256 KiB cap.
        let template = app
            .create(
                &format!("t{tag}"),
                template_with_long_slot_ids(tag, 200, 1000).to_string(),
            )
            .await
            .unwrap();
        assert_eq!(template.color_slots.len(), 200);
        assert!(!template.slots_truncated);
        created.push(template.template_id);
    }
    // One with more slots than its answer may carry: the first ones, flagged.
    let crowded = app
        .create(
            "crowded",
            template_with_long_slot_ids(9, 400, 1000).to_string(),
        )
        .await
        .unwrap();
    assert!(crowded.slots_truncated);
    assert!(crowded.color_slots.len() < 400);
    created.push(crowded.template_id);
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut token = String::new();
    loop {
        let page = app.list_templates_page(100, token).await;
        assert!(
            page.encoded_len() <= 1024 * 1024,
            "page of {}",
            page.encoded_len()
        );
        assert!(!page.templates.is_empty());
        pages += 1;
        seen.extend(page.templates.into_iter().map(|t| t.template_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    created.reverse();
    assert_eq!(seen, created);
    assert!(pages >= 2, "{pages} pages");
    app.stop().await;
}

#[tokio::test]
async fn listing_reads_no_template_record() {
    let app = spawn_app().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            app.create_template("tiny-solid-layer.json")
                .await
                .template_id,
        );
    }
    // Damage every record: a listing (and a read) answers from the bounded summaries only.
    for id in &ids {
        let record = app
            .data_dir
            .path()
            .join("templates")
            .join(id)
            .join("record.json");
        std::fs::write(record, b"{ not json").unwrap();
    }
    let listed: Vec<String> = list_all(&app)
        .await
        .into_iter()
        .map(|t| t.template_id)
        .collect();
    ids.reverse();
    assert_eq!(listed, ids);
    app.stop().await;
}

#[tokio::test]
async fn listing_costs_the_server_no_more_cpu_when_stored_templates_are_large() {
    const LISTINGS: u32 = 50;
    /// Templates with records near their limit: ~7 MB of records read per listing if a
    /// listing read them.
    const TEMPLATES: usize = 8;
    let server = ServerProcess::start(&[]);
    let mut client = TemplateServiceClient::new(server.channel().await);
    for index in 0..TEMPLATES {
        client
            .create_template(create_request(
                &format!("big{index}"),
                &template_with_default_text(LONG_DEFAULT_TEXT),
            ))
            .await
            .unwrap();
    }
    let before = server.cpu_time();
    for _ in 0..LISTINGS {
        let page = client
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(page.templates.len(), TEMPLATES);
    }
    let spent = server.cpu_time() - before;
    println!("{LISTINGS} listings of {TEMPLATES} templates with 0.9 MB default texts: {spent:?} of server CPU");
    // Parsing the records per listing, as before, cost seconds; summaries cost
    // milliseconds. Wide margin.
    assert!(spent < Duration::from_secs(1), "{spent:?}");
    assert!(server.stop().await);
}

#[tokio::test]
async fn submissions_naming_a_template_with_a_huge_record_cost_the_server_one_parse() {
    use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
    /// Submissions in flight at once, over as many connections as the per-connection share
    /// needs.
    const CONCURRENT: usize = 64;
    const CONNECTIONS: usize = 4;
    /// What the burst may add to the server's peak RSS: one parsed record (~1 MB) and
    /// buffers; parsing the record per submission held ~14 MB per call in flight.
    const RSS_BUDGET_BYTES: u64 = 96 * 1024 * 1024;
    let server = ServerProcess::start(&[]);
    let created = TemplateServiceClient::new(server.channel().await)
        .create_template(create_request(
            "big",
            &template_with_default_text(LONG_DEFAULT_TEXT),
        ))
        .await
        .unwrap()
        .into_inner();
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(RenderServiceClient::new(server.channel().await));
    }
    let submit = |index: usize| {
        // A slot the template lacks: refused at admission, after the record is read, so
        // nothing renders.
        let mut request = small_request(&created.template_id, proto::Format::Gif);
        request.modifications = Some(proto::Modifications {
            texts: [("no-such-slot".to_owned(), "x".to_owned())].into(),
            colors: Default::default(),
            ..Default::default()
        });
        let mut request = tonic::Request::new(request);
        request.metadata_mut().insert(
            "idempotency-key",
            format!("huge-record-{index}").parse().unwrap(),
        );
        let mut renders = clients[index % CONNECTIONS].clone();
        async move { renders.submit_render(request).await }
    };
    // The first reads the record (and keeps it).
    assert_eq!(submit(0).await.unwrap_err().code(), Code::InvalidArgument);
    let (rss_before, cpu_before) = (server.peak_rss_bytes(), server.cpu_time());
    let answers = futures_util::future::join_all((1..=CONCURRENT).map(submit)).await;
    for answer in answers {
        let status = answer.unwrap_err();
        assert_eq!(
            status.get_error_details().error_info().unwrap().reason,
            "SLOT_UNKNOWN",
            "{status:?}"
        );
    }
    let grown = server.peak_rss_bytes().saturating_sub(rss_before);
    let spent = server.cpu_time() - cpu_before;
    println!(
        "{CONCURRENT} concurrent submissions naming a template with a 0.9 MB record: server peak RSS +{} MiB, {spent:?} of server CPU",
        grown / (1024 * 1024)
    );
    assert!(
        grown < RSS_BUDGET_BYTES,
        "server peak RSS grew by {grown} bytes"
    );
    drop(clients);
    assert!(server.stop().await);
}

#[tokio::test]
async fn two_servers_on_one_data_directory_list_the_same_templates_and_share_the_quota() {
    let shared = tempfile::tempdir().unwrap();
    let path = shared.path().to_path_buf();
    let first = spawn_app_with(|settings| {
        settings.application.data_dir = path.clone();
        settings.storage.max_templates = 2;
    })
    .await;
    let second = spawn_app_with(|settings| {
        settings.application.data_dir = path.clone();
        settings.storage.max_templates = 2;
    })
    .await;
    let a = first.create_template("tiny-solid-layer.json").await;
    let b = second
        .create_template("tiny-checkmark-done-70x70.json")
        .await;
    for app in [&first, &second] {
        let ids: Vec<String> = list_all(app)
            .await
            .into_iter()
            .map(|t| t.template_id)
            .collect();
        assert_eq!(ids, [b.template_id.clone(), a.template_id.clone()]);
    }
    for app in [&first, &second] {
        let status = app
            .create("third", corpus("tiny-solid-layer.json"))
            .await
            .unwrap_err();
        assert_retry_later("third template", &status, "TEMPLATE_QUOTA_EXCEEDED");
    }
    second
        .templates()
        .delete_template(proto::DeleteTemplateRequest {
            template_id: a.template_id.clone(),
        })
        .await
        .unwrap();
    let ids: Vec<String> = list_all(&first)
        .await
        .into_iter()
        .map(|t| t.template_id)
        .collect();
    assert_eq!(ids, std::slice::from_ref(&b.template_id));
    first.create_template("tiny-solid-layer.json").await;
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn a_nearly_full_disk_refuses_new_templates_and_renders_with_a_retry_delay() {
    let shared = tempfile::tempdir().unwrap();
    let path = shared.path().to_path_buf();
    let roomy = spawn_app_with(|settings| settings.application.data_dir = path.clone()).await;
    let template = roomy.create_template("tiny-solid-layer.json").await;
    // The same data directory, with a watermark above any disk's free space.
    let full = spawn_app_with(|settings| {
        settings.application.data_dir = path.clone();
        settings.storage.min_free_disk_mb = u64::MAX / (1024 * 1024);
    })
    .await;
    let status = full
        .create("more", corpus("tiny-solid-layer.json"))
        .await
        .unwrap_err();
    assert_retry_later("CreateTemplate", &status, "DISK_FULL");
    let status = full
        .submit(small_request(&template.template_id, proto::Format::Gif))
        .await
        .unwrap_err();
    assert_retry_later("SubmitRender", &status, "DISK_FULL");
    // Reads still work on the full server, and the other one keeps creating.
    assert_eq!(list_all(&full).await.len(), 1);
    roomy.create_template("tiny-solid-layer.json").await;
    full.stop().await;
    roomy.stop().await;
}
