//! Strict decoding, the protobuf counterpart of a JSON schema's `.strict()`: a body that does
//! not decode, or that carries fields the contract does not have (at any depth), is answered
//! INVALID_ARGUMENT naming them, before any handler runs. tonic's own codec answers INTERNAL
//! for an undecodable body (a retry storm waiting to happen) and prost drops unknown fields
//! silently (a typo in a field name would be ignored, not reported).
//!
//! Unknown fields, and fields over the contract's bounds, are found by a linear scan of the
//! bytes against the contract's descriptors ([`super::bounds::wire`]) before prost decodes
//! them: decoding builds every element, and an element costs far more decoded than sent.

use super::proto;
use crate::error::ServiceError;
use prost::bytes::Buf;
use prost::Message;
use std::marker::PhantomData;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

/// Messages the codec decodes, with their fully qualified protobuf name (`None` for
/// `google.protobuf.Empty`, which has no fields to check).
pub trait ContractMessage: Message + Default + Send + 'static {
    const FULL_NAME: Option<&'static str>;
}

impl ContractMessage for () {
    const FULL_NAME: Option<&'static str> = None;
}

macro_rules! contract_messages {
    ($($message:ident),* $(,)?) => {
        $(
            impl ContractMessage for proto::$message {
                const FULL_NAME: Option<&'static str> = Some(concat!("lottie.render.v1.", stringify!($message)));
            }
        )*
    };
}

// Every request and response of the two services (the generated code does not compile if
// one is missing).
contract_messages!(
    CreateTemplateRequest,
    Template,
    GetTemplateRequest,
    ListTemplatesRequest,
    ListTemplatesResponse,
    DeleteTemplateRequest,
    UploadImageRequest,
    Image,
    DeleteImageRequest,
    RenderRequest,
    RenderJob,
    GetRenderJobRequest,
    WatchRenderJobRequest,
    CancelRenderJobRequest,
    DownloadRenderOutputRequest,
    OutputChunk,
    ListRenderJobsRequest,
    ListRenderJobsResponse,
    GetServiceStatusRequest,
    ServiceStatus,
);

/// The codec of every generated service and client (`codec_path` in build.rs).
#[derive(Debug)]
pub(crate) struct StrictCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec(PhantomData)
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: ContractMessage,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(PhantomData)
    }
}

#[derive(Debug)]
pub(crate) struct StrictDecoder<U>(PhantomData<U>);

impl<U: ContractMessage> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // A slice of tonic's buffer, not a copy; prost's `Bytes` fields slice it in turn.
        let bytes = buf.copy_to_bytes(buf.remaining());
        decode_strictly::<U>(bytes).map(Some).map_err(Status::from)
    }
}

