//! TemplateService: registering, reading, listing and deleting templates. CreateTemplate
//! converts the wire request to a [`NewTemplate`] and hands it to [`TemplateIntake::create`], the use
//! case (checks, analysis in a worker, storage, the Idempotency-Key); Get, List and Delete
//! read the store here. File work runs on blocking threads, never on the runtime.
//! Templates belong to the caller's tenant: Get, List and Delete see only that tenant's (another
//! tenant's template is TEMPLATE_NOT_FOUND exactly as an unknown id), and idempotency keys are
//! the tenant's own. Deleting is immediate for every caller; jobs already accepted keep
//! rendering from their pinned files (`storage::pins`).

mod slots;

use super::proto::{self, template_service_server::TemplateService};
use super::{blocking, paging};
use crate::analysis::AnalysisPool;
use crate::auth::{Caller, TenantId};
use crate::error::{FieldViolation, ServiceError};
use crate::idempotency::claim::KeyPolicy;
use crate::idempotency::IdempotencyKey;
use crate::lottie::reading::images;
use crate::reason::Reason;
use crate::storage::images::StoredImage;
use crate::storage::summary::TemplateSummary;
use crate::storage::{Images, IndexEntry, StorageError, TemplateRecord, Templates};
use crate::templates::{validate, Created, NewTemplate, TemplateIntake};
use prost::Message;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Encoded bytes of one ListTemplates page (as of every list: [`super::paging`]).
pub use super::paging::MAX_PAGE_BYTES;
pub use crate::lottie::lowering::text::fonts::{MAX_FONTS_PER_TEMPLATE, MAX_FONT_BYTES};
pub use crate::templates::{MAX_CONCURRENT_TEMPLATE_PARSES, MAX_TEMPLATE_NAME_CHARS, PARSE_WAIT};

#[derive(Debug, Clone)]
pub(crate) struct TemplateApi {
    templates: Templates,
    images: Images,
    intake: TemplateIntake,
}

impl TemplateApi {
    pub(crate) fn new(
        templates: Templates,
        images: Images,
        keys: KeyPolicy,
        analysis: AnalysisPool,
    ) -> TemplateApi {
        TemplateApi {
            intake: TemplateIntake::new(templates.clone(), keys, analysis),
            templates,
            images,
        }
    }
}

/// What the server finds wrong with a CreateTemplateRequest itself ([`validate`]); the fuzz
/// target's entry.
pub fn validate_create(request: &proto::CreateTemplateRequest) -> (Vec<FieldViolation>, Reason) {
    validate(&new_template(request.clone()))
}

/// The wire request as the use case takes it (moved, not copied: its JSON may be 64 MiB).
fn new_template(request: proto::CreateTemplateRequest) -> NewTemplate {
    NewTemplate {
        name: request.name,
        lottie_json: request.lottie_json,
        fonts: request.fonts.into_iter().collect(),
        // Empty: the archive's own choice (proto3 strings have no absence).
        animation: Some(request.animation_id).filter(|id| !id.is_empty()),
    }
}

/// The answer for a template: its bounded summary (what Get and List show too).
fn to_proto(record: &TemplateRecord) -> proto::Template {
    summary_to_proto(&TemplateSummary::of(record))
}

fn summary_to_proto(summary: &TemplateSummary) -> proto::Template {
    // Destructured so that a new field of the summary (a new kind of slot) is a compile
    // error here until the answer shows it or says why not.
    let TemplateSummary {
        id,
        tenant: _,
        name,
        created_at_ms: _,
        sha256,
        width,
        height,
        frame_rate,
        in_frame,
        out_frame,
        duration_seconds,
        text_slots,
        color_slots,
        image_slots,
        scalar_slots,
        vector_slots,
        gradient_slots,
        themes,
        animations,
        animation,
        markers,
        slots_truncated,
        warnings,
        warnings_truncated,
    } = summary;
    proto::Template {
        template_id: id.to_string(),
        name: name.clone(),
        width: u32::try_from(*width).unwrap_or_default(),
        height: u32::try_from(*height).unwrap_or_default(),
        frame_rate: *frame_rate,
        in_frame: *in_frame,
        out_frame: *out_frame,
        duration_seconds: *duration_seconds,
        text_slots: slots::to_proto(text_slots),
        color_slots: slots::to_proto(color_slots),
        image_slots: slots::to_proto(image_slots),
        scalar_slots: slots::to_proto(scalar_slots),
        vector_slots: slots::to_proto(vector_slots),
        gradient_slots: slots::to_proto(gradient_slots),
        themes: themes.clone(),
        animations: animations.clone(),
        animation_id: animation.clone().unwrap_or_default(),
        markers: markers
            .iter()
            .map(|marker| proto::Marker {
                name: marker.name.clone(),
                start_seconds: marker.start_seconds,
                duration_seconds: marker.duration_seconds,
            })
            .collect(),
        sha256: sha256.clone(),
        created_at: Some(prost_types::Timestamp::from(summary.created_at())),
        warnings: warnings.clone(),
        warnings_truncated: *warnings_truncated,
        slots_truncated: *slots_truncated,
    }
}

