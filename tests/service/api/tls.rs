//! TLS and mTLS on the real server over real sockets, with certificates made in the test:
//! a handshake and calls over it; under mTLS a client with a good certificate is served and
//! one without (or with a stranger's) is refused; a certificate rotated on disk is served to
//! the next connection without a restart, and a broken one keeps the previous in force.

use crate::api::pki::{served_serial, server_tls, tls_channel, TestCa};
use crate::helpers::{corpus, create_request, spawn_app_with, TestApp};
use lottie_render::auth::AuthMode;
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::time::Duration;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// How long a test waits for the configuration watcher (which polls every 2 s).
const RELOAD_DEADLINE: Duration = Duration::from_secs(20);

/// Waits until the metric sample reaches `at_least` (it is counted just after what the
/// client saw; a labelled sample is absent until then).
async fn wait_for_metric(app: &TestApp, sample: &str, at_least: f64) {
    let deadline = tokio::time::Instant::now() + RELOAD_DEADLINE;
    while app.metric_or_zero(sample).await < at_least {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sample} never reached {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server under mTLS (certificates of `client_ca`, callers named by `identities`, the
/// identities file's text) that requires a caller identity.
async fn mtls_app(
    dir: &std::path::Path,
    server_ca: &TestCa,
    client_ca: &TestCa,
    identities: &str,
) -> TestApp {
    let tls = server_tls(dir, server_ca, Some(client_ca));
    let path = dir.join("identities");
    std::fs::write(&path, identities).unwrap();
    spawn_app_with(|settings| {
        settings.tls = tls;
        settings.auth.mode = AuthMode::Required;
        settings.auth.identities = Some(path);
    })
    .await
}

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

    // A plaintext HTTP/2 client gets no answer from a TLS listener, only a closed
    // connection.
    let plaintext = list_templates(app.channel.clone()).await.unwrap_err();
    assert_eq!(plaintext.message(), "transport error", "{plaintext:?}");
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
    let identities = "acme spiffe://cluster.local/ns/acme/sa/billing\n";
    let app = mtls_app(dir.path(), &server_ca, &client_ca, identities).await;

    let billing = client_ca.client("billing", Some("spiffe://cluster.local/ns/acme/sa/billing"));
    let channel = tls_channel(app.address, &server_ca, Some(&billing))
        .await
        .unwrap();
    list_templates(channel).await.unwrap();

    let stranger = stranger_ca.client("billing", Some("spiffe://cluster.local/ns/acme/sa/billing"));
    for (case, identity, alert) in [
        ("no certificate", None, "CertificateRequired"),
        ("a certificate of another CA", Some(&stranger), "UnknownCA"),
    ] {
        // TLS 1.3 finishes the client's side of the handshake before the server has checked
        // its certificate: the server's alert shows on connecting or on the first call.
        let refusal = match tls_channel(app.address, &server_ca, identity).await {
            Err(error) => format!("{error:?}"),
            Ok(channel) => format!("{:?}", list_templates(channel).await.unwrap_err()),
        };
        assert!(
            refusal.contains(&format!("received fatal alert: {alert}")),
            "{case}: {refusal}"
        );
    }
    wait_for_metric(
        &app,
        "lottie_render_tls_handshake_failures_total{reason=\"refused\"}",
        2.0,
    )
    .await;

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
    wait_for_metric(
        &app,
        "lottie_render_config_reloads_total{file=\"tls\",outcome=\"kept_previous\"}",
        1.0,
    )
    .await;
    assert_eq!(served_serial(app.address, &ca).await, "2");
    list_templates(tls_channel(app.address, &ca, None).await.unwrap())
        .await
        .unwrap();
    app.stop().await;
}

#[tokio::test]
async fn the_client_verbs_call_over_tls_and_mtls_with_an_api_key_or_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, client_ca) = (TestCa::new("server ca"), TestCa::new("client ca"));
    let ca_file = server_ca.write(dir.path(), "server-ca.pem");
    let keys = crate::helpers::api_keys_file(dir.path(), &[("acme", "billing", "acme-key")]);
    let tls = server_tls(dir.path(), &server_ca, None);
    let app = spawn_app_with(|settings| {
        settings.tls = tls;
        settings.auth.mode = AuthMode::Required;
        settings.auth.api_keys = Some(keys);
    })
    .await;
    let server = format!("https://localhost:{}", app.address.port());
    let ca = ca_file.to_str().unwrap().to_owned();
    let cli = |extra: Vec<String>| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lottie-render"))
            .args(["template", "list", "--server"])
            .args(extra)
            .env_remove("LOTTIE_RENDER_API_KEY")
            .output()
            .unwrap()
    };
    let (with_key, without_key, plaintext) = tokio::task::spawn_blocking({
        let (server, ca) = (server.clone(), ca.clone());
        move || {
            let args = |more: &[&str]| {
                let mut args = vec![server.clone(), "--tls-ca".into(), ca.clone()];
                args.extend(more.iter().map(|arg| arg.to_string()));
                args
            };
            (
                cli(args(&["--api-key", "acme-key"])),
                cli(args(&[])),
                cli(vec![
                    server.replace("https", "http"),
                    "--tls-ca".into(),
                    ca.clone(),
                ]),
            )
        }
    })
    .await
    .unwrap();
    assert!(with_key.status.success(), "{with_key:?}");
    assert_eq!(without_key.status.code(), Some(65), "{without_key:?}");
    assert!(
        String::from_utf8_lossy(&without_key.stderr).contains("UNAUTHENTICATED"),
        "{without_key:?}"
    );
    // TLS flags with an http:// server are a usage mistake, said before connecting.
    assert_eq!(plaintext.status.code(), Some(64), "{plaintext:?}");
    app.stop().await;

    // mTLS: the client certificate's SPIFFE id names the tenant.
    let identities = dir.path().join("identities");
    std::fs::write(
        &identities,
        "acme spiffe://cluster.local/ns/acme/sa/billing\n",
    )
    .unwrap();
    let tls = server_tls(dir.path(), &server_ca, Some(&client_ca));
    let app = spawn_app_with(|settings| {
        settings.tls = tls;
        settings.auth.mode = AuthMode::Required;
        settings.auth.identities = Some(identities);
    })
    .await;
    let (cert, key) = client_ca
        .client("billing", Some("spiffe://cluster.local/ns/acme/sa/billing"))
        .write(dir.path(), "billing");
    let server = format!("https://localhost:{}", app.address.port());
    let listed = tokio::task::spawn_blocking(move || {
        cli(vec![
            server,
            "--tls-ca".into(),
            ca,
            "--tls-cert".into(),
            cert.to_str().unwrap().into(),
            "--tls-key".into(),
            key.to_str().unwrap().into(),
        ])
    })
    .await
    .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    app.stop().await;
}

