//! JSON to protobuf and back, by the proto3 canonical JSON mapping (what grpcurl sends and
//! prints), through `prost-reflect`'s serde support over the contract's descriptors: the
//! JSON is the very same messages, so there is one contract.
//!
//! A request message is built from three places, as google.api.http says: the body (the
//! whole message, for `body: "*"` routes), the path's variables, and, for routes without a
//! body, the query (`?page_size=10&page_token=…`, each parameter a scalar field by its
//! proto or JSON name).

use super::routes::Route;
use crate::error::{FieldViolation, ServiceError};
use crate::reason::Reason;
use prost::Message;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, SerializeOptions,
    Value,
};

/// The CreateTemplate of a raw Lottie upload (`POST /v1/templates?name=…` with the Lottie
/// file as the body): the query parameter that names it and the field the file fills.
pub(crate) const RAW_TEMPLATE_METHOD: &str = "/lottie.render.v1.TemplateService/CreateTemplate";
const RAW_TEMPLATE_NAME_PARAMETER: &str = "name";
const RAW_TEMPLATE_FILE_FIELD: &str = "lottie_json";
/// The query parameter of a raw upload that picks a dotLottie's animation.
const RAW_TEMPLATE_ANIMATION_PARAMETER: &str = "animation_id";
/// A gRPC message's prefix: a compression flag byte and a big-endian u32 length.
const GRPC_PREFIX_BYTES: usize = 5;
/// Query parameters one request may carry: the contract's requests have at most two
/// scalar fields a query sets; more is not a request of ours, and each costs a lookup.
pub const MAX_QUERY_PARAMETERS: usize = 16;

/// What the request's head says of its message: the path's fields, the query's, and
/// whether the body is a raw Lottie file.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub input: MessageDescriptor,
    /// Fields set from the path and the query, already checked against their types.
    pub fields: Vec<(FieldDescriptor, Value)>,
    /// The body is the file of a raw Lottie upload, named this.
    pub raw_template_name: Option<String>,
    /// The raw upload's `animation_id` (a dotLottie's animation to register).
    pub raw_template_animation: Option<String>,
}

/// A field violation of the request (INVALID_ARGUMENT, REQUEST_INVALID).
fn invalid(field: impl Into<String>, description: impl Into<String>) -> ServiceError {
    let description = description.into();
    ServiceError::invalid_argument(
        Reason::RequestInvalid,
        description.clone(),
        vec![FieldViolation {
            field: field.into(),
            description,
        }],
    )
}

impl Head {
    /// The head of a call to `route` with these path fields and `query`.
    pub(crate) fn of(
        route: &Route,
        path_fields: Vec<(String, String)>,
        query: Option<&str>,
    ) -> Result<Head, ServiceError> {
        let input = route.method.input();
        let mut fields = Vec::new();
        for (name, value) in path_fields {
            let field = input
                .get_field_by_name(&name)
                .ok_or_else(|| invalid(&name, "no such field"))?;
            fields.push((field, Value::String(value)));
        }
        let mut raw_template_name = None;
        let mut raw_template_animation = None;
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .take(MAX_QUERY_PARAMETERS + 1)
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        if pairs.len() > MAX_QUERY_PARAMETERS {
            return Err(invalid(
                "(query)",
                format!("more than {MAX_QUERY_PARAMETERS} query parameters"),
            ));
        }
        for (name, value) in pairs {
            if route.grpc_path == RAW_TEMPLATE_METHOD && name == RAW_TEMPLATE_NAME_PARAMETER {
                raw_template_name = Some(value);
                continue;
            }
            if route.grpc_path == RAW_TEMPLATE_METHOD && name == RAW_TEMPLATE_ANIMATION_PARAMETER {
                raw_template_animation = Some(value);
                continue;
            }
            if route.has_body {
                return Err(invalid(
                    &name,
                    "this route takes its request in the body, not the query",
                ));
            }
            let field = input
                .get_field_by_name(&name)
                .or_else(|| input.get_field_by_json_name(&name))
                .ok_or_else(|| unknown_field(&name))?;
            let parsed = scalar(&field, &value).ok_or_else(|| {
                invalid(&name, format!("not a valid {:?}: {value:?}", field.kind()))
            })?;
            fields.push((field, parsed));
        }
        Ok(Head {
            input,
            fields,
            raw_template_name,
            raw_template_animation,
        })
    }

