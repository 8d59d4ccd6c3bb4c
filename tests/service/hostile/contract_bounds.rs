//! Every field of every request message that can grow (a list, a map, a map's keys, a text,
//! bytes), found by walking the contract's descriptor set, so that a field or a method added
//! tomorrow is covered without anyone remembering (issue 42, finding 1):
//! - at its worst: a message holding that one field filled to its method's body limit (empty
//!   elements, distinct keys, one huge value; through its parents, one each) is refused
//!   INVALID_ARGUMENT naming the field, through gRPC and through the HTTP door's JSON (or its
//!   URL, for the methods whose fields come from the path or query), and the server's peak
//!   memory grows by at most twice the body. Before the bounds, one 16 MiB SubmitRender of
//!   empty gradient stops grew the server by 1.6 GB;
//! - one past its declared bound (`(buf.validate.field)`): refused naming the field, so
//!   every bound the contract declares is one the service holds.

use crate::helpers::{RawCodec, ServerProcess};
use lottie_render::grpc::proto::descriptor_pool;
use lottie_render::middleware::request_body::{json_body_limit, method_body_limit};
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MethodDescriptor, Value};
use std::time::Duration;
use tonic::Code;

/// What the server's peak RSS may grow by beyond twice the body: the allocator's arenas,
/// the connection's buffers and the answer; small beside the hundreds of megabytes that
/// decoding a hostile body built.
const RSS_ALLOWANCE_BYTES: u64 = 16 * 1024 * 1024;
/// How long one call may take (a 100 MiB JSON body over loopback to a debug build).
const CALL_LIMIT: Duration = Duration::from_secs(60);
/// How many times a call refused for a reason worth retrying (the buffers still held on a
/// loaded machine, a transport broken under its body) is sent in all.
const TRANSIENT_ATTEMPTS: usize = 5;
/// The pause before sending it again: the buffers' retry delay
/// (`REQUEST_BUFFERS_RETRY_AFTER`, 2 s).
const TRANSIENT_RETRY_DELAY: Duration = Duration::from_secs(2);

/// One step from a request message to the field under test: the field, taken once (a map
/// field by the key `k`, a list by its first item).
#[derive(Clone)]
struct Step(FieldDescriptor);

/// A field under test: where it is and what about it grows.
#[derive(Clone)]
struct Target {
    method: MethodDescriptor,
    parents: Vec<Step>,
    field: FieldDescriptor,
    part: Part,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    /// A list's items or a map's entries.
    Count,
    /// A map's key.
    Key,
    /// A string or bytes value (a map's values included).
    Value,
}

/// Every target of every method of the contract.
fn targets() -> Vec<Target> {
    let pool = descriptor_pool().unwrap();
    let mut targets = Vec::new();
    for service in pool.services() {
        if service.package_name() != "lottie.render.v1" {
            continue;
        }
        for method in service.methods() {
            walk(&method, &method.input(), &mut Vec::new(), &mut targets);
        }
    }
    targets
}

fn walk(
    method: &MethodDescriptor,
    message: &prost_reflect::MessageDescriptor,
    parents: &mut Vec<Step>,
    targets: &mut Vec<Target>,
) {
    assert!(
        parents.len() < 8,
        "the contract's requests do not nest this deep"
    );
    for field in message.fields() {
        let value_kind = value_kind(&field);
        let mut add = |part| {
            targets.push(Target {
                method: method.clone(),
                parents: parents.clone(),
                field: field.clone(),
                part,
            })
        };
        if field.is_list() || field.is_map() {
            add(Part::Count);
        }
        if field.is_map() {
            add(Part::Key);
        }
        if matches!(value_kind, Kind::String | Kind::Bytes) {
            add(Part::Value);
        }
        if let Kind::Message(inner) = value_kind {
            parents.push(Step(field.clone()));
            walk(method, &inner, parents, targets);
            parents.pop();
        }
    }
}

/// The kind of a field's values (a map's values).
fn value_kind(field: &FieldDescriptor) -> Kind {
    match field.kind() {
        Kind::Message(entry) if field.is_map() => entry.map_entry_value_field().kind(),
        kind => kind,
    }
}

impl Target {
    fn path(&self) -> String {
        self.method.full_name().to_owned()
    }