#[tokio::test]
async fn silent_peers_holding_handshakes_open_do_not_hold_up_a_real_client() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test ca");
    let tls = server_tls(dir.path(), &ca, None);
    let app = spawn_app_with(|settings| settings.tls = tls).await;
    // Peers that connect and never say a word (slow loris): each costs one handshake slot
    // until the handshake deadline, and the accept loop goes on. Sixteen, from one address
    // (127.0.0.2; the real client's 127.0.0.1 has its own share).
    let mut silent = Vec::new();
    for _ in 0..16 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        silent.push(socket.connect(app.address).await.unwrap());
    }
    let channel = tls_channel(app.address, &ca, None).await.unwrap();
    list_templates(channel).await.unwrap();
    // Served while every silent peer still holds its handshake: the real client did not
    // wait for their deadline (no clock here: the server's own timeouts are the order).
    let timeouts = "lottie_render_tls_handshake_failures_total{reason=\"timeout\"}";
    assert_eq!(
        app.metric(timeouts).await,
        0.0,
        "the real client was served only after silent peers timed out"
    );
    // The server drops them at the handshake deadline (waited for generously: a minute).
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(
        lottie_render::tls::incoming::TLS_HANDSHAKE_TIMEOUT * 12,
        silent[0].read(&mut byte),
    )
    .await
    .expect("a silent peer was never dropped");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    wait_for_metric(&app, timeouts, 1.0).await;
    drop(silent);
    app.stop().await;
}

#[tokio::test]
async fn silent_peers_from_one_address_hold_only_its_share_of_handshakes_and_others_are_served() {
    use lottie_render::fair_share::RESERVE_FIRST_AMOUNTS;
    use lottie_render::tls::incoming::MAX_TLS_HANDSHAKES_IN_PROGRESS;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test ca");
    let tls = server_tls(dir.path(), &ca, None);
    // Connections open per address above the attempts, so that only the handshakes' share
    // closes them here (crate::hostile::connection_admission holds the open connections').
    let app = spawn_app_with(|settings| {
        settings.tls = tls;
        settings.connections.max_connections_per_address = 1024;
    })
    .await;
    // More silent connections from one address (127.0.0.2) than the server has handshake
    // slots in all: without a share per address they would hold every slot until the
    // handshake deadline, and every other client would wait in the backlog. The share (an
    // address alone: half of what the reserve leaves) is checked once a connection is
    // accepted: those over it are closed at once, never waiting.
    let attempts = MAX_TLS_HANDSHAKES_IN_PROGRESS + 8;
    let share_alone = (MAX_TLS_HANDSHAKES_IN_PROGRESS - RESERVE_FIRST_AMOUNTS) / 2;
    let mut silent = Vec::new();
    for _ in 0..attempts {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        silent.push(socket.connect(app.address).await.unwrap());
    }
    // The connections over the address's share are closed at once, not held.
    let busy = "lottie_render_tls_handshake_failures_total{reason=\"address_busy\"}";
    let refused = (attempts - share_alone) as f64;
    wait_for_metric(&app, busy, refused).await;
    // A client from another address (127.0.0.1) is served while the address's share still
    // holds its handshakes (none has reached its deadline yet: no clock here, the server's
    // own timeouts are the order, as in the test above).
    let channel = tls_channel(app.address, &ca, None).await.unwrap();
    list_templates(channel).await.unwrap();
    let timeouts = "lottie_render_tls_handshake_failures_total{reason=\"timeout\"}";
    assert_eq!(app.metric(timeouts).await, 0.0);
    assert_eq!(app.metric(busy).await, refused);
    drop(silent);
    app.stop().await;
}