/// One ListTemplates page from the index: the templates after `after` (newest first), at
/// most `page_size` of them and at most [`MAX_PAGE_BYTES`] encoded. Reads the summaries of
/// the templates shown only.
fn list_page(
    store: &Templates,
    tenant: &TenantId,
    after: Option<(u64, Uuid)>,
    page_size: usize,
) -> Result<proto::ListTemplatesResponse, ServiceError> {
    let index = store.index().of(tenant).map_err(ServiceError::from)?;
    // Newest first, ties by id: the page starts after the token's position.
    let start = after.map_or(0, |(millis, id)| {
        index
            .iter()
            .position(|entry| {
                (entry.created_at_ms < millis) || (entry.created_at_ms == millis && entry.id > id)
            })
            .unwrap_or(index.len())
    });
    let mut templates = Vec::new();
    let mut page_bytes = paging::PageBytes::default();
    let mut last_shown: Option<&IndexEntry> = None;
    let mut more = false;
    for entry in &index[start..] {
        if templates.len() == page_size {
            more = true;
            break;
        }
        let template = match store.summary(tenant, entry.id) {
            Ok(summary) => summary_to_proto(&summary),
            // Deleted since the index was read: not listed.
            Err(StorageError::NotFound(_)) => {
                last_shown = Some(entry);
                continue;
            }
            Err(error) => return Err(ServiceError::from(error)),
        };
        if !page_bytes.take(template.encoded_len()) {
            more = true;
            break;
        }
        templates.push(template);
        last_shown = Some(entry);
    }
    let next_page_token = match last_shown {
        Some(last) if more => paging::page_token(last.created_at_ms, last.id),
        _ => String::new(),
    };
    Ok(proto::ListTemplatesResponse {
        templates,
        next_page_token,
    })
}

