//! The HTTP/JSON door: the same contract over HTTP/1.1 and h2c on the gRPC port, for
//! callers that speak HTTP/JSON (scripts, automation tools, webhook senders).
//!
//! It is a transcoder, as Envoy's gRPC-JSON transcoder is, in front of the very same tower
//! stack and services: a request that is not gRPC (told apart by its content type) is
//! matched to a route of the contract's `google.api.http` annotations ([`routes`]), its
//! path and query are read into the fields they set ([`transcode`]), and it goes through the
//! whole stack as that gRPC call (identity, tenant rate, idempotency key, body deadline,
//! fair byte budget, load shedding, metrics, traces, handlers); its JSON body becomes the
//! method's request message in the body layer, once it is received
//! ([`crate::middleware::request_body::DoorBody`], [`crate::grpc::json`]). The gRPC answer
//! comes back as HTTP ([`answer`]), as the method's row in [`crate::grpc::methods`] says:
//! JSON (with the status and `Location` of what it created), Server-Sent Events, or the
//! output file ([`download`]); a refusal as an RFC 9457 problem with the status the same
//! classification gives ([`problem`]). The door holds no logic of its own, so the two
//! protocols cannot drift. The web console's files are answered here too, before any route
//! (`crate::console`).
//!
//! Why not axum (already built, tonic routes with it): its router would be a second table
//! of the routes the annotations already say (and has no custom verbs, `{id}:cancel`), its
//! extractors answer plain-text 400/415/422 with none of our reasons, and calling the use
//! cases from axum handlers would need every layer of the stack written again for HTTP.

pub mod answer;
pub(crate) mod download;
mod keep_alive;
pub(crate) mod openapi;
pub(crate) mod problem;
pub(crate) mod routes;
pub mod transcode;

use crate::console;
use crate::error::{FieldViolation, ServiceError};
use crate::grpc::json::message_named;
use crate::grpc::methods::DoorAnswer;
use crate::metrics::{HttpLabels, Metrics};
use crate::middleware::request_body::DoorBody;
use crate::middleware::{AroundCall, AroundLayer, Next, Reply};
use crate::reason::Reason;
use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use keep_alive::BodyRead;
use prost_reflect::Value;
use routes::{Found, Route, Routes};
use std::sync::{Arc, OnceLock};
use tonic::body::Body;

/// Where the OpenAPI document of the door is served (no identity needed: it is the
/// contract, the same for everyone).
pub const OPENAPI_PATH: &str = "/openapi.json";

/// The door, in front of the stack ([`crate::app::stack`]).
#[derive(Debug, Clone)]
pub struct HttpJson {
    routes: Arc<Routes>,
    metrics: Arc<Metrics>,
    /// The OpenAPI document, written once.
    openapi: Bytes,
}

pub(crate) type HttpJsonLayer = AroundLayer<HttpJson>;

impl HttpJsonLayer {
    /// The door with the contract's routes, counting its answers in `metrics`.
    pub(crate) fn contract(metrics: Arc<Metrics>) -> HttpJsonLayer {
        let routes = contract_routes();
        let openapi = serde_json::to_vec(&openapi::document(&routes)).unwrap_or_default();
        AroundLayer(HttpJson {
            routes,
            metrics,
            openapi: Bytes::from(openapi),
        })
    }
}

/// The routes of the compiled-in descriptors, read once. They are built from our own
/// descriptor set, so a failure is a bug of ours: logged, and the door then finds no route.
fn contract_routes() -> Arc<Routes> {
    static ROUTES: OnceLock<Arc<Routes>> = OnceLock::new();
    ROUTES
        .get_or_init(|| {
            let routes = crate::grpc::proto::descriptor_pool()
                .and_then(Routes::from_pool)
                .unwrap_or_else(|error| {
                    tracing::error!(%error, "cannot read the HTTP routes; the HTTP door is closed");
                    Routes::none()
                });
            Arc::new(routes)
        })
        .clone()
}

/// Whether the call is gRPC (`application/grpc`, `application/grpc+proto`, …).
fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}

