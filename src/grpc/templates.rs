//! TemplateService: registering, reading, listing and deleting templates. A template is
//! syntax-checked in the server and parsed, fenced and analysed once, at creation, in an
//! analysis worker (the same code the render worker runs); its report is stored beside it.
//! File and check work runs on blocking threads, never on the runtime.
//! Templates belong to the caller's tenant: Get, List and Delete see only that tenant's (another
//! tenant's template is TEMPLATE_NOT_FOUND exactly as an unknown id), and idempotency keys are
//! the tenant's own. Deleting is immediate for every caller; jobs already accepted keep
//! rendering from their pinned files (`storage::pins`).

use super::blocking;
use super::convert::parse_id;
use super::proto::{self, template_service_server::TemplateService};
use crate::analysis::AnalysisPool;
use crate::auth::{Caller, TenantId};
use crate::error::{Classified, FieldViolation, ServiceError, ServiceErrorCode};
use crate::idempotency::claim::{
    claim_key, scoped_key, settle_key, KeyOutcome, KeyPolicy, REPLAYED_HEADER,
};
use crate::idempotency::store::{Claimant, IdempotencyStore};
use crate::idempotency::IdempotencyKey;
use crate::lottie::template::hex_sha256;
use crate::lottie::template::MAX_TEMPLATE_BYTES;
use crate::lottie::Template;
use crate::reason::Reason;
use crate::storage::summary::TemplateSummary;
use crate::storage::{IndexEntry, StorageError, TemplateRecord, TemplateStore};
use prost::Message;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};
use uuid::Uuid;

/// Longest template name, characters.
pub const MAX_TEMPLATE_NAME_CHARS: usize = 128;
pub use crate::lottie::text::fonts::{MAX_FONTS_PER_TEMPLATE, MAX_FONT_BYTES};
/// ListTemplates page size when the request says 0, and the largest allowed.
pub const DEFAULT_PAGE_SIZE: usize = 50;
pub const MAX_PAGE_SIZE: usize = 100;
/// Encoded bytes of one ListTemplates page: a quarter of gRPC's default 4 MiB message limit,
/// so stock clients read every page. A template's own answer is bounded far below it
/// (`storage::summary`), so a page always holds at least one.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;
/// Templates syntax-checked at once in the server ([`Template::check_syntax`]). The check
/// keeps nothing per value (an 8 MB template of 119,000 tiny fills once took ~550 MB of JSON
/// tree here; its tree is now built in an analysis worker only), but its CPU is linear in the
/// template: two slots bound the server's share of it whatever is sent, and honest templates
/// check in milliseconds, so they rarely make anyone wait.
pub const MAX_CONCURRENT_TEMPLATE_PARSES: usize = 2;
/// How long a CreateTemplate waits for a parse slot before UNAVAILABLE
/// (`TEMPLATE_PARSING_BUSY`): several large parses finish meanwhile.
pub const PARSE_WAIT: Duration = Duration::from_secs(10);
/// A template larger than this has the check's freed buffers (the longest escaped string,
/// the request's copies) handed back to the kernel at once ([`crate::os::release_free_memory`],
/// a few milliseconds): otherwise each blocking thread's allocator arena keeps what it held.
const TRIM_AFTER_PARSING_BYTES: usize = 1024 * 1024;
/// Retry delay when no parse slot was free.
const PARSE_BUSY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// SFNT magic numbers: TrueType (0x00010000 and `true`), OpenType CFF (`OTTO`), collections.
const FONT_MAGICS: [&[u8; 4]; 4] = [b"\x00\x01\x00\x00", b"OTTO", b"true", b"ttcf"];

#[derive(Debug, Clone)]
pub struct TemplateApi {
    store: TemplateStore,
    keys: KeyPolicy,
    analysis: AnalysisPool,
    /// Parse slots: at most [`MAX_CONCURRENT_TEMPLATE_PARSES`] templates parsed at once.
    parses: Arc<Semaphore>,
}

impl TemplateApi {
    pub fn new(store: TemplateStore, keys: KeyPolicy, analysis: AnalysisPool) -> TemplateApi {
        TemplateApi {
            store,
            keys,
            analysis,
            parses: Arc::new(Semaphore::new(MAX_CONCURRENT_TEMPLATE_PARSES)),
        }
    }

