//! TemplateService, health and the idempotency-key check, over the wire.

use crate::helpers::{corpus, create_request, spawn_app};
use lottie_render::grpc::proto;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

#[tokio::test]
async fn the_server_reports_serving_and_creates_reads_and_deletes_templates() {
    let app = spawn_app().await;
    let health = HealthClient::new(app.channel.clone())
        .check(HealthCheckRequest {
            service: "lottie.render.v1.TemplateService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);
    let mut templates = app.templates();
    let created = app
        .create("toggle", corpus("ui-toggle-on-off-text.json"))
        .await
        .unwrap();
    let text_slots: Vec<&str> = created.text_slots.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(text_slots, ["OFF", "ON"]);
    assert!(app
        .data_dir
        .path()
        .join("templates")
        .join(&created.template_id)
        .join("template.json")
        .exists());
    let read = app.get_template(&created.template_id).await.unwrap();
    assert_eq!(read, created);
    templates
        .delete_template(proto::DeleteTemplateRequest {
            template_id: created.template_id.clone(),
        })
        .await
        .unwrap();
    let status = templates
        .get_template(proto::GetTemplateRequest {
            template_id: created.template_id,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    app.stop().await;
}

#[tokio::test]
async fn a_template_larger_than_tonics_default_four_mib_limit_is_judged_by_our_own_limit() {
    let app = spawn_app().await;
    // 9 MiB of JSON: above the 8 MiB template limit, so refused by the fence, not by transport.
    let mut json = b"{\"v\":\"5\",\"pad\":\"".to_vec();
    json.extend(std::iter::repeat_n(b'x', 9 * 1024 * 1024));
    json.extend_from_slice(b"\"}");
    let status = app.create("big", json).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("8388608"), "{}", status.message());
    app.stop().await;
}

#[tokio::test]
async fn submit_render_without_an_idempotency_key_is_refused_before_decoding_and_told_not_to_retry()
{
    let app = spawn_app().await;
    let status = app
        .renders()
        .submit_render(proto::RenderRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "-1"
    );
    assert_eq!(
        status.get_error_details().error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_MISSING"
    );
    app.stop().await;
}

#[tokio::test]
async fn create_template_with_an_idempotency_key_creates_once_and_replays() {
    let app = spawn_app().await;
    let create = |key: Option<&str>, name: &str| {
        let mut request =
            tonic::Request::new(create_request(name, corpus("tiny-solid-layer.json")));
        if let Some(key) = key {
            request
                .metadata_mut()
                .insert("idempotency-key", key.parse().unwrap());
        }
        let mut client = app.templates();
        async move { client.create_template(request).await }
    };
    let first = create(Some("tpl-1"), "solid").await.unwrap();
    assert!(first.metadata().get("idempotent-replayed").is_none());
    let again = create(Some("tpl-1"), "solid").await.unwrap();
    assert_eq!(again.metadata().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(again.get_ref().template_id, first.get_ref().template_id);
    let reused = create(Some("tpl-1"), "another name").await.unwrap_err();
    assert_eq!(reused.code(), Code::InvalidArgument);
    assert_eq!(
        reused.get_error_details().error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_REUSED"
    );
    let malformed = create(Some("two words"), "solid").await.unwrap_err();
    assert_eq!(
        malformed.get_error_details().error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_INVALID"
    );
    // Without a key every call creates.
    let one = create(None, "solid").await.unwrap();
    let two = create(None, "solid").await.unwrap();
    assert_ne!(one.get_ref().template_id, two.get_ref().template_id);
    let listed = app.list_templates().await;
    assert_eq!(listed.templates.len(), 3);
    app.stop().await;
}

#[tokio::test]
async fn an_uploaded_font_is_used_for_text_and_a_missing_one_is_reported() {
    let app = spawn_app().await;
    let create = |fonts: std::collections::HashMap<String, Vec<u8>>| {
        let mut client = app.templates();
        async move {
            client
                .create_template(proto::CreateTemplateRequest {
                    name: "hello".into(),
                    lottie_json: corpus("slots-text-document-sid.json").into(),
                    fonts: fonts.into_iter().map(|(k, v)| (k, v.into())).collect(),
                    animation_id: String::new(),
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    // The template's text asks for family "Ubuntu".
    let without = create(Default::default()).await;
    assert!(
        without
            .warnings
            .iter()
            .any(|w| w.contains("'Ubuntu'") && w.contains("bundled Liberation Serif")),
        "{:?}",
        without.warnings
    );
    // DejaVu Serif (Debian's fonts-dejavu-core, which ./dev installs): visibly unlike the
    // bundled Liberation Serif Italic drawn without it.
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf").unwrap();
    let with = create([("Ubuntu".to_owned(), font)].into()).await;
    // No fallback (its italic, which the upright DejaVu Serif lacks, is synthesized).
    assert!(
        with.warnings
            .iter()
            .all(|w| !w.contains("Ubuntu") || w.contains("synthesized")),
        "{:?}",
        with.warnings
    );
    // The same text rendered with and without the uploaded font: the worker reads the stored
    // font file, so the outputs differ.
    let render = |template_id: String| {
        let app = &app;
        async move {
            let mut request = crate::helpers::small_request(&template_id, proto::Format::Gif);
            request.modifications = Some(proto::Modifications {
                texts: [("text_doc".to_owned(), "Uploaded".to_owned())].into(),
                colors: Default::default(),
                ..Default::default()
            });
            let job = app.submit(request).await.unwrap();
            let done = app
                .watch(&job.job_id, crate::helpers::WATCH_LIMIT)
                .await
                .pop()
                .unwrap();
            assert_eq!(done.state, proto::JobState::Succeeded as i32, "{done:?}");
            done.output.unwrap().sha256
        }
    };
    let in_serif = render(with.template_id.clone()).await;
    let in_sans = render(without.template_id.clone()).await;
    assert_ne!(in_serif, in_sans, "the uploaded font was not used");
    app.stop().await;
}
