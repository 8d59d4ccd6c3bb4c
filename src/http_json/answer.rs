//! The gRPC answer turned into the HTTP one: a unary message as JSON (201 or 202 with
//! `Location` for what a call created), a status as an RFC 9457 problem (`problem`), a
//! watch stream as Server-Sent Events, a download as the file itself.

use super::problem;
use crate::grpc::json::to_json;
use crate::grpc::methods::DoorAnswer;
use crate::idempotency::claim::REPLAYED_HEADER;
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderValue, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use prost_reflect::MessageDescriptor;
use tonic::body::Body;
use tonic::Status;

/// Largest unary answer the door converts, bytes: our largest message is a Template with
/// its report (a few hundred KiB at the template limits); tonic's default send limit (4 MiB)
/// caps the rest.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Quiet time after which an event stream sends a comment: under the idle timeouts of
/// common proxies (nginx and most load balancers close after 60 s).
pub const SSE_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(15);
/// A gRPC message on the wire: a compression flag byte and a big-endian u32 length.
const GRPC_PREFIX_BYTES: usize = 5;

/// The whole answer of a unary call, as HTTP: 200, or what its method's row says it
/// created (`DoorAnswer::Created`: 201 or 202 with `Location`).
pub(crate) async fn unary(
    response: Response<Body>,
    output: &MessageDescriptor,
    door: DoorAnswer,
) -> Response<Body> {
    if let Some(status) = trailers_only(&response) {
        return problem::of_status(&status);
    }
    let replayed = response.headers().get(REPLAYED_HEADER).cloned();
    let mut reader = Messages::new(response.into_body());
    let message = match reader.next(MAX_ANSWER_BYTES).await {
        Next::Message(message) => message,
        Next::End(status) => return problem::of_status(&status),
    };
    let json = match to_json(output, &message) {
        Ok(json) => json,
        Err(error) => return problem::of_status(&Status::internal(error)),
    };
    // The status after the message (a unary call's is OK once it answered one).
    if let Next::End(status) = reader.next(MAX_ANSWER_BYTES).await {
        if status.code() != tonic::Code::Ok {
            return problem::of_status(&status);
        }
    }
    let mut answer = Response::new(Body::new(Full::new(Bytes::from(json.clone()))));
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(replayed) = replayed {
        answer.headers_mut().insert("idempotent-replayed", replayed);
    }
    if let DoorAnswer::Created {
        status,
        location_prefix,
        id_field,
    } = door
    {
        *answer.status_mut() = status;
        let id = serde_json::from_slice::<serde_json::Value>(&json)
            .ok()
            .and_then(|value| value.get(id_field)?.as_str().map(str::to_owned));
        if let Some(location) =
            id.and_then(|id| HeaderValue::from_str(&format!("{location_prefix}{id}")).ok())
        {
            answer
                .headers_mut()
                .insert(http::header::LOCATION, location);
        }
    }
    answer
}

/// The status of a trailers-only answer (an error before any message).
fn trailers_only(response: &Response<Body>) -> Option<Status> {
    response.headers().contains_key("grpc-status").then(|| {
        Status::from_header_map(response.headers())
            .unwrap_or_else(|| Status::internal("an answer with an unreadable status"))
    })
}

/// What the next read of a gRPC body gave.
pub(crate) enum Next {
    Message(Bytes),
    /// The stream ended with this status.
    End(Status),
}

/// Reads the messages of a gRPC response body one by one.
pub(crate) struct Messages {
    body: Body,
    buffer: BytesMut,
    ended: bool,
}

impl Messages {
    pub(crate) fn new(body: Body) -> Messages {
        Messages {
            body,
            buffer: BytesMut::new(),
            ended: false,
        }
    }