    /// The field path a refusal names: `modifications.gradients["k"].stops`, and for a map's
    /// value `modifications.texts["k"]`.
    fn field_path(&self) -> String {
        let mut path = String::new();
        for Step(step) in &self.parents {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(step.name());
            if step.is_map() {
                path.push_str("[\"k\"]");
            } else if step.is_list() {
                path.push_str("[0]");
            }
        }
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(self.field.name());
        path
    }

    fn describe(&self) -> String {
        format!("{} {} ({:?})", self.path(), self.field_path(), self.part)
    }

    /// The field's declared bound for this part, from its `(buf.validate.field)` rules.
    fn bound(&self) -> u64 {
        let pool = descriptor_pool().unwrap();
        let extension = pool.get_extension_by_name("buf.validate.field").unwrap();
        let options = self.field.options();
        let Value::Message(rules) = options.get_extension(&extension).into_owned() else {
            panic!("{}: no rules", self.describe());
        };
        let get = |path: &[&str]| -> Option<u64> {
            let mut message: DynamicMessage = rules.clone();
            let (last, parents) = path.split_last().unwrap();
            for name in parents {
                if !message.has_field_by_name(name) {
                    return None;
                }
                message = match message.get_field_by_name(name)?.into_owned() {
                    Value::Message(inner) => inner,
                    _ => return None,
                };
            }
            message
                .has_field_by_name(last)
                .then(|| message.get_field_by_name(last)?.as_u64())
                .flatten()
        };
        let length = |prefix: &[&str]| {
            let at = |kind: &str, name: &str| {
                let mut path = prefix.to_vec();
                path.extend([kind, name]);
                get(&path)
            };
            at("string", "max_len")
                .or_else(|| at("string", "max_bytes"))
                .or_else(|| at("bytes", "max_len"))
        };
        let bound = match (self.part, self.field.is_map(), self.field.is_list()) {
            (Part::Count, true, _) => get(&["map", "max_pairs"]),
            (Part::Count, _, true) => get(&["repeated", "max_items"]),
            (Part::Key, ..) => length(&["map", "keys"]),
            (Part::Value, true, _) => length(&["map", "values"]),
            (Part::Value, _, true) => length(&["repeated", "items"]),
            (Part::Value, ..) => length(&[]),
            (Part::Count, false, false) => None,
        };
        bound.unwrap_or_else(|| panic!("{}: no declared bound", self.describe()))
    }
}

/// Protobuf wire encoding, by hand: the worst messages are built straight into their bytes
/// (a `DynamicMessage` of 30 million elements would be the very cost under test).
mod wire {
    pub fn varint(mut value: u64, out: &mut Vec<u8>) {
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }

    pub fn len_field(number: u32, value: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(number) << 3 | 2, out);
        varint(value.len() as u64, out);
        out.extend_from_slice(value);
    }

    /// A map entry of `key` whose value (field 2) is `value` (length-delimited), or none.
    pub fn entry(key: &[u8], value: Option<&[u8]>) -> Vec<u8> {
        let mut entry = Vec::with_capacity(key.len() + value.map_or(0, <[u8]>::len) + 8);
        len_field(1, key, &mut entry);
        if let Some(value) = value {
            len_field(2, value, &mut entry);
        }
        entry
    }
}

/// Short distinct map keys: `k0`, `k1`, … in base 36.
fn key(index: u64) -> String {
    let mut digits = Vec::new();
    let mut rest = index;
    loop {
        digits.push(std::char::from_digit((rest % 36) as u32, 36).unwrap());
        rest /= 36;
        if rest == 0 {
            break;
        }
    }
    format!("k{}", digits.iter().rev().collect::<String>())
}

