//! A door request's path and query, read into what the body layer needs to write its
//! message ([`crate::grpc::json::DoorRequest`]), as google.api.http says a request message is
//! built: from the body (the whole message, for `body: "*"` routes), the path's variables,
//! and, for routes without a body, the query (`?page_size=10&page_token=…`, each parameter a
//! scalar field by its proto or JSON name). The JSON itself is converted by
//! [`crate::grpc::json`], in the canonical mapping.
//!
//! A method with a raw upload ([`crate::grpc::methods::Method::raw_upload`]: CreateTemplate,
//! `POST /v1/templates?name=…` with the Lottie file as the body) takes its name and the
//! animation of a dotLottie from the query beside its body; given a name, its body is the
//! file.

use super::routes::Route;
use crate::error::{FieldViolation, ServiceError};
use crate::grpc::json::{BodyForm, DoorRequest};
use crate::reason::Reason;
use prost_reflect::{FieldDescriptor, Kind, Value};

/// The query parameter of a raw upload that names it: given, the body is the file.
const RAW_UPLOAD_NAME_PARAMETER: &str = "name";
/// The query parameter of a raw upload (or its JSON) that picks a dotLottie's animation.
const RAW_UPLOAD_ANIMATION_PARAMETER: &str = "animation_id";
/// Query parameters one request may carry: the contract's requests have at most two
/// scalar fields a query sets; more is not a request of ours, and each costs a lookup.
pub const MAX_QUERY_PARAMETERS: usize = 16;

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

/// What a call to `route` with these path fields and `query` says of its message before
/// its body is in.
pub(crate) fn door_request(
    route: &Route,
    path_fields: Vec<(String, String)>,
    query: Option<&str>,
) -> Result<DoorRequest, ServiceError> {
    let input = route.method.input();
    let mut fields = Vec::new();
    for (name, value) in path_fields {
        let field = input
            .get_field_by_name(&name)
            .ok_or_else(|| invalid(&name, "no such field"))?;
        fields.push((field, Value::String(value)));
    }
    let mut form = BodyForm::Json;
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
    let raw_upload = route
        .rpc
        .raw_upload()
        .and_then(|file| input.get_field_by_name(file));
    for (name, value) in pairs {
        if let Some(file) = &raw_upload {
            let named = name == RAW_UPLOAD_NAME_PARAMETER;
            if named || name == RAW_UPLOAD_ANIMATION_PARAMETER {
                if named {
                    form = BodyForm::File(file.clone());
                }
                let field = input
                    .get_field_by_name(&name)
                    .ok_or_else(|| unknown_field(&name))?;
                fields.push((field, Value::String(value)));
                continue;
            }
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
        let parsed = scalar(&field, &value)
            .ok_or_else(|| invalid(&name, format!("not a valid {:?}: {value:?}", field.kind())))?;
        fields.push((field, parsed));
    }
    Ok(DoorRequest { form, fields })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::json::to_json;
    use crate::http_json::routes::{Found, Routes};
    use prost::Message;
    use prost_reflect::MessageDescriptor;

    /// A door request's head: its method's request message and what the path and query say.
    struct Head {
        input: MessageDescriptor,
        request: DoorRequest,
    }

    /// The encoded message `head` makes of `body`, without its gRPC prefix.
    fn message_of(head: &Head, body: &[u8]) -> Result<Vec<u8>, ServiceError> {
        head.request
            .framed_message(&head.input, bytes::Bytes::copy_from_slice(body))
            .map(|framed| framed[5..].to_vec())
    }

    fn head(verb: http::Method, path: &str, query: Option<&str>) -> Result<Head, ServiceError> {
        let routes = Routes::from_pool(crate::grpc::proto::descriptor_pool().unwrap()).unwrap();
        let Found::Route(route, fields) = routes.find(&verb, path) else {
            panic!("no route {path}");
        };
        Ok(Head {
            input: route.method.input(),
            request: door_request(route, fields, query)?,
        })
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
        // Its dotLottie animation in the query too, beside the file or beside JSON; only the
        // method with a raw upload takes them, other body routes none.
        let raw = head(
            http::Method::POST,
            "/v1/templates",
            Some("animation_id=a2&name=intro"),
        )
        .unwrap();
        let request = crate::grpc::proto::CreateTemplateRequest::decode(
            message_of(&raw, b"PK").unwrap().as_slice(),
        )
        .unwrap();
        assert_eq!(
            (request.name.as_str(), request.animation_id.as_str()),
            ("intro", "a2")
        );
        assert_eq!(request.lottie_json, &b"PK"[..]);
        let json = head(http::Method::POST, "/v1/templates", Some("animation_id=a2")).unwrap();
        let request = crate::grpc::proto::CreateTemplateRequest::decode(
            message_of(&json, br#"{"name":"x","animationId":"a1"}"#)
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        assert_eq!(
            (request.name.as_str(), request.animation_id.as_str()),
            ("x", "a2")
        );
        assert!(request.lottie_json.is_empty());
        assert!(head(http::Method::POST, "/v1/renders", Some("name=x")).is_err());
    }
}