    /// The next message (at most `limit` bytes), or the status the stream ended with.
    pub(crate) async fn next(&mut self, limit: usize) -> Next {
        loop {
            if self.buffer.len() >= GRPC_PREFIX_BYTES {
                let declared = u32::from_be_bytes([
                    self.buffer[1],
                    self.buffer[2],
                    self.buffer[3],
                    self.buffer[4],
                ]) as usize;
                if self.buffer[0] != 0 || declared > limit {
                    // Our own services answer uncompressed messages within the limits.
                    return self.fail("an answer the door cannot convert");
                }
                if self.buffer.len() >= GRPC_PREFIX_BYTES + declared {
                    self.buffer.advance(GRPC_PREFIX_BYTES);
                    return Next::Message(self.buffer.split_to(declared).freeze());
                }
            }
            if self.ended {
                return self.fail("the answer ended inside a message");
            }
            match self.body.frame().await {
                None => {
                    self.ended = true;
                    if self.buffer.is_empty() {
                        return Next::End(Status::ok(""));
                    }
                }
                Some(Err(status)) => {
                    self.ended = true;
                    return Next::End(status);
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.buffer.extend_from_slice(&data),
                    Err(frame) => {
                        self.ended = true;
                        let status = frame
                            .trailers_ref()
                            .and_then(Status::from_header_map)
                            .unwrap_or_else(|| Status::ok(""));
                        return Next::End(status);
                    }
                },
            }
        }
    }

    fn fail(&mut self, message: &str) -> Next {
        self.ended = true;
        self.buffer.clear();
        Next::End(Status::internal(message.to_owned()))
    }
}

/// A body made of the items of `stream` (the SSE events, the file's bytes).
pub(crate) fn streamed(
    stream: impl futures_util::Stream<Item = Result<Bytes, Status>> + Send + 'static,
) -> Body {
    let frames = futures_util::StreamExt::map(stream, |item| item.map(http_body::Frame::data));
    Body::new(StreamBody::new(frames))
}

/// A watch stream as Server-Sent Events: each job state is an event `job` whose data is
/// the job as canonical JSON; a stream that ends with an error sends it as an event `error`
/// (a problem) and ends. An error before any state is answered as a problem, with its
/// status.
pub(crate) async fn events(response: Response<Body>, output: &MessageDescriptor) -> Response<Body> {
    if let Some(status) = trailers_only(&response) {
        return problem::of_status(&status);
    }
    let mut reader = Messages::new(response.into_body());
    let first = match reader.next(MAX_ANSWER_BYTES).await {
        Next::Message(message) => message,
        Next::End(status) => return problem::of_status(&status),
    };
    let output = output.clone();
    let state = (Some(first), reader, output, false);
    let stream =
        futures_util::stream::unfold(state, |(pending, mut reader, output, done)| async move {
            if done {
                return None;
            }
            let next = match pending {
                Some(message) => Next::Message(message),
                None => {
                    let next = reader.next(MAX_ANSWER_BYTES);
                    match tokio::time::timeout(SSE_KEEPALIVE, next).await {
                        Ok(next) => next,
                        // Nothing new (a job waiting in the queue): a comment keeps proxies
                        // from closing the quiet stream. `next` keeps only what a frame
                        // delivered, so dropping it loses nothing.
                        Err(_) => {
                            let comment = Bytes::from_static(b": keep-alive\n\n");
                            return Some((Ok(comment), (None, reader, output, false)));
                        }
                    }
                }
            };
            let (event, done) = match next {
                Next::Message(message) => match to_json(&output, &message) {
                    Ok(json) => (sse_event("job", &json), false),
                    Err(error) => (
                        sse_event("error", &problem::body_of(&Status::internal(error))),
                        true,
                    ),
                },
                Next::End(status) if status.code() == tonic::Code::Ok => return None,
                Next::End(status) => (sse_event("error", &problem::body_of(&status)), true),
            };
            Some((Ok(event), (None, reader, output, done)))
        });
    let mut answer = Response::new(streamed(stream));
    let headers = answer.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    answer
}

/// One Server-Sent Event (the data is one line of JSON).
fn sse_event(name: &str, json: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(json.len() + name.len() + 16);
    event.extend_from_slice(b"event: ");
    event.extend_from_slice(name.as_bytes());
    event.extend_from_slice(b"\ndata: ");
    event.extend_from_slice(json);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}