impl Target {
    /// The wire bytes of the field itself (its tag included), about `budget` bytes; `count`
    /// elements (or a value of `count` bytes) when given, else as many as fit.
    fn wire_leaf(&self, budget: usize, count: Option<u64>) -> Vec<u8> {
        let number = self.field.number();
        let mut out = Vec::with_capacity(budget + 64);
        match self.part {
            Part::Count if self.field.is_map() => {
                let mut index = 0;
                while count.map_or(out.len() + 24 < budget, |count| index < count) {
                    let entry = wire::entry(key(index).as_bytes(), None);
                    wire::len_field(number, &entry, &mut out);
                    index += 1;
                }
            }
            Part::Count => match value_kind(&self.field) {
                Kind::Message(_) => {
                    let items = count.unwrap_or((budget / 2) as u64);
                    for _ in 0..items {
                        wire::len_field(number, &[], &mut out);
                    }
                }
                Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => {
                    let items = count.unwrap_or(((budget - 8) / 8) as u64) as usize;
                    wire::len_field(number, &vec![0u8; items * 8], &mut out);
                }
                Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => {
                    let items = count.unwrap_or(((budget - 8) / 4) as u64) as usize;
                    wire::len_field(number, &vec![0u8; items * 4], &mut out);
                }
                _ => {
                    // Varints (enums: 1, the first value after UNSPECIFIED), packed.
                    let items = count.unwrap_or((budget - 8) as u64) as usize;
                    wire::len_field(number, &vec![1u8; items], &mut out);
                }
            },
            Part::Key => {
                let length = count.unwrap_or((budget - 16) as u64) as usize;
                let entry = wire::entry("k".repeat(length).as_bytes(), None);
                wire::len_field(number, &entry, &mut out);
            }
            Part::Value => {
                let length = count.unwrap_or((budget - 24) as u64) as usize;
                let value = match value_kind(&self.field) {
                    Kind::String => "x".repeat(length).into_bytes(),
                    _ => vec![0u8; length],
                };
                if self.field.is_map() {
                    let entry = wire::entry(b"k", Some(&value));
                    wire::len_field(number, &entry, &mut out);
                } else {
                    wire::len_field(number, &value, &mut out);
                }
            }
        }
        out
    }

    /// The whole request message: the leaf inside one of each parent.
    fn wire_message(&self, leaf: Vec<u8>) -> Vec<u8> {
        let mut inner = leaf;
        for Step(step) in self.parents.iter().rev() {
            let mut outer = Vec::with_capacity(inner.len() + 16);
            if step.is_map() {
                let entry = wire::entry(b"k", Some(&inner));
                wire::len_field(step.number(), &entry, &mut outer);
            } else {
                wire::len_field(step.number(), &inner, &mut outer);
            }
            inner = outer;
        }
        inner
    }

    /// The JSON of the field's member value, about `budget` bytes.
    fn json_leaf(&self, budget: usize) -> String {
        let mut out = String::with_capacity(budget + 64);
        match self.part {
            Part::Count if self.field.is_map() => {
                let empty = match value_kind(&self.field) {
                    Kind::Message(_) => "{}",
                    Kind::String | Kind::Bytes => "\"\"",
                    _ => "0",
                };
                out.push('{');
                let mut index = 0;
                while out.len() + 24 < budget {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(&format!("\"{}\":{empty}", key(index)));
                    index += 1;
                }
                out.push('}');
            }
            Part::Count => {
                let item = match value_kind(&self.field) {
                    Kind::Message(_) => "{}",
                    _ => "1",
                };
                let items = (budget - 8) / (item.len() + 1);
                out.push('[');
                out.push_str(&vec![item; items].join(","));
                out.push(']');
            }
            Part::Key => {
                out.push_str(&format!("{{\"{}\":{}}}", "k".repeat(budget - 16), {
                    match value_kind(&self.field) {
                        Kind::Message(_) => "{}",
                        Kind::String | Kind::Bytes => "\"\"",
                        _ => "0",
                    }
                }));
            }
            Part::Value => {
                let text = match value_kind(&self.field) {
                    Kind::String => "x".repeat(budget - 24),
                    // "AAAA" is the base64 of three zero bytes.
                    _ => "AAAA".repeat((budget - 24) / 4),
                };
                if self.field.is_map() {
                    out.push_str(&format!("{{\"k\":\"{text}\"}}"));
                } else {
                    out.push_str(&format!("\"{text}\""));
                }
            }
        }
        out
    }

    fn json_body(&self, leaf: String) -> String {
        let mut inner = format!("{{\"{}\":{leaf}}}", self.field.json_name());
        for Step(step) in self.parents.iter().rev() {
            inner = if step.is_map() {
                format!("{{\"{}\":{{\"k\":{inner}}}}}", step.json_name())
            } else if step.is_list() {
                format!("{{\"{}\":[{inner}]}}", step.json_name())
            } else {
                format!("{{\"{}\":{inner}}}", step.json_name())
            };
        }
        inner
    }
}