/// Decodes `bytes` as `U`, refusing undecodable bodies, unknown fields and fields over the
/// contract's bounds ([`super::bounds`]) from one linear scan before anything is built.
pub fn decode_strictly<U: ContractMessage>(
    bytes: impl Into<prost::bytes::Bytes>,
) -> Result<U, ServiceError> {
    let bytes: prost::bytes::Bytes = bytes.into();
    if let Some(name) = U::FULL_NAME {
        super::bounds::wire::check(super::bounds::Schema::contract()?, name, &bytes)?;
    }
    U::decode(bytes).map_err(|error| super::bounds::wire::undecodable(&error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ServiceErrorCode;
    use crate::reason::Reason;

    fn render_request() -> proto::RenderRequest {
        proto::RenderRequest {
            template_id: "0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11".into(),
            modifications: Some(proto::Modifications {
                texts: Default::default(),
                colors: [(
                    "bg".to_owned(),
                    proto::Color {
                        r: 1.0,
                        g: 0.0,
                        b: 0.0,
                        a: None,
                    },
                )]
                .into(),
                ..Default::default()
            }),
            output: Some(proto::OutputSpec {
                format: proto::Format::Gif as i32,
                ..Default::default()
            }),
            notify: None,
            theme: String::new(),
        }
    }

    /// Appends a varint field `number` = 1 to an encoded message.
    fn with_unknown_varint(mut bytes: Vec<u8>, number: u32) -> Vec<u8> {
        prost::encoding::encode_key(number, prost::encoding::WireType::Varint, &mut bytes);
        prost::encoding::encode_varint(1, &mut bytes);
        bytes
    }

    #[test]
    fn a_known_message_decodes() {
        let bytes = render_request().encode_to_vec();
        assert_eq!(
            decode_strictly::<proto::RenderRequest>(bytes.clone()).unwrap(),
            render_request()
        );
    }

    #[test]
    fn garbage_is_invalid_argument_not_internal() {
        for garbage in [&b"\xff\xff\xff\xff"[..], b"\x0a\x05ab", b"\x12\x80"] {
            let error = decode_strictly::<proto::RenderRequest>(garbage.to_vec()).unwrap_err();
            assert_eq!(
                (error.code, error.reason),
                (ServiceErrorCode::InvalidArgument, Reason::BodyUndecodable),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn thousands_of_unknown_fields_draw_a_bounded_answer_naming_the_first_few() {
        // Found by fuzzing (fuzz target `request`): every two-byte unknown field drew a
        // violation of about a hundred bytes.
        let mut bytes = render_request().encode_to_vec();
        for _ in 0..5000 {
            bytes = with_unknown_varint(bytes, 11);
        }
        let error = decode_strictly::<proto::RenderRequest>(bytes.clone()).unwrap_err();
        assert_eq!(error.reason, Reason::UnknownFields);
        assert_eq!(
            error.violations.len(),
            crate::grpc::bounds::MAX_UNKNOWN_FIELDS_REPORTED
        );
        assert!(
            error.message.ends_with(&format!(
                " and {} more",
                5000 - crate::grpc::bounds::MAX_UNKNOWN_FIELDS_REPORTED
            )),
            "{}",
            error.message
        );
        let answer_bytes = error.message.len()
            + error
                .violations
                .iter()
                .map(|v| v.field.len() + v.description.len())
                .sum::<usize>();
        assert!(answer_bytes < 4096, "{answer_bytes} bytes");
    }

    #[test]
    fn unknown_fields_are_named_at_any_depth() {
        let top = with_unknown_varint(render_request().encode_to_vec(), 99);
        let error = decode_strictly::<proto::RenderRequest>(top).unwrap_err();
        assert_eq!(error.reason, Reason::UnknownFields);
        assert_eq!(error.violations[0].field, "#99");

        let mut request = render_request();
        let color = with_unknown_varint(
            proto::Color {
                r: 1.0,
                g: 0.0,
                b: 0.0,
                a: None,
            }
            .encode_to_vec(),
            7,
        );
        request.modifications = None;
        let mut bytes = request.encode_to_vec();
        // modifications (field 2) { colors (field 2) { key "bg", value <color with #7> } }
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, &"bg".to_owned(), &mut entry);
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut entry);
        prost::encoding::encode_varint(color.len() as u64, &mut entry);
        entry.extend_from_slice(&color);
        let mut modifications = Vec::new();
        prost::encoding::encode_key(
            2,
            prost::encoding::WireType::LengthDelimited,
            &mut modifications,
        );
        prost::encoding::encode_varint(entry.len() as u64, &mut modifications);
        modifications.extend_from_slice(&entry);
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut bytes);
        prost::encoding::encode_varint(modifications.len() as u64, &mut bytes);
        bytes.extend_from_slice(&modifications);
        let error = decode_strictly::<proto::RenderRequest>(bytes.clone()).unwrap_err();
        assert_eq!(error.violations.len(), 1, "{:?}", error.violations);
        assert_eq!(error.violations[0].field, "modifications.colors[\"bg\"].#7");
    }
}
