//! Each identity source resolves the right tenant over a real socket: the mTLS peer
//! certificate (SPIFFE id, else CN), a trusted sidecar's `x-forwarded-client-cert` (Istio's
//! shape) or `l5d-client-id`, and an API key; sidecar headers are ignored without
//! `--trust-sidecar-identity`, and the other mesh's header is ignored with it; the API keys
//! file is re-read when it changes.
//!
//! The tenant is seen through a small service behind the server's own tower stack
//! (`middleware_with`, the identity layer included) and its own TLS accept loop, which
//! answers with the caller the identity layer resolved.

use crate::api::pki::{server_tls, tls_channel, TestCa};
use crate::helpers::{api_keys_file, spawn_app_with};
use lottie_render::app::{middleware_with, StackLimits};
use lottie_render::auth::{
    api_keys::sha256_hex, ApiKeys, AuthMode, Caller, Identities, KnownIdentities, TrustedSidecar,
};
use lottie_render::grpc::proto;
use lottie_render::metrics::Metrics;
use lottie_render::tls::{ReloadableTls, TlsIncoming};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Answers every call FAILED_PRECONDITION with `TENANT NAME SOURCE` of its caller.
#[derive(Clone)]
struct WhoAmI;

impl tonic::server::NamedService for WhoAmI {
    const NAME: &'static str = "test.WhoAmI";
}

impl tower::Service<http::Request<tonic::body::Body>> for WhoAmI {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let caller = Caller::of(request.extensions());
        let answer = Status::failed_precondition(format!(
            "{} {} {:?}",
            caller.tenant, caller.name, caller.source
        ));
        std::future::ready(Ok(answer.into_http()))
    }
}

/// The identity layer and WhoAmI on a fresh port, over TLS when `tls` is given.
async fn spawn_who_am_i(
    identities: Identities,
    tls: Option<lottie_render::tls::TlsSettings>,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics = Metrics::new();
    let router = tonic::transport::Server::builder()
        .layer(middleware_with(
            lottie_render::telemetry::traces::Tracing::off(),
            metrics.clone(),
            Arc::new(identities),
            StackLimits {
                max_concurrent_requests: 16,
                request_body_timeout: Duration::from_secs(5),
                request_buffer_bytes: 16 << 20,
                max_watchers: 4,
                tenant_rate: None,
            },
        ))
        .add_service(WhoAmI);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let incoming = TcpIncoming::from(listener);
    match tls.and_then(|tls| tls.files()) {
        Some(files) => {
            let tls = Arc::new(ReloadableTls::load(files).unwrap());
            // The server's own accept loop is the application's; here plain accepts, each
            // holding nothing more than its socket.
            let accepted = futures_util::StreamExt::filter_map(incoming, |accepted| {
                std::future::ready(accepted.ok().map(|stream| (stream, ())))
            });
            let handshaken = futures_util::StreamExt::map(
                TlsIncoming::new(accepted, tls, metrics),
                |(stream, ())| Ok::<_, std::io::Error>(stream),
            );
            tokio::spawn(router.serve_with_incoming_shutdown(handshaken, shutdown));
        }
        None => {
            tokio::spawn(router.serve_with_incoming_shutdown(incoming, shutdown));
        }
    }
    (address, stop)
}

