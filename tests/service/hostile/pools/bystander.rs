//! The bystander's calls of the pools test, one kind per row: an error says why the call was
//! not served.

use super::attackers::connect_from;
use super::{Call, Caller, Prepared, RowServer, TINY};
use crate::api::image_slots::{png, quadrants};
use crate::api::pki::{tls_channel, TestCa};
use crate::api::webhooks::Receiver;
use crate::helpers::{
    corpus, create_request, grpc_headers, grpc_message, reason, status_of, submit_keyed_through,
    unique_key, TestApp,
};
use base64::Engine as _;
use bytes::Bytes;
use lottie_render::grpc::proto;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// What the bystander calls with.
pub(super) struct Context<'a> {
    pub(super) server: &'a RowServer,
    pub(super) caller: &'a Caller,
    pub(super) prepared: &'a Prepared,
    /// The TLS row's test CA.
    pub(super) ca: Option<&'a TestCa>,
    /// The webhook rows' prompt receiver.
    pub(super) receiver: Option<&'a Receiver>,
    /// An HTTP/1.1 client for the door.
    pub(super) door: &'a reqwest::Client,
}

/// A small PNG, the bystander's upload.
fn small_png() -> Vec<u8> {
    png(&quadrants(8, 8))
}

fn refused(status: tonic::Status) -> String {
    format!("{:?} {}", status.code(), reason(&status))
}

/// The bystander's `turn`th call of kind `call`.
pub(super) async fn call(call: Call, context: &Context<'_>, turn: usize) -> Result<(), String> {
    match call {
        Call::ListOnNewConnection => list_on_new_connection(context).await,
        Call::TlsListOnNewConnection => {
            let ca = context.ca.expect("the TLS row's CA");
            let channel = tls_channel(context.server.address(), ca, None)
                .await
                .map_err(|error| format!("no TLS connection: {error}"))?;
            let listed = proto::template_service_client::TemplateServiceClient::new(channel)
                .list_templates(proto::ListTemplatesRequest::default())
                .await;
            listed.map(drop).map_err(refused)
        }
        Call::WebhookDelivery => webhook_delivery(context).await,
        call => in_process_call(call, context.server.app(), context, turn).await,
    }
}

/// ListTemplates on a raw HTTP/2 connection of its own from the bystander's address, closed
/// (and its close awaited) after the call, so that the next call holds nothing before it.
async fn list_on_new_connection(context: &Context<'_>) -> Result<(), String> {
    let server = context.server.address();
    let tcp = connect_from(context.caller.address, server)
        .await
        .map_err(|error| format!("no connection: {error}"))?;
    let (client, connection) = h2::client::handshake(tcp)
        .await
        .map_err(|error| format!("closed at once: {error}"))?;
    let connection = tokio::spawn(connection);
    let served = async {
        let mut client = client.ready().await.map_err(|error| error.to_string())?;
        let path = "/lottie.render.v1.TemplateService/ListTemplates";
        let (answer, mut stream) = client
            .send_request(grpc_headers(server, path), false)
            .map_err(|error| error.to_string())?;
        let message: Bytes = grpc_message(&proto::ListTemplatesRequest::default());
        stream
            .send_data(message, true)
            .map_err(|error| error.to_string())?;
        let answer = answer.await.map_err(|error| error.to_string())?;
        match status_of(&answer) {
            None if answer.status() == http::StatusCode::OK => Ok(()),
            None => Err(format!("HTTP {}", answer.status())),
            Some(status) => Err(refused(status)),
        }
    }
    .await;
    // The client dropped, the connection ends (GOAWAY, then the socket closes).
    let _ = connection.await;
    served
}

/// The bystander's request again under a fresh key, with a webhook to its prompt receiver:
/// served once the receiver has the delivery.
async fn webhook_delivery(context: &Context<'_>) -> Result<(), String> {
    let receiver = context.receiver.expect("the webhook rows' receiver");
    let request = context
        .prepared
        .request
        .clone()
        .expect("a rendered request");
    let before = receiver.seen().len();
    let notified = proto::RenderRequest {
        notify: Some(proto::Notify {
            webhook_url: receiver.url("/bystander"),
            events: vec![proto::WebhookEvent::Succeeded as i32],
        }),
        ..request
    };
    let renders = context
        .server
        .app()
        .renders_as(context.caller.key.as_deref());
    submit_keyed_through(renders, &unique_key(), notified)
        .await
        .map_err(refused)?;
    while receiver.seen().len() == before {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Ok(())
}

/// The calls on the test's own channel to an in-process server.
async fn in_process_call(
    call: Call,
    app: &TestApp,
    context: &Context<'_>,
    turn: usize,
) -> Result<(), String> {
    let key = context.caller.key.as_deref();
    let job = context.prepared.job.as_deref();
    match call {
        Call::UploadAndList if turn.is_multiple_of(2) => {
            let upload = proto::UploadImageRequest {
                data: small_png().into(),
            };
            let uploaded = app.templates_as(key).upload_image(upload).await;
            uploaded.map(drop).map_err(refused)
        }
        Call::UploadAndList | Call::ListTemplates => {
            let listing = proto::ListTemplatesRequest::default();
            let listed = app.templates_as(key).list_templates(listing).await;
            listed.map(drop).map_err(refused)
        }
        Call::DoorUploadAndList => {
            let url = format!("http://{}", app.address);
            let request = if turn.is_multiple_of(2) {
                let data = base64::engine::general_purpose::STANDARD.encode(small_png());
                context
                    .door
                    .post(format!("{url}/v1/images"))
                    .json(&serde_json::json!({ "data": data }))
            } else {
                context.door.get(format!("{url}/v1/templates"))
            };
            let request = match key {
                Some(key) => request.bearer_auth(key),
                None => request,
            };
            let response = request.send().await.map_err(|error| error.to_string())?;
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("{status} {body}"))
            }
        }
        Call::HealthCheck => {
            let checked = HealthClient::new(app.channel.clone())
                .check(HealthCheckRequest::default())
                .await;
            checked.map(drop).map_err(refused)
        }
        Call::HealthWatch => {
            let mut health = HealthClient::new(app.channel.clone());
            let mut watch = health
                .watch(HealthCheckRequest::default())
                .await
                .map_err(refused)?
                .into_inner();
            watch.message().await.map(drop).map_err(refused)
        }
        Call::Watch => {
            let job_id = job.unwrap_or_default().to_owned();
            let watching = proto::WatchRenderJobRequest { job_id };
            let mut renders = app.renders_as(key);
            let mut watch = renders
                .watch_render_job(watching)
                .await
                .map_err(refused)?
                .into_inner();
            watch.message().await.map(drop).map_err(refused)
        }
        Call::Download => {
            let asked = proto::DownloadRenderOutputRequest {
                job_id: job.unwrap_or_default().to_owned(),
                length: 64 * 1024,
                ..Default::default()
            };
            let mut renders = app.renders_as(key);
            let mut chunks = renders
                .download_render_output(asked)
                .await
                .map_err(refused)?
                .into_inner();
            while chunks.message().await.map_err(refused)?.is_some() {}
            Ok(())
        }
        Call::CreateTemplate => {
            let request = create_request("bystander", corpus(TINY));
            let created = app.templates_as(key).create_template(request).await;
            created.map(drop).map_err(refused)
        }
        Call::ListOnNewConnection | Call::TlsListOnNewConnection | Call::WebhookDelivery => {
            unreachable!("called on connections of their own")
        }
    }
}
