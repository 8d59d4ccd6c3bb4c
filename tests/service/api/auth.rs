//! Authentication over a real socket: `--auth required` refuses a call without a known
//! identity with UNAUTHENTICATED (pushback -1) before its body is read; a known API key is its
//! tenant's caller; health checks need no identity.

use crate::helpers::{api_keys_file, health_status, small_request, spawn_app_with};
use lottie_render::grpc::proto;
use tonic::Code;

fn pushback(status: &tonic::Status) -> Option<String> {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
}

#[tokio::test]
async fn required_auth_refuses_calls_without_a_known_api_key_and_serves_known_ones() {
    let keys_dir = tempfile::tempdir().unwrap();
    let keys = api_keys_file(keys_dir.path(), &[("acme", "billing", "acme-secret-key")]);
    let app = spawn_app_with(|settings| {
        settings.auth.mode = lottie_render::auth::AuthMode::Required;
        settings.auth.api_keys = Some(keys);
    })
    .await;

    for (case, key) in [
        ("no key", None),
        ("unknown key", Some("not-a-key")),
        ("a prefix of the key", Some("acme-secret")),
    ] {
        let status = app
            .templates_as(key)
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{case}: {status:?}");
        assert_eq!(pushback(&status).as_deref(), Some("-1"), "{case}");
        let details = tonic_types::StatusExt::get_error_details(&status);
        assert_eq!(
            details.error_info().map(|info| info.reason.as_str()),
            Some("UNAUTHENTICATED"),
            "{case}"
        );
    }

    // A SubmitRender without identity is refused on its headers: even a body that would be
    // invalid gets UNAUTHENTICATED, not INVALID_ARGUMENT.
    let mut request = tonic::Request::new(small_request("not-a-uuid", proto::Format::Gif));
    request
        .metadata_mut()
        .insert("idempotency-key", "auth-test".parse().unwrap());
    let status = app
        .renders_as(None)
        .submit_render(request)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    app.use_api_key(Some("acme-secret-key"));
    let template = app.create_template("slots-ball-colors-opacity.json").await;
    let listed = app.list_templates().await;
    assert!(listed
        .templates
        .iter()
        .any(|summary| summary.template_id == template.template_id));

    // Health needs no identity (Kubernetes' gRPC probes send none).
    assert_eq!(
        health_status(&app.channel, "").await,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    app.stop().await;
}