/// `TENANT NAME SOURCE` of the caller the server resolved, or the refusal.
async fn who_am_i(channel: Channel, headers: &[(&str, &str)]) -> Result<String, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(());
    for (name, value) in headers {
        request.metadata_mut().insert(
            tonic::metadata::MetadataKey::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let status = grpc
        .unary::<(), (), _>(
            request,
            "/test.WhoAmI/Who".parse().unwrap(),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    if status.code() == Code::FailedPrecondition {
        Ok(status.message().to_string())
    } else {
        Err(status)
    }
}

async fn plaintext(address: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

const IDENTITIES: &str = "\
acme spiffe://cluster.local/ns/acme/sa/billing
globex Globex Reports
initech web.initech.serviceaccount.identity.linkerd.cluster.local
";

fn identities(mode: AuthMode, trust_sidecar: Option<TrustedSidecar>) -> Identities {
    let keys = ApiKeys::parse(&format!("hooli ops {}", sha256_hex("hooli-key"))).unwrap();
    Identities::new(mode, keys)
        .with_known_identities(KnownIdentities::parse(IDENTITIES).unwrap())
        .trusting_sidecar_identity(trust_sidecar)
}

/// XFCC as an Istio sidecar writes it for a client whose SPIFFE id is acme's billing.
const ISTIO_XFCC: &str = "By=spiffe://cluster.local/ns/render/sa/lottie-render;\
    Hash=3fa0e3c0b3f4d0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70819;\
    Subject=\"\";URI=spiffe://cluster.local/ns/acme/sa/billing";

#[tokio::test]
async fn a_peer_certificate_names_its_tenant_by_spiffe_id_else_by_common_name() {
    let dir = tempfile::tempdir().unwrap();
    let (server_ca, client_ca) = (TestCa::new("server ca"), TestCa::new("client ca"));
    let tls = server_tls(dir.path(), &server_ca, Some(&client_ca));
    let (address, _stop) = spawn_who_am_i(identities(AuthMode::Required, None), Some(tls)).await;

    for (case, certificate, api_key, expected) in [
        (
            "SPIFFE id",
            client_ca.client(
                "Globex Reports",
                Some("spiffe://cluster.local/ns/acme/sa/billing"),
            ),
            None,
            Ok("acme spiffe://cluster.local/ns/acme/sa/billing PeerCertificate"),
        ),
        (
            "CN without a SPIFFE id",
            client_ca.client("Globex Reports", None),
            None,
            Ok("globex Globex Reports PeerCertificate"),
        ),
        (
            "the certificate comes before an API key",
            client_ca.client("Globex Reports", None),
            Some("Bearer hooli-key"),
            Ok("globex Globex Reports PeerCertificate"),
        ),
        (
            "a certificate the identities file does not name",
            client_ca.client("Someone Else", None),
            Some("Bearer hooli-key"),
            Err(Code::Unauthenticated),
        ),
    ] {
        let channel = tls_channel(address, &server_ca, Some(&certificate))
            .await
            .unwrap();
        let headers: Vec<(&str, &str)> = api_key
            .map(|key| ("authorization", key))
            .into_iter()
            .collect();
        let answer = who_am_i(channel, &headers).await;
        assert_eq!(
            answer.map_err(|status| status.code()),
            expected.map(str::to_string),
            "{case}"
        );
    }
}

#[tokio::test]
async fn trusted_sidecar_headers_and_api_keys_name_their_tenants() {
    let (envoy_address, _stop_envoy) = spawn_who_am_i(
        identities(AuthMode::Required, Some(TrustedSidecar::Envoy)),
        None,
    )
    .await;
    let (linkerd_address, _stop_linkerd) = spawn_who_am_i(
        identities(AuthMode::Required, Some(TrustedSidecar::Linkerd)),
        None,
    )
    .await;
    let envoy = plaintext(envoy_address).await;
    let linkerd = plaintext(linkerd_address).await;
    let initech = "web.initech.serviceaccount.identity.linkerd.cluster.local";
    for (case, channel, headers, expected) in [
        (
            "Istio's x-forwarded-client-cert",
            &envoy,
            vec![("x-forwarded-client-cert", ISTIO_XFCC)],
            Ok("acme spiffe://cluster.local/ns/acme/sa/billing Sidecar"),
        ),
        (
            "the last XFCC element is the one our sidecar added",
            &envoy,
            vec![(
                "x-forwarded-client-cert",
                "By=spiffe://cluster.local/ns/edge/sa/gw;URI=spiffe://cluster.local/ns/acme/sa/billing,\
                 By=spiffe://cluster.local/ns/render/sa/lottie-render;Hash=ab;Subject=\"CN=Globex Reports,O=globex\";URI=",
            )],
            Ok("globex Globex Reports Sidecar"),
        ),
        (
            "Linkerd's l5d-client-id",
            &linkerd,
            vec![("l5d-client-id", initech)],
            Ok("initech web.initech.serviceaccount.identity.linkerd.cluster.local Sidecar"),
        ),
        (
            "an API key",
            &envoy,
            vec![("authorization", "Bearer hooli-key")],
            Ok("hooli ops ApiKey"),
        ),
        (
            "the sidecar's identity comes before an API key",
            &envoy,
            vec![
                ("x-forwarded-client-cert", ISTIO_XFCC),
                ("authorization", "Bearer hooli-key"),
            ],
            Ok("acme spiffe://cluster.local/ns/acme/sa/billing Sidecar"),
        ),
        // Istio's sidecar leaves an l5d-client-id as the caller wrote it (and, for a caller
        // without a mesh certificate, removes the XFCC): it must not pick the tenant.
        (
            "behind Envoy, a forged l5d-client-id is ignored",
            &envoy,
            vec![("l5d-client-id", initech)],
            Err(Code::Unauthenticated),
        ),
        (
            "behind Envoy, a forged l5d-client-id does not displace the API key",
            &envoy,
            vec![
                ("l5d-client-id", initech),
                ("authorization", "Bearer hooli-key"),
            ],
            Ok("hooli ops ApiKey"),
        ),
        // Linkerd's proxy leaves an x-forwarded-client-cert as the caller wrote it.
        (
            "behind Linkerd, a forged x-forwarded-client-cert is ignored",
            &linkerd,
            vec![("x-forwarded-client-cert", ISTIO_XFCC)],
            Err(Code::Unauthenticated),
        ),
        (
            "behind Linkerd, a forged x-forwarded-client-cert does not displace Linkerd's",
            &linkerd,
            vec![
                ("x-forwarded-client-cert", ISTIO_XFCC),
                ("l5d-client-id", initech),
            ],
            Ok("initech web.initech.serviceaccount.identity.linkerd.cluster.local Sidecar"),
        ),
        (
            "a sidecar identity the file does not name",
            &linkerd,
            vec![("l5d-client-id", "web.umbrella.serviceaccount.identity.linkerd.cluster.local")],
            Err(Code::Unauthenticated),
        ),
        (
            "an XFCC header that names no one",
            &envoy,
            vec![("x-forwarded-client-cert", "By=spiffe://x;Hash=ab;Subject=\"\";URI=")],
            Err(Code::Unauthenticated),
        ),
        ("nothing at all", &envoy, vec![], Err(Code::Unauthenticated)),
        ("nothing at all", &linkerd, vec![], Err(Code::Unauthenticated)),
    ] {
        let answer = who_am_i(channel.clone(), &headers).await;
        assert_eq!(
            answer.map_err(|status| status.code()),
            expected.map(str::to_string),
            "{case}"
        );
    }
}

#[tokio::test]
async fn sidecar_headers_are_ignored_without_trust_sidecar_identity() {
    for (mode, expected) in [
        // A forged header gains nothing: the caller stays anonymous…
        (AuthMode::Optional, Ok("default anonymous Anonymous")),
        // …or is refused for having no identity at all.
        (AuthMode::Required, Err(Code::Unauthenticated)),
    ] {
        let (address, _stop) = spawn_who_am_i(identities(mode, None), None).await;
        let channel = plaintext(address).await;
        for forged in [
            ("x-forwarded-client-cert", ISTIO_XFCC),
            (
                "l5d-client-id",
                "web.initech.serviceaccount.identity.linkerd.cluster.local",
            ),
        ] {
            let answer = who_am_i(channel.clone(), &[forged]).await;
            assert_eq!(
                answer.map_err(|status| status.code()),
                expected.map(str::to_string),
                "{mode:?} {forged:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_api_keys_file_is_re_read_when_it_changes_and_a_broken_one_keeps_the_old_keys() {
    let dir = tempfile::tempdir().unwrap();
    let keys = api_keys_file(dir.path(), &[("acme", "billing", "old-key")]);
    let app = spawn_app_with(|settings| {
        settings.auth.mode = AuthMode::Required;
        settings.auth.api_keys = Some(keys.clone());
    })
    .await;
    let list = |key: &'static str| {
        let mut client = app.templates_as(Some(key));
        async move {
            client
                .list_templates(proto::ListTemplatesRequest::default())
                .await
                .map(drop)
                .map_err(|status| status.code())
        }
    };
    assert_eq!(list("old-key").await, Ok(()));
    assert_eq!(list("new-key").await, Err(Code::Unauthenticated));

    api_keys_file(dir.path(), &[("acme", "billing", "new-key")]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while list("new-key").await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new key never worked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(list("old-key").await, Err(Code::Unauthenticated));

    std::fs::write(&keys, "acme billing not-a-hash\n").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let kept = "lottie_render_config_reloads_total{file=\"api_keys\",outcome=\"kept_previous\"}";
    // Absent until the first refused reload.
    while app.metric_or_zero(kept).await < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broken file was never read"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(list("new-key").await, Ok(()));
    app.stop().await;
}

#[tokio::test]
async fn the_identities_file_is_re_read_when_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let identities = dir.path().join("identities");
    std::fs::write(
        &identities,
        "acme spiffe://cluster.local/ns/acme/sa/billing\n",
    )
    .unwrap();
    let app = spawn_app_with(|settings| {
        settings.auth.mode = AuthMode::Required;
        settings.auth.identities = Some(identities.clone());
        settings.auth.trust_sidecar_identity = Some(TrustedSidecar::Linkerd);
    })
    .await;
    let linkerd = "web.initech.serviceaccount.identity.linkerd.cluster.local";
    let list = || async {
        let mut request = tonic::Request::new(proto::ListTemplatesRequest::default());
        request
            .metadata_mut()
            .insert("l5d-client-id", linkerd.parse().unwrap());
        app.templates_as(None)
            .list_templates(request)
            .await
            .map(drop)
            .map_err(|status| status.code())
    };
    assert_eq!(list().await, Err(Code::Unauthenticated));

    let replacement = dir.path().join("identities.new");
    std::fs::write(&replacement, format!("initech {linkerd}\n")).unwrap();
    std::fs::rename(&replacement, &identities).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while list().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new identity never worked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.stop().await;
}
