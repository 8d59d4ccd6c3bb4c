//! The gRPC boundary. Generated code stays in [`proto`]; nothing outside this module touches
//! generated types. [`bounds`] holds requests to the bounds the contract declares, from a
//! scan before anything is built; [`codec`] decodes strictly (INVALID_ARGUMENT for
//! undecodable bodies, unknown fields and broken bounds); [`convert`] turns wire requests into domain types exactly once;
//! [`status`] is the single mapping from service errors to gRPC statuses; [`templates`]
//! serves TemplateService and [`renders`] RenderService, their lists in pages of one kind
//! ([`paging`]). [`methods`] is the table of every
//! RPC and what each layer of the stack needs to know of it; [`json`] is the contract's
//! messages in the canonical JSON mapping (the HTTP/JSON door's bodies and answers).

pub(crate) mod bounds;
pub mod codec;
pub mod convert;
pub mod json;
pub(crate) mod methods;
pub mod paging;
pub mod proto;
pub(crate) mod renders;
pub(crate) mod status;
pub mod templates;

use crate::error::ServiceError;
use crate::idempotency::claim::REPLAYED_HEADER;
use tonic::metadata::MetadataValue;
use tonic::{Response, Status};

/// The calling tenant and the id a by-id call names in `field` (INVALID_ARGUMENT when it is
/// not a UUID): the id is only ever looked for among the tenant's own.
pub(crate) fn tenant_and_id<T>(
    request: &tonic::Request<T>,
    field: &str,
    value: &str,
) -> Result<(crate::auth::TenantId, uuid::Uuid), ServiceError> {
    let tenant = crate::auth::Caller::of(request.extensions()).tenant;
    Ok((tenant, convert::parse_id(field, value)?))
}

/// The answer of a keyed call, marked `idempotent-replayed` when it answers an earlier call
/// with the same key again.
pub(crate) fn keyed_answer<T>(message: T, replayed: bool) -> Response<T> {
    let mut response = Response::new(message);
    if replayed {
        response
            .metadata_mut()
            .insert(REPLAYED_HEADER, MetadataValue::from_static("true"));
    }
    response
}

/// Runs blocking work (files, parsing) off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, Status> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(Status::from),
        Err(join_error) => Err(Status::from(ServiceError::internal(join_error))),
    }
}