    /// Validates, analyses and stores a template. Only the request's own checks and the
    /// template's syntax check ([`Template::check_syntax`], linear and allocating nothing per
    /// value) run here, on a blocking thread; the parse, the fence and the report (text
    /// conversion, font parsing) run in an analysis worker under its budgets, which dies with
    /// this future if the caller goes away. What the server keeps (slots, summary) comes back
    /// from the worker in its report.
    async fn create(
        &self,
        tenant: TenantId,
        request: Arc<proto::CreateTemplateRequest>,
    ) -> Result<TemplateRecord, Status> {
        // A tenant backed off for its analyses' CPU is refused before its template is checked.
        self.analysis
            .check_backoff(&tenant)
            .map_err(ServiceError::from)?;
        {
            let slot = tokio::time::timeout(PARSE_WAIT, self.parses.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or_else(|| {
                    ServiceError::transient(
                        ServiceErrorCode::Unavailable,
                        Reason::TemplateParsingBusy,
                        format!(
                            "no template could be parsed within {} s; retry after the delay",
                            PARSE_WAIT.as_secs()
                        ),
                        PARSE_BUSY_RETRY_AFTER,
                    )
                })?;
            let request = request.clone();
            // The slot moves into the blocking task: a parse whose caller went away still
            // holds it until the parse ends.
            blocking(move || {
                let _slot = slot;
                let checked = check_create(&request);
                if request.lottie_json.len() > TRIM_AFTER_PARSING_BYTES {
                    crate::os::release_free_memory();
                }
                checked
            })
            .await?;
        }
        let fonts: BTreeMap<String, Vec<u8>> = request
            .fonts
            .iter()
            .map(|(family, bytes)| (family.clone(), bytes.clone()))
            .collect();
        let report = self
            .analysis
            .analyze(&tenant, &request.lottie_json, &fonts)
            .await
            .map_err(ServiceError::from)?;
        let store = self.store.clone();
        let record = blocking(move || {
            store
                .create(&tenant, &request.name, &request.lottie_json, report, &fonts)
                .map_err(ServiceError::from)
        })
        .await?;
        tracing::info!(template_id = %record.id, tenant = %record.tenant, name = %record.name, "template created");
        Ok(record)
    }
}

/// Every problem with a CreateTemplateRequest found by the server's linear checks (the
/// template's syntax, not its model: that is the analysis'), as one INVALID_ARGUMENT.
fn check_create(request: &proto::CreateTemplateRequest) -> Result<(), ServiceError> {
    let (violations, reason) = validate_create(request);
    if violations.is_empty() {
        return Ok(());
    }
    let message = violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ");
    Err(ServiceError::invalid_argument(reason, message, violations))
}

/// Frees a claimed idempotency key when the call that claimed it ends without settling it.
struct ReleaseKeyOnDrop {
    store: Arc<dyn IdempotencyStore>,
    key: String,
    claimant: Option<Claimant>,
    armed: bool,
}

impl Drop for ReleaseKeyOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, key) = (self.store.clone(), std::mem::take(&mut self.key));
        let Some(claimant) = self.claimant.take() else {
            return;
        };
        runtime.spawn(async move {
            if let Err(error) = store.release(&key, &claimant).await {
                tracing::warn!(%error, "cannot release an idempotency key; its lease will");
            }
        });
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

/// Every problem with a CreateTemplateRequest the server finds itself: its name, its fonts
/// and its template's syntax ([`Template::check_syntax`]); the reason to refuse it with when
/// there are any. The template's model and fence are checked by its analysis.
pub fn validate_create(request: &proto::CreateTemplateRequest) -> (Vec<FieldViolation>, Reason) {
    let mut reason = Reason::RequestInvalid;
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
    if request.lottie_json.is_empty() {
        violation("lottie_json".into(), "is required".into());
        reason = Reason::TemplateInvalid;
    } else if request.lottie_json.len() > MAX_TEMPLATE_BYTES {
        violation(
            "lottie_json".into(),
            format!(
                "is {} bytes, more than the {MAX_TEMPLATE_BYTES} limit",
                request.lottie_json.len()
            ),
        );
        reason = Reason::TemplateInvalid;
    } else if let Err(error) = Template::check_syntax(&request.lottie_json) {
        violation("lottie_json".into(), error.to_string());
        reason = Reason::from_wire(error.reason()).unwrap_or(Reason::TemplateInvalid);
    }
    (violations, reason)
}

/// The answer for a template: its bounded summary (what Get and List show too).
fn to_proto(record: &TemplateRecord) -> proto::Template {
    summary_to_proto(&TemplateSummary::of(record))
}

fn summary_to_proto(summary: &TemplateSummary) -> proto::Template {
    proto::Template {
        template_id: summary.id.to_string(),
        name: summary.name.clone(),
        width: u32::try_from(summary.width).unwrap_or_default(),
        height: u32::try_from(summary.height).unwrap_or_default(),
        frame_rate: summary.frame_rate,
        in_frame: summary.in_frame,
        out_frame: summary.out_frame,
        duration_seconds: summary.duration_seconds,
        text_slots: summary
            .text_slots
            .iter()
            .map(|slot| proto::TextSlot {
                id: slot.id.clone(),
                default_text: slot.default_text.clone(),
                font_family: slot.font_family.clone(),
                default_text_truncated: slot.default_text_truncated,
            })
            .collect(),
        color_slots: summary
            .color_slots
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
        sha256: summary.sha256.clone(),
        created_at: Some(prost_types::Timestamp::from(summary.created_at())),
        warnings: summary.warnings.clone(),
        warnings_truncated: summary.warnings_truncated,
        slots_truncated: summary.slots_truncated,
    }
}

