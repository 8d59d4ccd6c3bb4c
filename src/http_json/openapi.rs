//! `GET /openapi.json`: an OpenAPI 3.1 document of the door, generated from the same
//! descriptors and routes the door serves, so it cannot describe another contract. Schemas
//! follow the proto3 canonical JSON mapping as the door reads and writes it: lowerCamelCase
//! names, 64-bit integers as strings (numbers accepted on input), enums by name, bytes as
//! base64, Timestamp as RFC 3339, Duration as `"1.5s"`; request messages refuse unknown
//! members (`additionalProperties: false`), as the door does.

use super::routes::{Route, Routes};
use crate::grpc::methods::{DoorAnswer, KeyRule};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// A hyphenated UUID, as every id of the contract is.
const UUID_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
/// The refusals every operation may answer, with the situation each stands for.
const REFUSALS: [(&str, &str); 13] = [
    ("400", "The body is not JSON."),
    ("401", "No known identity (with `--auth required`)."),
    ("404", "An unknown id (another tenant's is unknown), or no such route."),
    ("405", "The route does not have this method."),
    ("409", "The resource's state forbids it for now, or the same Idempotency-Key is still being handled (with Retry-After)."),
    ("411", "A body without Content-Length."),
    ("413", "A body above its method's limit."),
    ("415", "A body that is not application/json."),
    ("416", "A download range past the output's end."),
    ("422", "The request is understood and refused: every invalid field is in `errors`."),
    ("429", "A quota, rate, share or queue is full: retry after Retry-After seconds."),
    ("500", "A bug of ours."),
    ("503", "A passing fault (storage, draining, a body that did not arrive): retry after Retry-After seconds."),
];

/// The document, as JSON.
pub(crate) fn document(routes: &Routes) -> Value {
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut messages: BTreeMap<String, MessageDescriptor> = BTreeMap::new();
    for route in routes.all() {
        collect(&route.method.input(), &mut messages);
        collect(&route.method.output(), &mut messages);
        paths
            .entry(route.template())
            .or_default()
            .insert(route.verb.as_str().to_ascii_lowercase(), operation(route));
    }
    let mut schemas: Map<String, Value> = messages
        .values()
        .map(|message| (message.full_name().to_owned(), message_schema(message)))
        .collect();
    schemas.insert("Problem".into(), problem_schema());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "lottie-render",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Renders registered Lottie templates with typed modifications. \
                The same contract as the gRPC services lottie.render.v1.TemplateService and \
                RenderService, in their canonical JSON mapping.",
            "license": {"name": "AGPL-3.0-or-later", "identifier": "AGPL-3.0-or-later"},
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "headers": {
                "Retry-After": {
                    "description": "Seconds to wait before retrying (the gRPC answer's retry delay).",
                    "schema": {"type": "integer", "minimum": 0},
                },
            },
        },
        "security": [{}, {"bearer": []}],
    })
}

/// One route's operation.
fn operation(route: &Route) -> Value {
    let input = route.method.input();
    let mut parameters: Vec<Value> = route
        .path_fields()
        .map(|field| {
            // Every id of the contract is a hyphenated UUID.
            json!({"name": field, "in": "path", "required": true,
                   "schema": {"type": "string", "format": "uuid", "pattern": UUID_PATTERN}})
        })
        .collect();
    if !route.has_body {
        let in_path: Vec<&str> = route.path_fields().collect();
        for field in input.fields() {
            if in_path.contains(&field.name()) || field.is_list() || field.is_map() {
                continue;
            }
            if matches!(field.kind(), Kind::Message(_) | Kind::Bytes) {
                continue;
            }
            parameters.push(json!({
                "name": field.json_name(), "in": "query", "required": false,
                "schema": field_schema(&field, true),
            }));
        }
    }
    if route.rpc.raw_upload().is_some() {
        parameters.push(json!({
            "name": "name", "in": "query", "required": false,
            "description": "With it, the body is the Lottie file itself (its name is this).",
            "schema": {"type": "string"},
        }));
    }
    let key = route.rpc.key();
    if key != KeyRule::Ignored {
        parameters.push(json!({
            "name": "Idempotency-Key", "in": "header",
            "required": key == KeyRule::Required,
            "description": "1..=255 visible ASCII characters; a retry with the same key answers the first call's answer.",
            "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"},
        }));
    }
    let mut operation = json!({
        "operationId": route.method.name(),
        "parameters": parameters,
        "responses": responses(route),
    });
    if route.has_body {
        operation["requestBody"] = json!({
            "required": false,
            "content": {"application/json": {"schema": reference(&input)}},
        });
    }
    operation
}

