//! TLS and mTLS on the real server over real sockets, with certificates made in the test:
//! a handshake and calls over it; under mTLS a client with a good certificate is served and
//! one without (or with a stranger's) is refused; a certificate rotated on disk is served to
//! the next connection without a restart, and a broken one keeps the previous in force.

use crate::helpers::spawn_app_with;
use crate::pki::{served_serial, server_tls, tls_channel, TestCa};
use lottie_render::auth::AuthMode;
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::time::Duration;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// How long a test waits for the configuration watcher (which polls every 2 s).
const RELOAD_DEADLINE: Duration = Duration::from_secs(20);

async fn list_templates(channel: tonic::transport::Channel) -> Result<(), tonic::Status> {
    TemplateServiceClient::new(channel)
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .map(drop)
}

#[tokio::test]
async fn a_tls_server_serves_a_client_that_trusts_its_ca_and_no_plaintext_client() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test ca");
    let tls = server_tls(dir.path(), &ca, None);
    let app = spawn_app_with(|settings| settings.tls = tls).await;

    let channel = tls_channel(app.address, &ca, None).await.unwrap();
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");
    list_templates(channel).await.unwrap();

    // A plaintext HTTP/2 client gets no answer from a TLS listener.
    let plaintext = list_templates(app.channel.clone()).await.unwrap_err();
    assert_eq!(plaintext.code(), Code::Unavailable, "{plaintext:?}");
    // Nor does a client that trusts another CA.
    let stranger = TestCa::new("stranger ca");
    let refused = match tls_channel(app.address, &stranger, None).await {
        Ok(channel) => list_templates(channel).await.is_err(),
        Err(_) => true,
    };
    assert!(refused);
    app.stop().await;
}

#[tokio::test]
async fn mtls_serves_a_client_with_a_good_certificate_and_refuses_one_without() {
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, client_ca, stranger_ca) = (
        TestCa::new("server ca"),
        TestCa::new("client ca"),
        TestCa::new("stranger ca"),
    );
    let tls = server_tls(dir.path(), &server_ca, Some(&client_ca));
    let identities = dir.path().join("identities");
    std::fs::write(
        &identities,
        "acme spiffe://cluster.local/ns/acme/sa/billing\n",
    )
    .unwrap();
    let app = spawn_app_with(|settings| {
        settings.tls = tls;
        settings.auth = AuthMode::Required;
        settings.identities = Some(identities);
    })
    .await;

    let billing = client_ca.client("billing", Some("spiffe://cluster.local/ns/acme/sa/billing"));
    let channel = tls_channel(app.address, &server_ca, Some(&billing))
        .await
        .unwrap();
    list_templates(channel).await.unwrap();

    let stranger = stranger_ca.client("billing", Some("spiffe://cluster.local/ns/acme/sa/billing"));
    for (case, identity) in [
        ("no certificate", None),
        ("a certificate of another CA", Some(&stranger)),
    ] {
        // TLS 1.3 finishes the client's side of the handshake before the server has checked
        // its certificate: the refusal shows on connecting or on the first call.
        match tls_channel(app.address, &server_ca, identity).await {
            Err(_) => {}
            Ok(channel) => {
                let status = list_templates(channel).await.unwrap_err();
                assert_eq!(status.code(), Code::Unavailable, "{case}: {status:?}");
            }
        }
    }
    assert!(
        app.metric("lottie_render_tls_handshake_failures_total{reason=\"refused\"}")
            .await
            >= 2.0
    );

    // A good certificate whose identity the identities file does not name: the handshake
    // succeeds, the call is UNAUTHENTICATED (never the default tenant).
    let unknown = client_ca.client("reports", Some("spiffe://cluster.local/ns/acme/sa/reports"));
    let channel = tls_channel(app.address, &server_ca, Some(&unknown))
        .await
        .unwrap();
    let status = list_templates(channel).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("reports"), "{status:?}");
    app.stop().await;
}

#[tokio::test]
async fn a_certificate_rotated_on_disk_is_served_to_the_next_connection_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test ca");
    let tls = server_tls(dir.path(), &ca, None);
    let app = spawn_app_with(|settings| settings.tls = tls).await;
    assert_eq!(served_serial(app.address, &ca).await, "1");
    let before = tls_channel(app.address, &ca, None).await.unwrap();

    ca.server(2).write(dir.path(), "server");
    let deadline = tokio::time::Instant::now() + RELOAD_DEADLINE;
    while served_serial(app.address, &ca).await != "2" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was not served within {RELOAD_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The connection made before the rotation still serves.
    list_templates(before).await.unwrap();

    // A broken certificate is refused and the one in force stays.
    std::fs::write(dir.path().join("server.crt"), "not a certificate").unwrap();
    let kept = "lottie_render_config_reloads_total{file=\"tls\",outcome=\"kept_previous\"}";
    let deadline = tokio::time::Instant::now() + RELOAD_DEADLINE;
    while app.metric(kept).await < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broken certificate was never looked at"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(served_serial(app.address, &ca).await, "2");
    list_templates(tls_channel(app.address, &ca, None).await.unwrap())
        .await
        .unwrap();
    app.stop().await;
}