impl AroundCall<Body, Body> for HttpJson {
    fn around<S: Next<Body, Body>>(
        &self,
        call: Request<Body>,
        mut next: S,
    ) -> Reply<Body, S::Error> {
        if is_grpc(call.headers()) {
            return Box::pin(next.call(call));
        }
        if call.uri().path() == OPENAPI_PATH && matches!(*call.method(), Method::GET | Method::HEAD)
        {
            return self.answer_now("openapi", self.openapi());
        }
        let (call, body_read) = BodyRead::follow(call);
        // The console's files, like the contract, need no identity: they hold no secret, and
        // the page sends the caller's key with each API call it makes (docs/console.md).
        if let Some(answer) = console::answer(call.method(), call.uri().path(), call.headers()) {
            let answer = console::harden(answer.unwrap_or_else(problem::of_error));
            return self.answer_now("console", body_read.mark(answer));
        }
        let (route, path_fields) = match self.routes.find(call.method(), call.uri().path()) {
            Found::Route(route, fields) => (route.clone(), fields),
            Found::OtherVerbs(verbs) => {
                self.metrics.rejection(
                    "none",
                    "InvalidArgument",
                    Reason::MethodNotAllowed.as_str(),
                );
                let answer = method_not_allowed(call.method(), &verbs);
                return self.answer_now("none", body_read.mark(answer));
            }
            Found::Nothing => {
                self.metrics
                    .rejection("none", "NotFound", Reason::RouteNotFound.as_str());
                let answer = route_not_found(call.uri().path());
                return self.answer_now("none", body_read.mark(answer));
            }
        };
        let head_only = call.method() == Method::HEAD;
        // Every route's method has its door answer (a test of `grpc::methods` holds it).
        let door = route.rpc.door().unwrap_or(DoorAnswer::Json);
        let asked = (door == DoorAnswer::File)
            .then(|| download::Asked::of(call.headers()))
            .flatten();
        // The answer is converted as the message the method's row names.
        let converted = message_named(route.rpc.response()).and_then(|output| {
            let grpc = to_grpc(call, &route, path_fields, asked)?;
            Ok((grpc, output))
        });
        let (grpc, output) = match converted {
            Ok(converted) => converted,
            Err(error) => {
                // Refused before the stack (whose metrics layer counts the others).
                let code = format!("{:?}", error.code);
                let method = route.rpc.name();
                self.metrics.rejection(method, &code, error.reason.as_str());
                let answer = body_read.mark(problem::of_error(error));
                return self.answer_now(route.method.name(), answer);
            }
        };
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let response = next.call(grpc).await?;
            let answer = match door {
                DoorAnswer::File => download::file(response, asked, head_only).await,
                DoorAnswer::Events => answer::events(response, &output).await,
                DoorAnswer::Json | DoorAnswer::Created { .. } => {
                    answer::unary(response, &output, door).await
                }
            };
            count(&metrics, route.method.name(), &answer);
            Ok(body_read.mark(answer))
        })
    }
}

impl HttpJson {
    /// Answers at once, without the stack (counted).
    fn answer_now<E: 'static>(&self, method: &str, answer: http::Response<Body>) -> Reply<Body, E> {
        count(&self.metrics, method, &answer);
        Box::pin(async move { Ok(answer) })
    }

    fn openapi(&self) -> http::Response<Body> {
        let mut answer = http::Response::new(Body::new(Full::new(self.openapi.clone())));
        answer.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        answer
    }
}

fn count(metrics: &Metrics, method: &str, answer: &http::Response<Body>) {
    metrics
        .http_requests
        .get_or_create(&HttpLabels {
            method: method.to_owned(),
            status: answer.status().as_u16(),
        })
        .inc();
}

