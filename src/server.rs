//! The gRPC server: builds the services and the tower stack and serves them on an
//! already-bound listener until a shutdown future resolves, so `main` and the tests run the
//! very same entry point. On shutdown, health turns NOT_SERVING before the listener closes.

use crate::config::{ServerSettings, MAX_REQUEST_BYTES};
use crate::grpc::proto::template_service_server::TemplateServiceServer;
use crate::grpc::proto::FILE_DESCRIPTOR_SET;
use crate::grpc::templates::TemplateApi;
use crate::idempotency::IdempotencyKeyLayer;
use crate::storage::TemplateStore;
use std::future::Future;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot open the data directory: {0}")]
    Storage(#[from] crate::storage::StorageError),
    #[error("cannot build server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let store = TemplateStore::open(&settings.data_dir)?;
    let templates = TemplateServiceServer::new(TemplateApi::new(store))
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<TemplateServiceServer<TemplateApi>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        // google.rpc.ErrorInfo, BadRequest, RetryInfo: lets grpcurl show error details.
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        // google.rpc.ErrorInfo, BadRequest, RetryInfo: lets grpcurl show error details.
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let local = listener.local_addr().ok();
    tracing::info!(listen = ?local, data_dir = %settings.data_dir.display(), "serving");
    let draining = {
        let health = health.clone();
        async move {
            shutdown.await;
            tracing::info!("shutting down: health NOT_SERVING, finishing calls in flight");
            health
                .set_not_serving::<TemplateServiceServer<TemplateApi>>()
                .await;
        }
    };
    tonic::transport::Server::builder()
        // Refuses a SubmitRender without a well-formed idempotency-key from its headers,
        // before the body is decoded (the store slots in here with issue #4).
        .layer(IdempotencyKeyLayer)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(templates)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), draining)
        .await?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            // Without a SIGTERM handler, Ctrl-C still works.
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
