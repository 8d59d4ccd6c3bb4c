//! The contract's messages in the proto3 canonical JSON mapping (what grpcurl sends and
//! prints), through `prost-reflect`'s serde support over the contract's descriptors: the
//! HTTP/JSON door's bodies become the very same messages, and answers become JSON, so there
//! is one contract.
//!
//! A door request's message is written by the body layer (`middleware::request_body`) once
//! its body is in, from data the door left in the request's extensions ([`DoorRequest`]:
//! the fields the path and query set, and the [`BodyForm`] of the body) and the method's
//! request message named in [`super::methods`]; an answer becomes JSON as the response
//! message named there. The door (`http_json::transcode`) reads the path and query; this
//! module only turns bytes into messages and back.

use crate::error::{FieldViolation, ServiceError};
use crate::reason::Reason;
use bytes::Bytes;
use prost::Message;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, FieldDescriptor, MessageDescriptor, SerializeOptions, Value,
};

/// A gRPC message's prefix: a compression flag byte and a big-endian u32 length.
const GRPC_PREFIX_BYTES: usize = 5;

/// How a door request's body stands for its message.
#[derive(Debug, Clone)]
pub(crate) enum BodyForm {
    /// The whole message in JSON (an empty or blank body: the empty message).
    Json,
    /// The bytes of this one field (a raw upload: the Lottie file itself).
    File(FieldDescriptor),
}

/// What the door knows of a request's message before its body is in: how the body stands
/// for it and the fields its path and query set over it (already checked against their
/// types). Data, which the body layer turns into the message with
/// [`DoorRequest::framed_message`].
#[derive(Debug, Clone)]
pub(crate) struct DoorRequest {
    pub form: BodyForm,
    pub fields: Vec<(FieldDescriptor, Value)>,
}

impl DoorRequest {
    /// The `input` message `body` stands for, with the head's fields set over it, encoded
    /// and framed as one gRPC message. A raw file is shared into the message, not copied;
    /// the encoding is written once, with its prefix.
    pub(crate) fn framed_message(
        &self,
        input: &MessageDescriptor,
        body: Bytes,
    ) -> Result<Bytes, ServiceError> {
        let mut message = match &self.form {
            BodyForm::File(field) => {
                let mut message = DynamicMessage::new(input.clone());
                message.set_field(field, Value::Bytes(body));
                message
            }
            BodyForm::Json if body.iter().all(u8::is_ascii_whitespace) => {
                DynamicMessage::new(input.clone())
            }
            BodyForm::Json => {
                let message = from_json(input, &body)?;
                // The body's bytes are in the message now: freed before it is encoded.
                drop(body);
                message
            }
        };
        for (field, value) in &self.fields {
            message.set_field(field, value.clone());
        }
        framed(&message)
    }
}

/// The contract's message `name` (a full name, as a row of [`super::methods`] names it).
pub(crate) fn message_named(name: &str) -> Result<MessageDescriptor, ServiceError> {
    let pool = super::proto::descriptor_pool().map_err(ServiceError::internal)?;
    pool.get_message_by_name(name)
        .ok_or_else(|| ServiceError::internal(format!("{name} is no message of the contract")))
}

/// `message` encoded with its gRPC prefix.
fn framed(message: &DynamicMessage) -> Result<Bytes, ServiceError> {
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

/// `body` as a `descriptor` message by the canonical JSON mapping: BODY_NOT_JSON when it is
/// not JSON at all (HTTP 400), else a violation naming the JSON path of the first value
/// that is not what the contract says (HTTP 422).
pub fn from_json(
    descriptor: &MessageDescriptor,
    body: &[u8],
) -> Result<DynamicMessage, ServiceError> {
    // Bounds and duplicate members first: building the message builds every element.
    let schema = super::bounds::Schema::contract()?;
    super::bounds::json::check(schema, descriptor.full_name(), body)?;
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
