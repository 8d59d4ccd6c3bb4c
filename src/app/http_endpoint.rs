//! The HTTP endpoint beside the gRPC port: `GET /metrics` (Prometheus, from
//! [`crate::metrics`]) and the probes' `GET /livez` and `GET /readyz`
//! ([`crate::mesh::probes::HttpProbes`]), for what cannot speak gRPC health.

use crate::mesh::probes::HttpProbes;
use crate::metrics::{Metrics, METRICS_CONTENT_TYPE};
use std::sync::Arc;

/// The content type of the endpoint's other answers.
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// Pause after a failed accept on the metrics listener.
const ACCEPT_ERROR_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Serves `GET /metrics`, and the probes' `GET /livez` and `GET /readyz`
/// ([`crate::mesh::probes::HttpProbes`]), on `listener` until the task is dropped.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    probes: HttpProbes,
) {
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper::{Method, Request, Response, StatusCode};
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, typically: back off instead of spinning.
                tracing::warn!(%error, "metrics listener failed to accept");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        let (metrics, probes) = (metrics.clone(), probes.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let (metrics, probes) = (metrics.clone(), probes.clone());
                async move {
                    let path = request.uri().path();
                    let probe = match request.method() == Method::GET {
                        true => probes.serving(path).await,
                        false => None,
                    };
                    let (status, content_type, body) = match probe {
                        Some(true) => (StatusCode::OK, PLAIN_TEXT, "serving\n".into()),
                        Some(false) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            PLAIN_TEXT,
                            "not serving\n".into(),
                        ),
                        None if request.method() == Method::GET && path == "/metrics" => {
                            (StatusCode::OK, METRICS_CONTENT_TYPE, metrics.encode())
                        }
                        None => (
                            StatusCode::NOT_FOUND,
                            PLAIN_TEXT,
                            "not found; try GET /metrics, /livez or /readyz\n".into(),
                        ),
                    };
                    let mut response = Response::new(body);
                    *response.status_mut() = status;
                    response.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static(content_type),
                    );
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(%error, "metrics connection ended with an error");
            }
        });
    }
}
