//! `RequestBoundsLayer`: a request message just received whole ([`super::request_body`]) is
//! held to the contract's bounds ([`crate::grpc::bounds`]) before anything copies or decodes
//! it. tonic's decoder copies a message into a buffer of its own before our codec scans it,
//! so a message over a bound refused there cost twice its bytes; refused here, once. Only the
//! contract's methods are looked at: health, reflection (a stream) and unknown paths pass
//! untouched. The codec scans again what passes (a compressed message is scanned only
//! there, once inflated): linear, and what a caller cannot skip by calling from inside.
//! A message that passes goes on to tonic as its prefix, then its bytes ([`handed_on`]), so
//! that tonic's buffer holds it once.

use super::request_body::GRPC_PREFIX_BYTES;
use super::{AroundCall, AroundLayer, Next, Reply};
use crate::grpc::bounds::{check_received, Schema};
use crate::grpc::methods::Method;
use http::Request;
use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::Status;

/// Holds each contract request to the contract's bounds.
#[derive(Debug, Clone, Default)]
pub struct RequestBounds;

pub(crate) type RequestBoundsLayer = AroundLayer<RequestBounds>;

impl AroundCall<Body, Body> for RequestBounds {
    fn around<S: Next<Body, Body>>(
        &self,
        call: Request<Body>,
        mut next: S,
    ) -> Reply<Body, S::Error> {
        let contract_method = Method::of(call.uri().path()).filter(|method| {
            Schema::contract().is_ok_and(|schema| schema.plans_request_of(*method))
        });
        let Some(method) = contract_method else {
            return Box::pin(next.call(call));
        };
        Box::pin(async move {
            let (parts, body) = call.into_parts();
            // The body layer made the message one frame: collecting takes that frame whole,
            // it copies nothing.
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(status) => return Ok(status.into_http()),
            };
            if let Err(error) = check_received(method, &bytes) {
                return Ok(Status::from(error).into_http());
            }
            next.call(Request::from_parts(parts, handed_on(bytes)))
                .await
        })
    }
}

/// The body handed to tonic of a message received whole (`framed`: its prefix, then the
/// message), as two frames that share its bytes: the prefix, then the message. tonic copies
/// a body into its decoding buffer and, once it has read a prefix, reserves the length it
/// declares on top of what the buffer holds: handed the whole message in one frame, its
/// buffer took twice the message of address space (a 63 MiB upload 126 MiB; under a 1 GiB
/// address-space limit, four of them aborted the server); handed the prefix first, the room
/// it reserves is what the message then fills.
fn handed_on(mut framed: bytes::Bytes) -> Body {
    let prefix = framed.split_to(GRPC_PREFIX_BYTES.min(framed.len()));
    let frames = [prefix, framed]
        .into_iter()
        .filter(|frame| !frame.is_empty())
        .map(|frame| Ok::<_, std::convert::Infallible>(http_body::Frame::data(frame)));
    Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
        frames,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::proto;
    use bytes::Bytes;
    use http_body_util::Full;
    use prost::Message;
    use std::convert::Infallible;
    use tonic_types::StatusExt;
    use tower::{service_fn, Layer, ServiceExt};

    /// Answers the number of body bytes it received.
    async fn counts_bytes(
        request: http::Request<Body>,
    ) -> Result<http::Response<Body>, Infallible> {
        let bytes = request.into_body().collect().await.unwrap().to_bytes();
        Ok(http::Response::new(Body::new(Full::new(Bytes::from(
            bytes.len().to_string(),
        )))))
    }

    fn framed(message: &[u8]) -> Body {
        let mut bytes = vec![0u8];
        bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
        bytes.extend_from_slice(message);
        Body::new(Full::new(Bytes::from(bytes)))
    }

    fn stops(count: usize) -> Vec<u8> {
        proto::RenderRequest {
            modifications: Some(proto::Modifications {
                gradients: [(
                    "g".to_owned(),
                    proto::Gradient {
                        stops: vec![proto::GradientStop::default(); count],
                    },
                )]
                .into(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    async fn call(path: &str, body: Body) -> http::Response<Body> {
        let service = RequestBoundsLayer::default().layer(service_fn(counts_bytes));
        let request = http::Request::builder().uri(path).body(body).unwrap();
        service.oneshot(request).await.unwrap()
    }

    #[tokio::test]
    async fn a_message_over_a_bound_is_refused_before_the_service_and_one_within_passes_whole() {
        let submit = Method::SubmitRender.path();
        let within = stops(64);
        let response = call(submit, framed(&within)).await;
        let answered = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(answered, (within.len() + 5).to_string());

        let response = call(submit, framed(&stops(100_000))).await;
        let status = Status::from_header_map(response.headers()).expect("a refusal");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        let fields: Vec<String> = status
            .get_error_details()
            .bad_request()
            .map(|bad| {
                bad.field_violations
                    .iter()
                    .map(|v| v.field.clone())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(fields, ["modifications.gradients[\"g\"].stops"]);
    }

    /// Answers the sizes of the body's data frames, in order ("5,1000").
    async fn frame_sizes(request: http::Request<Body>) -> Result<http::Response<Body>, Infallible> {
        let mut body = request.into_body();
        let mut sizes = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                sizes.push(data.len().to_string());
            }
        }
        Ok(http::Response::new(Body::new(Full::new(Bytes::from(
            sizes.join(","),
        )))))
    }

    #[tokio::test]
    async fn a_message_goes_on_to_tonic_as_its_prefix_then_its_bytes_so_it_is_held_once() {
        // tonic reserves the length a prefix declares on top of what its buffer holds: handed
        // the whole message in one frame, its buffer was twice the message (issue 42: four
        // 63 MiB uploads aborted a server under a 1 GiB address-space limit).
        let within = stops(64);
        let service = RequestBoundsLayer::default().layer(service_fn(frame_sizes));
        let request = http::Request::builder()
            .uri(Method::SubmitRender.path())
            .body(framed(&within))
            .unwrap();
        let response = service.oneshot(request).await.unwrap();
        let answered = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(answered, format!("5,{}", within.len()));
    }

    #[test]
    fn a_templates_file_may_be_as_large_as_the_largest_request() {
        // Held here, not in grpc::bounds' tests: the middleware depends on grpc, not the reverse.
        let schema = Schema::contract().unwrap();
        let plan = &schema.messages[schema
            .message("lottie.render.v1.CreateTemplateRequest")
            .unwrap()];
        let file = plan
            .fields
            .iter()
            .find(|f| f.name == "lottie_json")
            .unwrap();
        assert_eq!(
            file.length.max_bytes,
            Some(crate::middleware::request_body::MAX_REQUEST_BYTES as u64)
        );
    }

    #[tokio::test]
    async fn health_and_unknown_paths_pass_untouched() {
        for path in ["/grpc.health.v1.Health/Check", "/no.Such/Method"] {
            let response = call(path, framed(&[0xff; 10])).await;
            let answered = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(answered, "15", "{path}");
        }
    }
}