/// One ListTemplates page from the index: the templates after `after` (newest first), at
/// most `page_size` of them and at most [`MAX_PAGE_BYTES`] encoded. Reads the summaries of
/// the templates shown only.
fn list_page(
    store: &TemplateStore,
    tenant: &TenantId,
    after: Option<(u64, Uuid)>,
    page_size: usize,
) -> Result<proto::ListTemplatesResponse, ServiceError> {
    let index = store.index_of(tenant).map_err(ServiceError::from)?;
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
    let mut page_bytes = 0;
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
        // A repeated field's element costs its length, its length's varint and a tag byte.
        let size = template.encoded_len() + prost::length_delimiter_len(template.encoded_len()) + 1;
        if !templates.is_empty() && page_bytes + size > MAX_PAGE_BYTES {
            more = true;
            break;
        }
        page_bytes += size;
        templates.push(template);
        last_shown = Some(entry);
    }
    let next_page_token = match last_shown {
        Some(last) if more => page_token(last.created_at_ms, last.id),
        _ => String::new(),
    };
    Ok(proto::ListTemplatesResponse {
        templates,
        next_page_token,
    })
}

/// ListTemplates page token: the sort key of the last template shown ("v1.<ms>.<id>").
fn page_token(created_at_ms: u64, id: Uuid) -> String {
    format!("v1.{created_at_ms}.{id}")
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
        let tenant = Caller::of(request.extensions()).tenant;
        let key = request
            .extensions()
            .get::<IdempotencyKey>()
            .map(|key| scoped_key(&tenant, CREATE_TEMPLATE_SCOPE, key));
        let request = Arc::new(request.into_inner());
        let Some(key) = key else {
            let record = self.create(tenant, request).await?;
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
                let (store, tenant) = (store.clone(), tenant.clone());
                async move {
                    match tokio::task::spawn_blocking(move || store.record(&tenant, id)).await {
                        Ok(Ok(record)) => Ok(Some(record)),
                        // Deleted since: the key is free again.
                        Ok(Err(StorageError::NotFound(_))) => Ok(None),
                        Ok(Err(error)) => Err(ServiceError::from(error)),
                        Err(join_error) => Err(ServiceError::internal(join_error)),
                    }
                }
            },
        )
        .await?;
        let claimant = match outcome {
            KeyOutcome::Owned(claimant) => claimant,
            KeyOutcome::Replay(record) => {
                tracing::info!(template_id = %record.id, "idempotent replay of CreateTemplate");
                let mut response = Response::new(to_proto(&record));
                response
                    .metadata_mut()
                    .insert(REPLAYED_HEADER, MetadataValue::from_static("true"));
                return Ok(response);
            }
        };
        // Dropped with this future when the caller hangs up mid-analysis: the key is freed
        // at once, so the caller's retry runs instead of meeting the claim until its lease.
        let mut release_if_dropped = ReleaseKeyOnDrop {
            store: self.keys.store.clone(),
            key: key.clone(),
            claimant: Some(claimant.clone()),
            armed: true,
        };
        let created = self.create(tenant, request).await;
        release_if_dropped.armed = false;
        settle_key(
            self.keys.store.as_ref(),
            &key,
            &claimant,
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
        let tenant = Caller::of(request.extensions()).tenant;
        let id = parse_id("template_id", &request.get_ref().template_id)?;
        let store = self.store.clone();
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
                Reason::RequestInvalid,
                "invalid page request",
                violations,
            )
            .into());
        }
        let store = self.store.clone();
        let page = blocking(move || list_page(&store, &tenant, after, page_size)).await?;
        Ok(Response::new(page))
    }

    async fn delete_template(
        &self,
        request: Request<proto::DeleteTemplateRequest>,
    ) -> Result<Response<()>, Status> {
        let tenant = Caller::of(request.extensions()).tenant;
        let id = parse_id("template_id", &request.get_ref().template_id)?;
        let store = self.store.clone();
        let owner = tenant.clone();
        blocking(move || store.delete(&owner, id).map_err(ServiceError::from)).await?;
        tracing::info!(template_id = %id, %tenant, "template deleted");
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
        // Opening reads the store (blocking): on a thread of its own, off the test's runtime.
        let (path, runtime) = (dir.path().to_path_buf(), tokio::runtime::Handle::current());
        let store = std::thread::spawn(move || {
            TemplateStore::open(crate::storage::ObjectStorage::local(&path, runtime)?)
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
            TemplateApi::new(store, keys, AnalysisPool::in_process()),
        )
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
            .insert("Sans".into(), b"not a font".to_vec());
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