/// The method's HTTP route when its body is the whole message (`body: "*"`), without path
/// variables: where its JSON goes.
fn json_route(method: &MethodDescriptor) -> Option<String> {
    let pool = descriptor_pool().unwrap();
    let extension = pool.get_extension_by_name("google.api.http")?;
    let options = method.options();
    let Value::Message(rule) = options.get_extension(&extension).into_owned() else {
        return None;
    };
    let body = rule.get_field_by_name("body")?.as_str()?.to_owned();
    let post = rule.get_field_by_name("post")?.as_str()?.to_owned();
    (body == "*" && !post.is_empty() && !post.contains('{')).then_some(post)
}

/// Characters of a path or query value the URL cases send: past every bound of an id or a
/// token with its slack, within the id-only calls' 4 KiB body limit (a longer value makes a
/// message over it, refused `REQUEST_TOO_LARGE` before it is read at all).
const URL_VALUE_CHARS: usize = 1024;

/// The door's URL for `target` when its method reads the field from the path or the query
/// (no body: Get, List, Delete, Watch, Download), with the field's value
/// [`URL_VALUE_CHARS`] long; the HTTP method with it.
fn url_request(target: &Target) -> Option<(reqwest::Method, String)> {
    if !target.parents.is_empty() || target.part != Part::Value {
        return None;
    }
    let pool = descriptor_pool().unwrap();
    let extension = pool.get_extension_by_name("google.api.http")?;
    let options = target.method.options();
    let Value::Message(rule) = options.get_extension(&extension).into_owned() else {
        return None;
    };
    let text = |name: &str| {
        rule.get_field_by_name(name)
            .and_then(|value| value.as_str().map(str::to_owned))
            .filter(|text| !text.is_empty())
    };
    let (method, pattern) = match (text("get"), text("delete")) {
        (Some(get), _) => (reqwest::Method::GET, get),
        (None, Some(delete)) => (reqwest::Method::DELETE, delete),
        (None, None) => return None,
    };
    let value = "x".repeat(URL_VALUE_CHARS);
    let variable = format!("{{{}}}", target.field.name());
    let url = if pattern.contains(&variable) {
        pattern.replace(&variable, &value)
    } else if !pattern.contains('{') {
        format!("{pattern}?{}={value}", target.field.name())
    } else {
        return None;
    };
    Some((method, url))
}

fn grpc_path(method: &MethodDescriptor) -> String {
    format!("/{}/{}", method.parent_service().full_name(), method.name())
}

/// Calls `method` with `message` over gRPC; answers the refusal's code and violated fields.
/// RESOURCE_EXHAUSTED, UNAVAILABLE and a broken transport (UNKNOWN) are sent again after the
/// buffers' retry delay, a bounded number of times, as for the door (`json_call`).
async fn grpc_call(
    channel: &tonic::transport::Channel,
    method: &MethodDescriptor,
    message: Vec<u8>,
) -> (Code, Vec<String>) {
    for _ in 1..TRANSIENT_ATTEMPTS {
        let (code, fields) = grpc_call_once(channel, method, message.clone()).await;
        match code {
            Code::ResourceExhausted | Code::Unavailable | Code::Unknown => {
                tokio::time::sleep(TRANSIENT_RETRY_DELAY).await
            }
            _ => return (code, fields),
        }
    }
    grpc_call_once(channel, method, message).await
}

async fn grpc_call_once(
    channel: &tonic::transport::Channel,
    method: &MethodDescriptor,
    message: Vec<u8>,
) -> (Code, Vec<String>) {
    let mut client = tonic::client::Grpc::new(channel.clone())
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(usize::MAX);
    client.ready().await.unwrap();
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "idempotency-key",
        crate::helpers::unique_key().parse().unwrap(),
    );
    let path = grpc_path(method).parse().unwrap();
    let status = if method.is_server_streaming() {
        match tokio::time::timeout(CALL_LIMIT, client.server_streaming(request, path, RawCodec))
            .await
            .expect("the call is answered")
        {
            Ok(_) => tonic::Status::ok(""),
            Err(status) => status,
        }
    } else {
        match tokio::time::timeout(CALL_LIMIT, client.unary(request, path, RawCodec))
            .await
            .expect("the call is answered")
        {
            Ok(_) => tonic::Status::ok(""),
            Err(status) => status,
        }
    };
    (status.code(), crate::helpers::violated_fields(&status))
}

