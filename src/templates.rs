//! CreateTemplate as one call, whatever door it came through (gRPC today, HTTP next): the
//! request's own checks and the template's syntax check run in the server (linear, on a
//! blocking thread, at most [`MAX_CONCURRENT_TEMPLATE_PARSES`] at once); the parse, the fence
//! and the report run in an analysis worker under its budgets ([`crate::analysis`]); the
//! template and its report are stored ([`crate::storage`]). With an Idempotency-Key, the steps
//! of [`crate::idempotency::once`] wrap it: a retry answers the same template. Domain types in
//! and out: the door converts its request to a [`NewTemplate`] and the [`Created`] record back.

use crate::analysis::AnalysisPool;
use crate::auth::TenantId;
use crate::error::{Classified, FieldViolation, ServiceError, ServiceErrorCode};
use crate::idempotency::claim::KeyPolicy;
use crate::idempotency::once::{self, NextAction};
use crate::idempotency::IdempotencyKey;
use crate::lottie::reading::template::{hex_sha256, MAX_TEMPLATE_BYTES};
use crate::lottie::Template;
use crate::reason::Reason;
use crate::storage::{StorageError, TemplateRecord, Templates};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Longest template name, characters.
pub const MAX_TEMPLATE_NAME_CHARS: usize = 128;
pub(crate) use crate::lottie::lowering::text::fonts::{MAX_FONTS_PER_TEMPLATE, MAX_FONT_BYTES};
pub(crate) use crate::lottie::reading::dotlottie::MAX_ANIMATION_ID_CHARS;
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

/// Keys are scoped per method: the same key on SubmitRender is another key.
const CREATE_TEMPLATE_SCOPE: &str = "CreateTemplate";

/// A template to register, as the caller sent it.
#[derive(Debug, Clone)]
pub(crate) struct NewTemplate {
    pub name: String,
    /// Bodymovin JSON.
    pub lottie_json: bytes::Bytes,
    /// Uploaded fonts by family.
    pub fonts: BTreeMap<String, bytes::Bytes>,
    /// The animation of a dotLottie archive to register (its manifest id); None: the
    /// archive's own choice.
    pub animation: Option<String>,
}

/// The template to answer.
#[derive(Debug)]
pub(crate) enum Created {
    /// Registered now.
    Created(TemplateRecord),
    /// An earlier call with this key and request registered it: answered again.
    Replayed(TemplateRecord),
}

/// What CreateTemplate needs: the store, how keys are kept, the analysis workers and the
/// server's parse slots.
#[derive(Debug, Clone)]
pub(crate) struct TemplateIntake {
    store: Templates,
    keys: KeyPolicy,
    analysis: AnalysisPool,
    /// Parse slots: at most [`MAX_CONCURRENT_TEMPLATE_PARSES`] templates parsed at once.
    parses: Arc<Semaphore>,
}

impl NewTemplate {
    /// The fingerprint of the request for its idempotency key: the name, the JSON's and
    /// every font's sha256 (fonts by family, so their order on the wire does not matter), the
    /// animation chosen.
    fn fingerprint(&self) -> String {
        let fonts: BTreeMap<&str, String> = self
            .fonts
            .iter()
            .map(|(family, bytes)| (family.as_str(), hex_sha256(bytes)))
            .collect();
        let mut canonical = serde_json::json!({
            "name": self.name,
            "lottie_json": hex_sha256(&self.lottie_json),
            "fonts": fonts,
        });
        // Only when chosen: the keys of requests without one hash as they always did.
        if let (Some(animation), Some(map)) = (&self.animation, canonical.as_object_mut()) {
            map.insert("animation".into(), animation.as_str().into());
        }
        hex_sha256(canonical.to_string().as_bytes())
    }
}

impl TemplateIntake {
    pub(crate) fn new(store: Templates, keys: KeyPolicy, analysis: AnalysisPool) -> TemplateIntake {
        TemplateIntake {
            store,
            keys,
            analysis,
            parses: Arc::new(Semaphore::new(MAX_CONCURRENT_TEMPLATE_PARSES)),
        }
    }