#[tonic::async_trait]
impl TemplateService for TemplateApi {
    async fn create_template(
        &self,
        request: Request<proto::CreateTemplateRequest>,
    ) -> Result<Response<proto::Template>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let key = request.extensions().get::<IdempotencyKey>().cloned();
        let created = self
            .intake
            .create(tenant, key, new_template(request.into_inner()))
            .await?;
        let (record, replayed) = match created {
            Created::Created(record) => (record, false),
            Created::Replayed(record) => (record, true),
        };
        Ok(super::keyed_answer(to_proto(&record), replayed))
    }

    async fn get_template(
        &self,
        request: Request<proto::GetTemplateRequest>,
    ) -> Result<Response<proto::Template>, Status> {
        let (tenant, id) =
            super::tenant_and_id(&request, "template_id", &request.get_ref().template_id)?;
        let store = self.templates.clone();
        let summary =
            blocking(move || store.summary(&tenant, id).map_err(ServiceError::from)).await?;
        Ok(Response::new(summary_to_proto(&summary)))
    }

    async fn list_templates(
        &self,
        request: Request<proto::ListTemplatesRequest>,
    ) -> Result<Response<proto::ListTemplatesResponse>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let request = request.into_inner();
        let mut violations = Vec::new();
        let page_size = paging::page_size(request.page_size, &mut violations);
        let after = paging::page_position(&request.page_token, &mut violations);
        if !violations.is_empty() {
            return Err(ServiceError::invalid_argument(
                Reason::RequestInvalid,
                "invalid page request",
                violations,
            )
            .into());
        }
        let store = self.templates.clone();
        let page = blocking(move || list_page(&store, &tenant, after, page_size)).await?;
        Ok(Response::new(page))
    }

    async fn delete_template(
        &self,
        request: Request<proto::DeleteTemplateRequest>,
    ) -> Result<Response<()>, Status> {
        let (tenant, id) =
            super::tenant_and_id(&request, "template_id", &request.get_ref().template_id)?;
        let store = self.templates.clone();
        let owner = tenant.clone();
        blocking(move || store.delete(&owner, id).map_err(ServiceError::from)).await?;
        tracing::info!(template_id = %id, %tenant, "template deleted");
        Ok(Response::new(()))
    }

    async fn upload_image(
        &self,
        request: Request<proto::UploadImageRequest>,
    ) -> Result<Response<proto::Image>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let data = request.into_inner().data;
        let images = self.images.clone();
        let owner = tenant.clone();
        // The header only (linear, nothing decoded: the worker decodes it when a render names
        // it), the hash and the store, on a blocking thread.
        let image = blocking(move || {
            let header = images::header(&data).map_err(|error| {
                let description = format!("image {error}");
                ServiceError::invalid_argument(
                    Reason::RequestInvalid,
                    format!("data: {description}"),
                    vec![FieldViolation {
                        field: "data".into(),
                        description,
                    }],
                )
            })?;
            images
                .upload(&owner, data, header)
                .map_err(ServiceError::from)
        })
        .await?;
        tracing::info!(image_id = %image.id, %tenant, "image uploaded");
        Ok(Response::new(image_to_proto(&image)))
    }

    async fn delete_image(
        &self,
        request: Request<proto::DeleteImageRequest>,
    ) -> Result<Response<()>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let id = request.into_inner().image_id;
        if !crate::storage::images::is_image_id(&id) {
            let description = "must be an image_id UploadImage answered (64 lowercase hex digits)";
            return Err(ServiceError::invalid_argument(
                Reason::RequestInvalid,
                format!("image_id: {description}"),
                vec![FieldViolation {
                    field: "image_id".into(),
                    description: description.into(),
                }],
            )
            .into());
        }
        let images = self.images.clone();
        let (owner, image_id) = (tenant.clone(), id.clone());
        blocking(move || images.delete(&owner, &image_id).map_err(ServiceError::from)).await?;
        tracing::info!(image_id = %id, %tenant, "image deleted");
        Ok(Response::new(()))
    }
}