#[tokio::test]
async fn silent_peers_from_eight_addresses_hold_their_shares_and_an_honest_client_is_served_at_once(
) {
    use lottie_render::fair_share::RESERVE_FIRST_AMOUNTS;
    use lottie_render::tls::incoming::MAX_TLS_HANDSHAKES_IN_PROGRESS;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test ca");
    let tls = server_tls(dir.path(), &ca, None);
    let app = spawn_app_with(|settings| settings.tls = tls).await;
    // The attack: 64 silent connections from each of 8 addresses (127.0.0.2 to
    // 127.0.0.9), 512 in all, twice the handshake slots; with a share of 64 per address
    // they held every slot and honest handshakes waited for their deadline (5 s). Now the
    // shares shrink as addresses arrive and the reserve keeps slots for addresses with none.
    let (addresses, per_address) = (8u8, 64usize);
    let mut silent = Vec::new();
    for host in 2..2 + addresses {
        for _ in 0..per_address {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket
                .bind(std::net::SocketAddr::from(([127, 0, 0, host], 0)))
                .unwrap();
            silent.push(socket.connect(app.address).await.unwrap());
        }
    }
    // An honest client (127.0.0.1) handshakes and is answered while the eight addresses'
    // shares still hold their handshakes: in milliseconds, within a floor a saturated 2-core
    // machine holds, a second short of the handshake deadline it waited for before.
    let honest_limit = lottie_render::tls::incoming::TLS_HANDSHAKE_TIMEOUT - Duration::from_secs(1);
    let started = std::time::Instant::now();
    tokio::time::timeout(honest_limit, async {
        let channel = tls_channel(app.address, &ca, None).await.unwrap();
        list_templates(channel).await.unwrap();
    })
    .await
    .expect("the honest TLS client was not served before the handshake deadline");
    eprintln!("honest handshake and call: {:?}", started.elapsed());
    // Each address's connections over its share were closed at once: all but the shared
    // part and a first slot of the reserve per address at most.
    let busy = "lottie_render_tls_handshake_failures_total{reason=\"address_busy\"}";
    let held_at_most =
        MAX_TLS_HANDSHAKES_IN_PROGRESS - RESERVE_FIRST_AMOUNTS + usize::from(addresses);
    let refused = (usize::from(addresses) * per_address - held_at_most) as f64;
    wait_for_metric(&app, busy, refused).await;
    let timeouts = "lottie_render_tls_handshake_failures_total{reason=\"timeout\"}";
    assert_eq!(app.metric(timeouts).await, 0.0);
    drop(silent);
    app.stop().await;
}

#[tokio::test]
async fn callers_named_by_their_client_certificates_see_only_their_own_tenants_templates() {
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, client_ca) = (TestCa::new("server ca"), TestCa::new("client ca"));
    // One tenant named by a SPIFFE id, the other by a subject CN (no SPIFFE id).
    let identities = "acme spiffe://cluster.local/ns/acme/sa/billing\nglobex Globex Reports\n";
    let app = mtls_app(dir.path(), &server_ca, &client_ca, identities).await;
    let acme = client_ca.client("billing", Some("spiffe://cluster.local/ns/acme/sa/billing"));
    let globex = client_ca.client("Globex Reports", None);
    let mut as_acme = TemplateServiceClient::new(
        tls_channel(app.address, &server_ca, Some(&acme))
            .await
            .unwrap(),
    );
    let mut as_globex = TemplateServiceClient::new(
        tls_channel(app.address, &server_ca, Some(&globex))
            .await
            .unwrap(),
    );

    let created = as_acme
        .create_template(create_request(
            "acme's ball",
            corpus("slots-ball-colors-opacity.json"),
        ))
        .await
        .unwrap()
        .into_inner();
    let listed = |response: proto::ListTemplatesResponse| -> Vec<String> {
        response
            .templates
            .into_iter()
            .map(|template| template.template_id)
            .collect()
    };
    let acme_sees = listed(
        as_acme
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(acme_sees, vec![created.template_id.clone()]);
    let globex_sees = listed(
        as_globex
            .list_templates(proto::ListTemplatesRequest::default())
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(globex_sees.is_empty(), "{globex_sees:?}");
    let status = as_globex
        .get_template(proto::GetTemplateRequest {
            template_id: created.template_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    app.stop().await;
}