fn responses(route: &Route) -> Value {
    let output = route.method.output();
    let mut responses = Map::new();
    let door = route.rpc.door().unwrap_or(DoorAnswer::Json);
    let (status, content) = match door {
        DoorAnswer::File => {
            let file = json!({"*/*": {"schema": {"type": "string", "contentMediaType": "application/octet-stream"}}});
            responses.insert(
                "206".into(),
                json!({"description": "The range asked for (Range: bytes=A-B).", "content": file}),
            );
            (http::StatusCode::OK, file)
        }
        DoorAnswer::Events => {
            let events = json!({"text/event-stream": {"schema": {"type": "string",
                "description": "Events `job` (data: the job as JSON) until a terminal state, or one `error` (data: a problem)."}}});
            (http::StatusCode::OK, events)
        }
        DoorAnswer::Json | DoorAnswer::Created { .. } => {
            let status = match door {
                DoorAnswer::Created { status, .. } => status,
                _ => http::StatusCode::OK,
            };
            let message = json!({"application/json": {"schema": reference(&output)}});
            (status, message)
        }
    };
    responses.insert(
        status.as_str().into(),
        json!({"description": "The answer.", "content": content}),
    );
    for (status, description) in REFUSALS {
        let mut refusal = json!({
            "description": description,
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
        });
        if matches!(status, "409" | "429" | "503") {
            refusal["headers"] =
                json!({"Retry-After": {"$ref": "#/components/headers/Retry-After"}});
        }
        responses.insert(status.into(), refusal);
    }
    Value::Object(responses)
}

/// Every message `message` reaches (itself included), well-known types left out.
fn collect(message: &MessageDescriptor, into: &mut BTreeMap<String, MessageDescriptor>) {
    if well_known(message).is_some() || into.contains_key(message.full_name()) {
        return;
    }
    into.insert(message.full_name().to_owned(), message.clone());
    for field in message.fields() {
        if let Kind::Message(inner) = field.kind() {
            if inner.is_map_entry() {
                if let Kind::Message(value) = inner.map_entry_value_field().kind() {
                    collect(&value, into);
                }
            } else {
                collect(&inner, into);
            }
        }
    }
}

/// The schema of a well-known type, by its canonical mapping.
fn well_known(message: &MessageDescriptor) -> Option<Value> {
    Some(match message.full_name() {
        "google.protobuf.Timestamp" => json!({"type": "string", "format": "date-time"}),
        "google.protobuf.Duration" => {
            json!({"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]{1,9})?s$"})
        }
        "google.protobuf.Empty" => json!({"type": "object", "additionalProperties": false}),
        _ => return None,
    })
}

fn reference(message: &MessageDescriptor) -> Value {
    well_known(message)
        .unwrap_or_else(|| json!({"$ref": format!("#/components/schemas/{}", message.full_name())}))
}

fn message_schema(message: &MessageDescriptor) -> Value {
    let properties: Map<String, Value> = message
        .fields()
        .map(|field| (field.json_name().to_owned(), field_schema(&field, false)))
        .collect();
    json!({"type": "object", "properties": properties, "additionalProperties": false})
}

/// A field's schema: its value's, in an array or an object for repeated and map fields.
/// `scalar_only` (query parameters) gives the value's schema alone.
fn field_schema(field: &FieldDescriptor, scalar_only: bool) -> Value {
    if field.is_map() && !scalar_only {
        if let Kind::Message(entry) = field.kind() {
            let value = value_schema(&entry.map_entry_value_field().kind());
            return json!({"type": "object", "additionalProperties": value});
        }
    }
    let value = value_schema(&field.kind());
    if field.is_list() && !scalar_only {
        return json!({"type": "array", "items": value});
    }
    value
}

fn value_schema(kind: &Kind) -> Value {
    match kind {
        Kind::String => json!({"type": "string"}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            json!({"type": "integer", "format": "int32"})
        }
        Kind::Uint32 | Kind::Fixed32 => {
            json!({"type": "integer", "minimum": 0, "maximum": u32::MAX})
        }
        // Written as strings; numbers are read too.
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            json!({"type": ["string", "integer"], "pattern": "^-?[0-9]+$"})
        }
        Kind::Uint64 | Kind::Fixed64 => {
            json!({"type": ["string", "integer"], "pattern": "^[0-9]+$", "minimum": 0})
        }
        Kind::Double | Kind::Float => json!({"type": "number"}),
        Kind::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
        Kind::Enum(descriptor) => {
            let names: Vec<String> = descriptor
                .values()
                .map(|value| value.name().to_owned())
                .collect();
            json!({"type": "string", "enum": names})
        }
        Kind::Message(message) => reference(message),
    }
}

fn problem_schema() -> Value {
    json!({
        "type": "object",
        "description": "RFC 9457 problem details, with the service's reason.",
        "required": ["type", "title", "status", "detail", "code", "retryable"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"type": "string", "description": "The gRPC code of the same refusal."},
            "reason": {"type": "string", "description": "The stable reason (ErrorInfo.reason), e.g. SLOT_UNKNOWN."},
            "retryable": {"type": "boolean"},
            "retryAfterSeconds": {"type": "integer", "minimum": 0},
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["field", "detail"],
                    "properties": {"field": {"type": "string"}, "detail": {"type": "string"}},
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_names_every_route_and_every_schema_it_refers_to() {
        let routes = Routes::from_pool(crate::grpc::proto::descriptor_pool().unwrap()).unwrap();
        let document = document(&routes);
        let paths = document["paths"].as_object().unwrap();
        for route in routes.all() {
            let verb = route.verb.as_str().to_ascii_lowercase();
            assert!(
                paths[&route.template()].get(&verb).is_some(),
                "{verb} {}",
                route.template()
            );
        }
        let text = document.to_string();
        let schemas = document["components"]["schemas"].as_object().unwrap();
        for reference in text.split("\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap();
            assert!(
                schemas.contains_key(name),
                "{name} is referred to but not defined"
            );
        }
        let job = &schemas["lottie.render.v1.RenderJob"]["properties"];
        assert!(job.get("jobId").is_some(), "{job}");
    }
}