    /// The request message, encoded and framed as one gRPC message: `body` (JSON, or the
    /// raw Lottie file) with the head's fields set over it. A raw file is shared into the
    /// message, not copied; the encoding is written once, with its prefix.
    pub(crate) fn framed_message(&self, body: bytes::Bytes) -> Result<bytes::Bytes, ServiceError> {
        let mut message = match &self.raw_template_name {
            Some(name) => {
                let mut message = DynamicMessage::new(self.input.clone());
                message.set_field_by_name(RAW_TEMPLATE_NAME_PARAMETER, Value::String(name.clone()));
                message.set_field_by_name(RAW_TEMPLATE_FILE_FIELD, Value::Bytes(body));
                message
            }
            None if body.iter().all(u8::is_ascii_whitespace) => {
                DynamicMessage::new(self.input.clone())
            }
            None => {
                let message = from_json(&self.input, &body)?;
                // The body's bytes are in the message now: freed before it is encoded.
                drop(body);
                message
            }
        };
        // Beside a raw upload or a JSON body alike: never dropped silently.
        if let Some(animation) = &self.raw_template_animation {
            message.set_field_by_name(
                RAW_TEMPLATE_ANIMATION_PARAMETER,
                Value::String(animation.clone()),
            );
        }
        for (field, value) in &self.fields {
            message.set_field(field, value.clone());
        }
        let length = message.encoded_len();
        let prefix = u32::try_from(length).map_err(|_| {
            ServiceError::invalid_argument(
                Reason::RequestTooLarge,
                "the request message is larger than 4 GiB",
                Vec::new(),
            )
        })?;
        let mut framed = bytes::BytesMut::with_capacity(GRPC_PREFIX_BYTES + length);
        bytes::BufMut::put_u8(&mut framed, 0);
        bytes::BufMut::put_u32(&mut framed, prefix);
        message
            .encode(&mut framed)
            .map_err(ServiceError::internal)?;
        Ok(framed.freeze())
    }
}

fn unknown_field(name: &str) -> ServiceError {
    ServiceError::invalid_argument(
        Reason::UnknownFields,
        format!("the request has no field {name:?}"),
        vec![FieldViolation {
            field: name.into(),
            description: "unknown field".into(),
        }],
    )
}