/// Posts `body` to the door at `route`; answers the HTTP status and the problem's fields.
///
/// A send that breaks while the body is still being written (the server answered and closed
/// before reading it all: a body that found the request buffers still held by the previous
/// call's 64 MiB, refused after `REQUEST_BUFFER_WAIT`, seen at load 13 beside two busy
/// loops) and a 429 or 503 are what a client retries; they are sent again, a bounded number
/// of times, after the buffers' retry delay. Any other answer is returned as it is.
async fn json_call(
    client: &reqwest::Client,
    server: &ServerProcess,
    route: &str,
    body: String,
) -> (u16, String) {
    for _ in 1..TRANSIENT_ATTEMPTS {
        match json_call_once(client, server, route, body.clone()).await {
            Ok((429 | 503, _)) | Err(_) => tokio::time::sleep(TRANSIENT_RETRY_DELAY).await,
            Ok(answer) => return answer,
        }
    }
    json_call_once(client, server, route, body).await.unwrap()
}

async fn json_call_once(
    client: &reqwest::Client,
    server: &ServerProcess,
    route: &str,
    body: String,
) -> Result<(u16, String), reqwest::Error> {
    let answer = tokio::time::timeout(
        CALL_LIMIT,
        client
            .post(format!("http://{}{route}", server.address))
            .header("content-type", "application/json")
            .header("idempotency-key", crate::helpers::unique_key())
            .body(body)
            .send(),
    )
    .await
    .expect("the call is answered")?;
    let status = answer.status().as_u16();
    Ok((status, answer.text().await?))
}