fn image_to_proto(image: &StoredImage) -> proto::Image {
    let format = match image.header.format {
        image::ImageFormat::Png => "png",
        image::ImageFormat::Jpeg => "jpeg",
        image::ImageFormat::WebP => "webp",
        _ => "other",
    };
    proto::Image {
        image_id: image.id.clone(),
        format: format.into(),
        width: image.header.width,
        height: image.header.height,
        size_bytes: image.size_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tonic::Code;
    use tonic_types::StatusExt;

    fn corpus(name: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/corpus")
                .join(name),
        )
        .unwrap()
    }

    fn api() -> (tempfile::TempDir, TemplateApi) {
        let dir = tempfile::tempdir().unwrap();
        // Opening reads the store (blocking): on a thread of its own, off the test's runtime.
        let (path, runtime) = (dir.path().to_path_buf(), tokio::runtime::Handle::current());
        let (templates, images) = std::thread::spawn(move || {
            let objects = crate::storage::ObjectStorage::local(&path, runtime)?;
            let disk = crate::storage::DiskWatermark::new(
                &objects,
                crate::storage::settings::DEFAULT_MIN_FREE_DISK_BYTES,
            );
            let images = Images::new(objects.clone(), disk);
            Ok::<_, StorageError>((Templates::open(objects)?, images))
        })
        .join()
        .unwrap()
        .unwrap();
        let keys = KeyPolicy {
            store: Arc::new(crate::idempotency::store::MemoryStore::default()),
            lease: Duration::from_secs(60),
            retention: Duration::from_secs(60),
        };
        (
            dir,
            TemplateApi::new(templates, images, keys, AnalysisPool::in_process()),
        )
    }

    fn create_request(name: &str, json: Vec<u8>) -> Request<proto::CreateTemplateRequest> {
        Request::new(proto::CreateTemplateRequest {
            name: name.into(),
            lottie_json: json.into(),
            fonts: Default::default(),
            animation_id: String::new(),
        })
    }

    #[tokio::test]
    async fn a_template_is_created_with_its_slots_and_can_be_read_listed_and_deleted() {
        let (_dir, api) = api();
        let created = api
            .create_template(create_request(
                "ball",
                corpus("slots-ball-colors-opacity.json"),
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (created.width, created.height, created.frame_rate),
            (1080, 1080, 30.0)
        );
        let slots: Vec<&str> = created.color_slots.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(slots, ["ball_color", "bg_color"]);
        assert_eq!(
            created.sha256,
            "650af45ac062c0b80c595c9ff439b20cae43ff9674b7c9ed75ce2b14e0a5f4b7"
        );
        let id = created.template_id.clone();
        let read = api
            .get_template(Request::new(proto::GetTemplateRequest {
                template_id: id.clone(),
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(read, created);
        api.delete_template(Request::new(proto::DeleteTemplateRequest {
            template_id: id.clone(),
        }))
        .await
        .unwrap();
        let gone = api
            .get_template(Request::new(proto::GetTemplateRequest { template_id: id }))
            .await
            .unwrap_err();
        assert_eq!(gone.code(), Code::NotFound);
        assert_eq!(gone.metadata().get("grpc-retry-pushback-ms").unwrap(), "-1");
    }

    fn violations(status: &Status) -> Vec<(String, String)> {
        status
            .get_error_details()
            .bad_request()
            .unwrap()
            .field_violations
            .iter()
            .map(|v| (v.field.clone(), v.description.clone()))
            .collect()
    }

    #[tokio::test]
    async fn a_hostile_template_is_invalid_argument_naming_its_json_path_and_every_other_problem_at_once(
    ) {
        let (_dir, api) = api();
        // The server's own checks, all at once: name, fonts, the template's syntax.
        let mut request = create_request("", b"{\"v\": [1,}".to_vec());
        request
            .get_mut()
            .fonts
            .insert("Sans".into(), bytes::Bytes::from_static(b"not a font"));
        let status = api.create_template(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.get_error_details().error_info().unwrap().reason,
            "TEMPLATE_INVALID"
        );
        let found = violations(&status);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].0, "name");
        assert_eq!(found[1].0, "fonts[\"Sans\"]");
        assert_eq!(found[2].0, "lottie_json");
        assert!(
            found[2].1.starts_with("template is not valid JSON"),
            "{found:?}"
        );
        // The fence runs in the analysis: its answer names the JSON path.
        let status = api
            .create_template(create_request(
                "negative",
                corpus("malformed/canvas-negative.json"),
            ))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.get_error_details().error_info().unwrap().reason,
            "TEMPLATE_INVALID"
        );
        assert_eq!(
            violations(&status),
            [(
                "lottie_json".to_owned(),
                "$.w: canvas size must be 1..=8192 pixels, got -100".to_owned()
            )]
        );
    }

    #[tokio::test]
    async fn malformed_ids_are_invalid_argument_and_unknown_ones_not_found() {
        let (_dir, api) = api();
        let bad = api
            .get_template(Request::new(proto::GetTemplateRequest {
                template_id: "nope".into(),
            }))
            .await
            .unwrap_err();
        assert_eq!(bad.code(), Code::InvalidArgument);
        let unknown = Uuid::new_v4().to_string();
        let missing = api
            .delete_template(Request::new(proto::DeleteTemplateRequest {
                template_id: unknown,
            }))
            .await
            .unwrap_err();
        assert_eq!(missing.code(), Code::NotFound);
    }

    #[tokio::test]
    async fn listing_pages_newest_first_without_gaps_or_repeats() {
        let (_dir, api) = api();
        let mut ids = Vec::new();
        for index in 0..5 {
            let created = api
                .create_template(create_request(
                    &format!("t{index}"),
                    corpus("tiny-solid-layer.json"),
                ))
                .await
                .unwrap()
                .into_inner();
            ids.push(created.template_id);
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        let mut seen = Vec::new();
        let mut token = String::new();
        loop {
            let page = api
                .list_templates(Request::new(proto::ListTemplatesRequest {
                    page_size: 2,
                    page_token: token.clone(),
                }))
                .await
                .unwrap()
                .into_inner();
            assert!(page.templates.len() <= 2);
            seen.extend(page.templates.into_iter().map(|t| t.template_id));
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        ids.reverse();
        assert_eq!(seen, ids);
        for (page_size, page_token) in [(101, String::new()), (1, "garbage".to_owned())] {
            let status = api
                .list_templates(Request::new(proto::ListTemplatesRequest {
                    page_size,
                    page_token,
                }))
                .await
                .unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument);
        }
    }
}