    /// CreateTemplate. Without a key the template is simply created; with one, a retry of
    /// the same request answers the same template. The key is freed at once if the caller
    /// hangs up mid-analysis (this future is dropped), so the retry runs instead of meeting
    /// the claim until its lease runs out.
    pub(crate) async fn create(
        &self,
        tenant: TenantId,
        key: Option<IdempotencyKey>,
        template: NewTemplate,
    ) -> Result<Created, ServiceError> {
        let template = Arc::new(template);
        let Some(key) = key else {
            return Ok(Created::Created(self.register(tenant, template).await?));
        };
        let fingerprint = {
            let template = template.clone();
            tokio::task::spawn_blocking(move || template.fingerprint())
                .await
                .map_err(ServiceError::internal)?
        };
        let next = once::begin(
            &self.keys,
            &tenant,
            CREATE_TEMPLATE_SCOPE,
            &key,
            &fingerprint,
            |id| {
                let (store, tenant) = (self.store.clone(), tenant.clone());
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
        let claimed = match next {
            NextAction::Create(claimed) => claimed,
            NextAction::Replay(record) => {
                tracing::info!(template_id = %record.id, "idempotent replay of CreateTemplate");
                return Ok(Created::Replayed(record));
            }
        };
        let created = self.register(tenant, template).await;
        claimed
            .finish(created.as_ref().ok().map(|record| record.id))
            .await;
        Ok(Created::Created(created?))
    }

    /// Validates, analyses and stores a template. Only the request's own checks and the
    /// template's syntax check ([`Template::check_syntax`], linear and allocating nothing per
    /// value) run here, on a blocking thread; the parse, the fence and the report (text
    /// conversion, font parsing) run in an analysis worker under its budgets, which dies with
    /// this future if the caller goes away. What the server keeps (slots, summary) comes back
    /// from the worker in its report.
    async fn register(
        &self,
        tenant: TenantId,
        template: Arc<NewTemplate>,
    ) -> Result<TemplateRecord, ServiceError> {
        // A tenant backed off for its analyses' CPU is refused before its template is checked.
        self.analysis.check_backoff(&tenant)?;
        self.check(template.clone()).await?;
        let report = self
            .analysis
            .analyze(
                &tenant,
                &template.lottie_json,
                &template.fonts,
                template.animation.as_deref(),
            )
            .await?;
        let store = self.store.clone();
        let record = tokio::task::spawn_blocking(move || {
            store.create(
                &tenant,
                &template.name,
                &template.lottie_json,
                report,
                &template.fonts,
            )
        })
        .await
        .map_err(ServiceError::internal)??;
        tracing::info!(template_id = %record.id, tenant = %record.tenant, name = %record.name, "template created");
        Ok(record)
    }

    /// The server's own checks ([`validate`]) in a parse slot.
    async fn check(&self, template: Arc<NewTemplate>) -> Result<(), ServiceError> {
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
        // The slot moves into the blocking task: a parse whose caller went away still holds
        // it until the parse ends.
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let checked = check_new(&template);
            if template.lottie_json.len() > TRIM_AFTER_PARSING_BYTES {
                crate::os::release_free_memory();
            }
            checked
        })
        .await
        .map_err(ServiceError::internal)?
    }
}

/// Every problem with a new template found by the server's linear checks (the template's
/// syntax, not its model: that is the analysis'), as one INVALID_ARGUMENT.
fn check_new(template: &NewTemplate) -> Result<(), ServiceError> {
    let (violations, reason) = validate(template);
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

/// Every problem with a new template the server finds itself: its name, its fonts and its
/// template's syntax ([`Template::check_syntax`]); the reason to refuse it with when
/// there are any. The template's model and fence are checked by its analysis.
pub(crate) fn validate(request: &NewTemplate) -> (Vec<FieldViolation>, Reason) {
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
        if !crate::lottie::lowering::text::fonts::is_font_file(bytes) {
            violation(
                field,
                format!("must be a TrueType or OpenType font of at most {MAX_FONT_BYTES} bytes"),
            );
        }
    }
    if let Some(animation) = &request.animation {
        let chars = animation.chars().count();
        if !(1..=MAX_ANIMATION_ID_CHARS).contains(&chars) || animation.contains('/') {
            violation(
                "animation_id".into(),
                format!("must be 1..={MAX_ANIMATION_ID_CHARS} characters without '/'"),
            );
        } else if !crate::lottie::reading::dotlottie::is_zip(&request.lottie_json) {
            violation(
                "animation_id".into(),
                "names an animation of a .lottie archive; this template is not one".into(),
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
        reason = Reason::TemplateTooLarge;
    } else if crate::lottie::reading::template::is_gzip(&request.lottie_json)
        || crate::lottie::reading::dotlottie::is_zip(&request.lottie_json)
    {
        // A Telegram sticker (.tgs) or a dotLottie archive: unpacked and checked in its
        // analysis worker, never here (a decompressor on caller bytes is the workers').
    } else if let Err(error) = Template::check_syntax(&request.lottie_json) {
        violation("lottie_json".into(), error.to_string());
        reason = error.reason();
    }
    (violations, reason)
}