/// The gRPC call an HTTP request to `route` stands for: the same headers (identity, key,
/// trace context) and connection, the method's path, and its request message (built now
/// for a route without a body; for one with, by the body layer once the body is received,
/// from the [`DoorBody`] left in the extensions).
fn to_grpc(
    call: Request<Body>,
    route: &Route,
    path_fields: Vec<(String, String)>,
    asked: Option<download::Asked>,
) -> Result<Request<Body>, ServiceError> {
    let mut request = transcode::door_request(route, path_fields, call.uri().query())?;
    if let Some(asked) = asked {
        let input = route.method.input();
        for (name, value) in [("offset", asked.first), ("length", asked.length())] {
            if let Some(field) = input.get_field_by_name(name) {
                request.fields.push((field, Value::U64(value)));
            }
        }
    }
    let (mut parts, body) = call.into_parts();
    let length = body_length(&parts.headers, &body);
    let body = if route.has_body {
        let Some(length) = length else {
            return Err(refusal(
                Reason::LengthRequired,
                "a request body needs its length (Content-Length)",
            ));
        };
        if length > 0 && !is_json(&parts.headers) {
            return Err(refusal(
                Reason::MediaTypeUnsupported,
                "the body must be application/json",
            ));
        }
        parts.extensions.insert(DoorBody { length, request });
        body
    } else {
        // A route without a body reads none (GET, DELETE): its message is the head's.
        let message = request.framed_message(&route.method.input(), Bytes::new())?;
        Body::new(Full::new(message))
    };
    let grpc_path =
        http::uri::PathAndQuery::try_from(route.rpc.path()).map_err(ServiceError::internal)?;
    parts.uri = http::Uri::from_parts({
        let mut uri = http::uri::Parts::default();
        uri.path_and_query = Some(grpc_path);
        uri
    })
    .map_err(ServiceError::internal)?;
    parts.method = Method::POST;
    parts.version = http::Version::HTTP_2;
    let headers = &mut parts.headers;
    headers.remove(http::header::CONTENT_LENGTH);
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    unquote_idempotency_key(headers);
    Ok(Request::from_parts(parts, body))
}

/// The body's length from `Content-Length` or from the transport (an HTTP/1.1 request
/// without either has none: 0).
fn body_length(headers: &http::HeaderMap, body: &Body) -> Option<u64> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.trim().parse().ok());
    declared.or_else(|| http_body::Body::size_hint(body).exact())
}

/// Whether the body is said to be JSON (`application/json`, with parameters or a `+json`
/// suffix), or not said to be anything (curl's `--data-binary` says form data; that is
/// accepted too, as every curl example would otherwise need a header).
fn is_json(headers: &http::HeaderMap) -> bool {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return true;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence.ends_with("+json")
        || essence == "application/x-www-form-urlencoded"
}

/// The IETF draft writes the key as a structured-field string (`"abc"`); the key is what is
/// inside the quotes, as a gRPC caller would send it.
fn unquote_idempotency_key(headers: &mut http::HeaderMap) {
    let key = crate::idempotency::key::IDEMPOTENCY_KEY_HEADER;
    let unquoted = headers
        .get(key)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix('"')?.strip_suffix('"'))
        .and_then(|inner| HeaderValue::from_str(inner).ok());
    if let Some(unquoted) = unquoted {
        headers.insert(key, unquoted);
    }
}

fn refusal(reason: Reason, message: &str) -> ServiceError {
    ServiceError::invalid_argument(
        reason,
        message,
        vec![FieldViolation {
            field: "(request)".into(),
            description: message.into(),
        }],
    )
}

fn route_not_found(path: &str) -> http::Response<Body> {
    problem::of_error(ServiceError::not_found(
        Reason::RouteNotFound,
        format!("no route {path:?}; the routes are in /openapi.json"),
    ))
}

fn method_not_allowed(method: &Method, verbs: &[Method]) -> http::Response<Body> {
    let allowed: Vec<&str> = verbs.iter().map(Method::as_str).collect();
    let allowed = allowed.join(", ");
    let mut answer = problem::of_error(ServiceError::invalid_argument(
        Reason::MethodNotAllowed,
        format!("{method} is not a method of this route; it allows {allowed}"),
        Vec::new(),
    ));
    if let Ok(value) = HeaderValue::from_str(&allowed) {
        answer.headers_mut().insert(http::header::ALLOW, value);
    }
    answer
}