/// A query parameter's value as the scalar `field` holds (`None`: not one).
fn scalar(field: &FieldDescriptor, value: &str) -> Option<Value> {
    if field.is_list() || field.is_map() {
        return None;
    }
    Some(match field.kind() {
        Kind::String => Value::String(value.to_owned()),
        Kind::Bool => Value::Bool(value.parse().ok()?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(value.parse().ok()?),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(value.parse().ok()?),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(value.parse().ok()?),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(value.parse().ok()?),
        Kind::Double => Value::F64(value.parse().ok()?),
        Kind::Float => Value::F32(value.parse().ok()?),
        Kind::Enum(kind) => Value::EnumNumber(kind.get_value_by_name(value)?.number()),
        Kind::Bytes | Kind::Message(_) => return None,
    })
}

/// `body` as a `descriptor` message by the canonical JSON mapping: BODY_NOT_JSON when it is
/// not JSON at all (HTTP 400), else a violation naming the JSON path of the first value
/// that is not what the contract says (HTTP 422).
pub fn from_json(
    descriptor: &MessageDescriptor,
    body: &[u8],
) -> Result<DynamicMessage, ServiceError> {
    // Bounds and duplicate members first: building the message builds every element.
    let schema = crate::grpc::bounds::Schema::contract()?;
    crate::grpc::bounds::json::check(schema, descriptor.full_name(), body)?;
    let mut json = serde_json::Deserializer::from_slice(body);
    let mut track = serde_path_to_error::Track::new();
    let tracked = serde_path_to_error::Deserializer::new(&mut json, &mut track);
    let parsed = DynamicMessage::deserialize_with_options(
        descriptor.clone(),
        tracked,
        &DeserializeOptions::new(),
    );
    let parsed = parsed.and_then(|message| json.end().map(|()| message));
    parsed.map_err(|error| {
        let path = track.path().to_string();
        let field = if path == "." {
            "(body)".to_owned()
        } else {
            path
        };
        match error.classify() {
            serde_json::error::Category::Data => {
                let description = error.to_string();
                // prost-reflect names an unknown member before the path reaches it.
                let unknown = description
                    .strip_prefix("unrecognized field name '")
                    .and_then(|rest| rest.split_once('\''))
                    .map(|(name, _)| name.to_owned());
                let (reason, field) = match unknown {
                    Some(name) if field == "(body)" => (Reason::UnknownFields, name),
                    Some(name) => (Reason::UnknownFields, format!("{field}.{name}")),
                    None => (Reason::RequestInvalid, field),
                };
                ServiceError::invalid_argument(
                    reason,
                    format!("{field}: {description}"),
                    vec![FieldViolation { field, description }],
                )
            }
            _ => ServiceError::invalid_argument(
                Reason::BodyNotJson,
                format!("the body is not JSON: {error}"),
                vec![FieldViolation {
                    field: "(body)".into(),
                    description: error.to_string(),
                }],
            ),
        }
    })
}

/// The message `bytes` (a `descriptor` message from our own handlers) as canonical JSON.
pub(crate) fn to_json(descriptor: &MessageDescriptor, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let message = DynamicMessage::decode(descriptor.clone(), bytes).map_err(|e| e.to_string())?;
    let mut json = Vec::new();
    let mut serializer = serde_json::Serializer::new(&mut json);
    message
        .serialize_with_options(&mut serializer, &SerializeOptions::new())
        .map_err(|e| e.to_string())?;
    Ok(json)
}

#[cfg(test)]
mod tests {
    /// The encoded message `head` makes of `body`, without its gRPC prefix.
    fn message_of(head: &Head, body: &[u8]) -> Result<Vec<u8>, ServiceError> {
        head.framed_message(bytes::Bytes::copy_from_slice(body))
            .map(|framed| framed[GRPC_PREFIX_BYTES..].to_vec())
    }

    use super::*;
    use crate::http_json::routes::{Found, Routes};

    fn head(verb: http::Method, path: &str, query: Option<&str>) -> Result<Head, ServiceError> {
        let routes = Routes::from_pool(crate::grpc::proto::descriptor_pool().unwrap()).unwrap();
        let Found::Route(route, fields) = routes.find(&verb, path) else {
            panic!("no route {path}");
        };
        Head::of(route, fields, query)
    }

    #[test]
    fn a_render_request_in_canonical_json_becomes_its_message_and_back() {
        let head = head(http::Method::POST, "/v1/renders", None).unwrap();
        let body = br#"{"templateId":"t","modifications":{"texts":{"title":"Hi"}},
            "output":{"format":"FORMAT_GIF","width":64,"height":64}}"#;
        let bytes = message_of(&head, body).unwrap();
        let request = crate::grpc::proto::RenderRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(request.template_id, "t");
        assert_eq!(request.modifications.unwrap().texts["title"], "Hi");
        let json = to_json(&head.input, &bytes).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(json["output"]["format"], "FORMAT_GIF");
        assert_eq!(json["templateId"], "t");
    }

    #[test]
    fn bodies_that_are_not_the_message_are_told_apart_from_bodies_that_are_not_json() {
        let head = head(http::Method::POST, "/v1/renders", None).unwrap();
        for (body, reason, field) in [
            (&b"{\"templateId\": "[..], Reason::BodyNotJson, "(body)"),
            (b"<xml/>", Reason::BodyNotJson, "(body)"),
            (b"{} {}", Reason::BodyNotJson, "(body)"),
            (
                br#"{"output":{"format":"FORMAT_PNGX"}}"#,
                Reason::RequestInvalid,
                "output.format",
            ),
            (
                br#"{"output":{"widht":3}}"#,
                Reason::UnknownFields,
                "output.widht",
            ),
            (br#"{"templateId":7}"#, Reason::RequestInvalid, "templateId"),
        ] {
            let error = message_of(&head, body).unwrap_err();
            assert_eq!(error.reason, reason, "{}", String::from_utf8_lossy(body));
            assert_eq!(error.violations[0].field, field, "{error:?}");
        }
        // An empty body is the empty message (a cancel has nothing to say).
        assert!(message_of(&head, b" ").unwrap().is_empty());
    }

    #[test]
    fn path_and_query_fields_are_typed_and_unknown_ones_refused() {
        let id = "0b9c6b2e-4f7e-4a53-9d3e-2f1d8e0c1a55";
        let listing = head(http::Method::GET, "/v1/templates", Some("pageSize=5")).unwrap();
        let bytes = message_of(&listing, b"").unwrap();
        let request = crate::grpc::proto::ListTemplatesRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(request.page_size, 5);
        let job = head(http::Method::GET, &format!("/v1/renders/{id}"), None).unwrap();
        let request = crate::grpc::proto::GetRenderJobRequest::decode(
            message_of(&job, b"").unwrap().as_slice(),
        )
        .unwrap();
        assert_eq!(request.job_id, id);
        for query in ["page_size=lots", "colour=red", "page_size=-1"] {
            assert!(
                head(http::Method::GET, "/v1/templates", Some(query)).is_err(),
                "{query}"
            );
        }
        // A raw Lottie upload: the body is the file, the name in the query.
        let raw = head(http::Method::POST, "/v1/templates", Some("name=intro")).unwrap();
        let request = crate::grpc::proto::CreateTemplateRequest::decode(
            message_of(&raw, b"{\"v\":\"5.7.0\"}").unwrap().as_slice(),
        )
        .unwrap();
        assert_eq!(request.name, "intro");
        assert_eq!(request.lottie_json, &b"{\"v\":\"5.7.0\"}"[..]);
    }
}
