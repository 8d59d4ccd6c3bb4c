//! TemplateService: registering, reading, listing and deleting templates. A template is
//! parsed and fenced once, at creation (the same code the worker runs), and its report is
//! stored beside it. File and parse work runs on blocking threads, never on the runtime.

use super::blocking;
use super::convert::parse_id;
use super::proto::{self, template_service_server::TemplateService};
use crate::error::{FieldViolation, ServiceError, ServiceErrorCode};
use crate::idempotency::claim::{claim_key, settle_key, KeyOutcome, KeyPolicy, REPLAYED_HEADER};
use crate::idempotency::IdempotencyKey;
use crate::lottie::report::InspectReport;
use crate::lottie::template::hex_sha256;
use crate::lottie::template::MAX_TEMPLATE_BYTES;
use crate::lottie::text::fonts::FontBook;
use crate::lottie::Template;
use crate::storage::{StorageError, TemplateRecord, TemplateStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Longest template name, characters.
pub const MAX_TEMPLATE_NAME_CHARS: usize = 128;
/// Fonts per template: a title card uses one or two families.
pub const MAX_FONTS_PER_TEMPLATE: usize = 16;
/// Largest font file: full CJK fonts reach ~16 MiB.
pub const MAX_FONT_BYTES: usize = 16 * 1024 * 1024;
/// ListTemplates page size when the request says 0, and the largest allowed.
pub const DEFAULT_PAGE_SIZE: usize = 50;
pub const MAX_PAGE_SIZE: usize = 100;
/// Retry delay when template storage fails.
const STORAGE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// SFNT magic numbers: TrueType (0x00010000 and `true`), OpenType CFF (`OTTO`), collections.
const FONT_MAGICS: [&[u8; 4]; 4] = [b"\x00\x01\x00\x00", b"OTTO", b"true", b"ttcf"];

#[derive(Debug, Clone)]
pub struct TemplateApi {
    store: TemplateStore,
    keys: KeyPolicy,
}

impl TemplateApi {
    pub fn new(store: TemplateStore, keys: KeyPolicy) -> TemplateApi {
        TemplateApi { store, keys }
    }

    /// Validates, fences and stores a template.
    async fn create(
        &self,
        request: Arc<proto::CreateTemplateRequest>,
    ) -> Result<TemplateRecord, Status> {
        let store = self.store.clone();
        let record = blocking(move || {
            let (violations, template) = validate_create(&request);
            let template = match template {
                Some(template) if violations.is_empty() => template,
                _ => {
                    let reason = if violations.iter().any(|v| v.field == "lottie_json") {
                        "TEMPLATE_INVALID"
                    } else {
                        "REQUEST_INVALID"
                    };
                    let message = violations
                        .iter()
                        .map(|v| format!("{}: {}", v.field, v.description))
                        .collect::<Vec<_>>()
                        .join("; ");
                    return Err(ServiceError::invalid_argument(reason, message, violations));
                }
            };
            let fonts = FontBook::new(
                request
                    .fonts
                    .iter()
                    .map(|(family, bytes)| (family.clone(), bytes.clone()))
                    .collect(),
            );
            let report = InspectReport::with_fonts(&template, &fonts);
            let fonts: BTreeMap<String, Vec<u8>> = request
                .fonts
                .iter()
                .map(|(family, bytes)| (family.clone(), bytes.clone()))
                .collect();
            store
                .create(&request.name, &request.lottie_json, report, &fonts)
                .map_err(storage_error)
        })
        .await?;
        tracing::info!(template_id = %record.id, name = %record.name, "template created");
        Ok(record)
    }
}

/// Keys are scoped per method: the same key on SubmitRender is another key.
const CREATE_TEMPLATE_SCOPE: &str = "CreateTemplate";

/// The fingerprint of a CreateTemplateRequest for its idempotency key: the name, the JSON's
/// and every font's sha256 (fonts by family, so map order on the wire does not matter).
fn create_fingerprint(request: &proto::CreateTemplateRequest) -> String {
    let fonts: BTreeMap<&str, String> = request
        .fonts
        .iter()
        .map(|(family, bytes)| (family.as_str(), hex_sha256(bytes)))
        .collect();
    let canonical = serde_json::json!({
        "name": request.name,
        "lottie_json": hex_sha256(&request.lottie_json),
        "fonts": fonts,
    });
    hex_sha256(canonical.to_string().as_bytes())
}

pub(crate) fn storage_error(error: StorageError) -> ServiceError {
    match error {
        StorageError::NotFound(id) => ServiceError::not_found(
            "TEMPLATE_NOT_FOUND",
            format!("template {id} does not exist"),
        ),
        StorageError::Io(error) => ServiceError::transient(
            ServiceErrorCode::Unavailable,
            "STORAGE_UNAVAILABLE",
            format!("storage failed: {error}"),
            STORAGE_RETRY_AFTER,
        ),
        StorageError::Damaged(detail) => {
            ServiceError::internal(format!("damaged template record: {detail}"))
        }
    }
}

/// Every problem with a CreateTemplateRequest, the template's own included.
pub fn validate_create(
    request: &proto::CreateTemplateRequest,
) -> (Vec<FieldViolation>, Option<Template>) {
    let mut violations = Vec::new();
    let mut violation =
        |field: String, description: String| violations.push(FieldViolation { field, description });
    let name_chars = request.name.chars().count();
    if !(1..=MAX_TEMPLATE_NAME_CHARS).contains(&name_chars)
        || request.name.chars().any(char::is_control)
    {
        violation(
            "name".into(),
            format!("must be 1..={MAX_TEMPLATE_NAME_CHARS} characters without control characters"),
        );
    }
    if request.fonts.len() > MAX_FONTS_PER_TEMPLATE {
        violation(
            "fonts".into(),
            format!(
                "at most {MAX_FONTS_PER_TEMPLATE} fonts, got {}",
                request.fonts.len()
            ),
        );
    }
    for (family, bytes) in &request.fonts {
        let field = format!("fonts[{family:?}]");
        if !(1..=MAX_TEMPLATE_NAME_CHARS).contains(&family.chars().count()) {
            violation(
                field.clone(),
                format!("font family must be 1..={MAX_TEMPLATE_NAME_CHARS} characters"),
            );
        }
        if bytes.len() > MAX_FONT_BYTES
            || !FONT_MAGICS.iter().any(|magic| bytes.starts_with(*magic))
        {
            violation(
                field,
                format!("must be a TrueType or OpenType font of at most {MAX_FONT_BYTES} bytes"),
            );
        }
    }
    let template = if request.lottie_json.is_empty() {
        violation("lottie_json".into(), "is required".into());
        None
    } else if request.lottie_json.len() > MAX_TEMPLATE_BYTES {
        violation(
            "lottie_json".into(),
            format!(
                "is {} bytes, more than the {MAX_TEMPLATE_BYTES} limit",
                request.lottie_json.len()
            ),
        );
        None
    } else {
        match Template::parse(&request.lottie_json) {
            Ok(template) => Some(template),
            Err(error) => {
                violation("lottie_json".into(), error.to_string());
                None
            }
        }
    };
    (violations, template)
}

fn to_proto(record: &TemplateRecord) -> proto::Template {
    let report = &record.report;
    proto::Template {
        template_id: record.id.to_string(),
        name: record.name.clone(),
        width: u32::try_from(report.width).unwrap_or_default(),
        height: u32::try_from(report.height).unwrap_or_default(),
        frame_rate: report.frame_rate,
        in_frame: report.in_frame,
        out_frame: report.out_frame,
        duration_seconds: report.duration_seconds,
        text_slots: report
            .slots
            .texts
            .iter()
            .map(|slot| proto::TextSlot {
                id: slot.id.clone(),
                default_text: slot.default_text.clone(),
                font_family: slot.font_family.clone(),
            })
            .collect(),
        color_slots: report
            .slots
            .colors
            .iter()
            .map(|slot| proto::ColorSlot {
                id: slot.id.clone(),
                default_color: Some(proto::Color {
                    r: slot.default_color.r(),
                    g: slot.default_color.g(),
                    b: slot.default_color.b(),
                    a: slot.default_color.a(),
                }),
            })
            .collect(),
        sha256: report.sha256.clone(),
        created_at: Some(prost_types::Timestamp::from(record.created_at())),
        warnings: report.warnings.clone(),
    }
}

/// ListTemplates page token: the sort key of the last template shown ("v1.<ms>.<id>").
fn page_token(record: &TemplateRecord) -> String {
    format!("v1.{}.{}", record.created_at_ms, record.id)
}

fn parse_page_token(token: &str) -> Option<(u64, Uuid)> {
    let rest = token.strip_prefix("v1.")?;
    let (millis, id) = rest.split_once('.')?;
    Some((millis.parse().ok()?, Uuid::try_parse(id).ok()?))
}

#[tonic::async_trait]
impl TemplateService for TemplateApi {
    async fn create_template(
        &self,
        request: Request<proto::CreateTemplateRequest>,
    ) -> Result<Response<proto::Template>, Status> {
        let key = request
            .extensions()
            .get::<IdempotencyKey>()
            .map(|key| format!("{CREATE_TEMPLATE_SCOPE}:{}", key.as_str()));
        let request = Arc::new(request.into_inner());
        let Some(key) = key else {
            let record = self.create(request).await?;
            return Ok(Response::new(to_proto(&record)));
        };
        let fingerprint = {
            let request = request.clone();
            blocking(move || Ok(create_fingerprint(&request))).await?
        };
        let store = self.store.clone();
        let outcome = claim_key(
            self.keys.store.as_ref(),
            &key,
            &fingerprint,
            self.keys.lease,
            |id| {
                let store = store.clone();
                async move {
                    match tokio::task::spawn_blocking(move || store.record(id)).await {
                        Ok(Ok(record)) => Ok(Some(record)),
                        // Deleted since: the key is free again.
                        Ok(Err(StorageError::NotFound(_))) => Ok(None),
                        Ok(Err(error)) => Err(storage_error(error)),
                        Err(join_error) => Err(ServiceError::internal(join_error)),
                    }
                }
            },
        )
        .await?;
        if let KeyOutcome::Replay(record) = outcome {
            tracing::info!(template_id = %record.id, "idempotent replay of CreateTemplate");
            let mut response = Response::new(to_proto(&record));
            response
                .metadata_mut()
                .insert(REPLAYED_HEADER, MetadataValue::from_static("true"));
            return Ok(response);
        }
        let created = self.create(request).await;
        settle_key(
            self.keys.store.as_ref(),
            &key,
            &fingerprint,
            created.as_ref().ok().map(|record| record.id),
            self.keys.retention,
        )
        .await;
        Ok(Response::new(to_proto(&created?)))
    }

    async fn get_template(
        &self,
        request: Request<proto::GetTemplateRequest>,
    ) -> Result<Response<proto::Template>, Status> {
        let id = parse_id("template_id", &request.get_ref().template_id)?;
        let store = self.store.clone();
        let record = blocking(move || store.record(id).map_err(storage_error)).await?;
        Ok(Response::new(to_proto(&record)))
    }

    async fn list_templates(
        &self,
        request: Request<proto::ListTemplatesRequest>,
    ) -> Result<Response<proto::ListTemplatesResponse>, Status> {
        let request = request.into_inner();
        let mut violations = Vec::new();
        let page_size = match request.page_size as usize {
            0 => DEFAULT_PAGE_SIZE,
            size if size <= MAX_PAGE_SIZE => size,
            size => {
                violations.push(FieldViolation {
                    field: "page_size".into(),
                    description: format!("must be 0..={MAX_PAGE_SIZE}, got {size}"),
                });
                0
            }
        };
        let after = if request.page_token.is_empty() {
            None
        } else {
            let parsed = parse_page_token(&request.page_token);
            if parsed.is_none() {
                violations.push(FieldViolation {
                    field: "page_token".into(),
                    description: "is not a token this service issued".into(),
                });
            }
            parsed
        };
        if !violations.is_empty() {
            return Err(ServiceError::invalid_argument(
                "REQUEST_INVALID",
                "invalid page request",
                violations,
            )
            .into());
        }
        let store = self.store.clone();
        let records = blocking(move || store.list().map_err(storage_error)).await?;
        // Newest first, ties by id: the page starts after the token's position.
        let start = after.map_or(0, |(millis, id)| {
            records
                .iter()
                .position(|r| {
                    (r.created_at_ms < millis) || (r.created_at_ms == millis && r.id > id)
                })
                .unwrap_or(records.len())
        });
        let page: Vec<&TemplateRecord> = records.iter().skip(start).take(page_size).collect();
        let next_page_token = match page.last() {
            Some(last) if start + page.len() < records.len() => page_token(last),
            _ => String::new(),
        };
        Ok(Response::new(proto::ListTemplatesResponse {
            templates: page.into_iter().map(to_proto).collect(),
            next_page_token,
        }))
    }

    async fn delete_template(
        &self,
        request: Request<proto::DeleteTemplateRequest>,
    ) -> Result<Response<()>, Status> {
        let id = parse_id("template_id", &request.get_ref().template_id)?;
        let store = self.store.clone();
        blocking(move || store.delete(id).map_err(storage_error)).await?;
        tracing::info!(template_id = %id, "template deleted");
        Ok(Response::new(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let store = TemplateStore::open(dir.path()).unwrap();
        let keys = KeyPolicy {
            store: Arc::new(crate::idempotency::store::MemoryStore::default()),
            lease: Duration::from_secs(60),
            retention: Duration::from_secs(60),
        };
        (dir, TemplateApi::new(store, keys))
    }

    fn create_request(name: &str, json: Vec<u8>) -> Request<proto::CreateTemplateRequest> {
        Request::new(proto::CreateTemplateRequest {
            name: name.into(),
            lottie_json: json,
            fonts: Default::default(),
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

    #[tokio::test]
    async fn a_hostile_template_is_invalid_argument_naming_its_json_path_with_every_other_problem()
    {
        let (_dir, api) = api();
        let mut request = create_request("", corpus("malformed/canvas-negative.json"));
        request
            .get_mut()
            .fonts
            .insert("Sans".into(), b"not a font".to_vec());
        let status = api.create_template(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        let details = status.get_error_details();
        assert_eq!(details.error_info().unwrap().reason, "TEMPLATE_INVALID");
        let violations: Vec<(String, String)> = details
            .bad_request()
            .unwrap()
            .field_violations
            .iter()
            .map(|v| (v.field.clone(), v.description.clone()))
            .collect();
        assert_eq!(violations.len(), 3, "{violations:?}");
        assert_eq!(violations[0].0, "name");
        assert_eq!(violations[1].0, "fonts[\"Sans\"]");
        assert_eq!(
            violations[2],
            (
                "lottie_json".to_owned(),
                "$.w: canvas size must be 1..=8192 pixels, got -100".to_owned()
            )
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