/// The field paths an RFC 9457 problem of the door names.
fn problem_fields(problem: &str) -> Vec<String> {
    let problem: serde_json::Value = serde_json::from_str(problem).unwrap();
    problem["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|error| error["field"].as_str().map(str::to_owned))
        .collect()
}

/// Resets the server's peak RSS to its RSS now (Linux's `clear_refs` 5); answers it.
fn reset_peak(server: &ServerProcess) -> u64 {
    std::fs::write(format!("/proc/{}/clear_refs", server.pid()), "5").unwrap();
    server.rss_bytes()
}

/// A refusal names the field (or an element of it); past a bound by one, the domain's check
/// may name the message holding it instead (`output.at` for `output.at.marker`).
fn assert_named(target: &Target, fields: &[String], what: &str) {
    let path = target.field_path();
    let named = fields.iter().any(|field| {
        field == &path
            || field.starts_with(&format!("{path}["))
            || (what == "bound+1" && path.starts_with(&format!("{field}.")))
    });
    assert!(named, "{what} {}: fields {fields:?}", target.describe());
}

fn assert_memory(target: &Target, server: &ServerProcess, before: u64, body: usize, what: &str) {
    let growth = server.peak_rss_bytes().saturating_sub(before);
    let most = 2 * body as u64 + RSS_ALLOWANCE_BYTES;
    eprintln!(
        "{what} {}: body {} KiB, server peak RSS +{} KiB",
        target.describe(),
        body / 1024,
        growth / 1024
    );
    assert!(
        growth <= most,
        "{what} {}: the server grew by {growth} bytes for a body of {body} (at most {most})",
        target.describe()
    );
}

/// Runs every target of the methods whose full name starts with `service`.
async fn every_field_of(service: &str) {
    let server = ServerProcess::start(&[]);
    let channel = server.channel().await;
    let http = reqwest::Client::new();
    let targets: Vec<Target> = targets()
        .into_iter()
        .filter(|target| target.method.full_name().starts_with(service))
        .collect();
    assert!(targets.len() >= 4, "{service}: {} targets", targets.len());
    for target in &targets {
        let limit = method_body_limit(&grpc_path(&target.method))
            .unwrap_or_else(|| panic!("{}: no body limit", target.describe()));
        let overhead = 16 * (target.parents.len() + 2);

        // At the body limit, over gRPC.
        let message = target.wire_message(target.wire_leaf(limit - overhead, None));
        assert!(message.len() <= limit, "{}", target.describe());
        let body = message.len();
        let before = reset_peak(&server);
        let (code, fields) = grpc_call(&channel, &target.method, message).await;
        assert_eq!(code, Code::InvalidArgument, "gRPC {}", target.describe());
        assert_named(target, &fields, "gRPC");
        assert_memory(target, &server, before, body, "gRPC");

        // At the door's limit, as JSON.
        if let Some(route) = json_route(&target.method) {
            let json_limit = json_body_limit(limit);
            let json = target.json_body(target.json_leaf(json_limit - overhead * 2));
            assert!(json.len() <= json_limit, "{}", target.describe());
            let body = json.len();
            let before = reset_peak(&server);
            let (status, problem) = json_call(&http, &server, &route, json).await;
            assert!(
                (400..500).contains(&status) && status != 429,
                "JSON {}: {status} {problem}",
                target.describe()
            );
            let fields = problem_fields(&problem);
            assert_named(target, &fields, "JSON");
            assert_memory(target, &server, before, body, "JSON");
        }

        // Far past its bound, in the door's URL (the methods without a body).
        if let Some((method, url)) = url_request(target) {
            let answer = tokio::time::timeout(
                CALL_LIMIT,
                http.request(method, format!("http://{}{url}", server.address))
                    .send(),
            )
            .await
            .expect("the call is answered")
            .unwrap();
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap();
            assert!(
                (400..500).contains(&status) && status != 429,
                "URL {}: {status} {text}",
                target.describe()
            );
            let fields = problem_fields(&text);
            assert_named(target, &fields, "URL");
        }

        // One past its declared bound, over gRPC (when that fits the method's limit).
        let bound = target.bound();
        let over = bound + 1;
        if (over as usize) + overhead < limit {
            let message = target.wire_message(target.wire_leaf(limit, Some(over)));
            let (code, fields) = grpc_call(&channel, &target.method, message).await;
            assert_eq!(code, Code::InvalidArgument, "bound+1 {}", target.describe());
            assert_named(target, &fields, "bound+1");
        }
    }
    assert!(server.stop().await, "the server stopped cleanly");
}

#[tokio::test]
async fn every_growing_field_of_every_template_service_request_is_refused_in_linear_memory() {
    every_field_of("lottie.render.v1.TemplateService").await;
}

#[tokio::test]
async fn every_growing_field_of_every_render_service_request_is_refused_in_linear_memory() {
    every_field_of("lottie.render.v1.RenderService").await;
}

/// Three 63 MiB raw template uploads through the door at once, from three addresses (with
/// three callers sending, each holds at most 64 MiB of the buffers: docs/security.md, Pools)
/// (issue 42, finding 8): each body
/// is shared into its message, encoded once with its prefix and freed, then copied once more
/// by tonic's decoder; the server's peak grows by at most twice what the four sent. Before,
/// the body was copied into the message, encoded, framed and decoded into owned fields:
/// 619 MB for four, 252 MiB sent.
#[tokio::test]
async fn three_raw_uploads_at_the_door_at_once_cost_at_most_twice_their_bytes() {
    let server = ServerProcess::start(&[]);
    const UPLOAD_BYTES: usize = 63 << 20;
    let before = reset_peak(&server);
    let uploads = (0..3u8).map(|index| {
        let address = std::net::IpAddr::from([127, 0, 0, 2 + index]);
        let http = reqwest::Client::builder()
            .local_address(address)
            .build()
            .unwrap();
        let url = format!("http://{}/v1/templates?name=big{index}", server.address);
        async move {
            let answer = tokio::time::timeout(
                CALL_LIMIT,
                http.post(url)
                    .header("idempotency-key", crate::helpers::unique_key())
                    .body(vec![b' '; UPLOAD_BYTES])
                    .send(),
            )
            .await
            .expect("the upload is answered")
            .unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    });
    for (status, problem) in futures_util::future::join_all(uploads).await {
        // Over the template size limit: refused once decoded, naming the file.
        assert!((400..500).contains(&status), "{status} {problem}");
        assert!(problem.contains("TEMPLATE_TOO_LARGE"), "{problem}");
    }
    let growth = server.peak_rss_bytes().saturating_sub(before);
    let sent = 3 * UPLOAD_BYTES as u64;
    eprintln!(
        "three raw uploads: {} MiB sent, server peak RSS +{} MiB",
        sent >> 20,
        growth >> 20
    );
    assert!(
        growth <= 2 * sent + RSS_ALLOWANCE_BYTES,
        "the server grew by {growth} bytes for {sent} sent"
    );
    assert!(server.stop().await);
}
