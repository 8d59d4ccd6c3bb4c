//! The wire contract of refusals and failures: every machine-readable reason the service
//! reports (a refusal's `google.rpc.ErrorInfo.reason`, a failed job's `error.reason`, the
//! `reason` label of the refusal metrics) is one variant here, spelt in SCREAMING_SNAKE_CASE
//! by [`Reason::as_str`]. Callers branch on these strings, so a spelling never changes once
//! released; a new situation gets a new variant.
//!
//! The reason stays this enum from where it arises to the wire: a worker process reports it
//! (serde writes and reads the same spelling), a job record in Redis stores it, and only the
//! gRPC status and the metrics labels turn it into text. A worker that reports a spelling this
//! table does not know broke the protocol: its answer does not decode, and the parent
//! classifies the run as a crash.

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Declares [`Reason`], its wire spelling (for `as_str` and serde alike) and the list of all
/// variants from one table, so that they cannot drift apart.
macro_rules! reasons {
    ($($variant:ident => $wire:literal,)+) => {
        /// Why a call was refused or a job failed. Serialised as its wire spelling.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($variant,)+
        }

        impl Reason {
            /// Every reason, for checks over the whole contract.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)+];

            /// The reason as it travels on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $wire,)+
                }
            }
        }
    };
}

reasons! {
    // The request itself.
    BodyUndecodable => "BODY_UNDECODABLE",
    UnknownFields => "UNKNOWN_FIELDS",
    RequestInvalid => "REQUEST_INVALID",
    RequestTooLarge => "REQUEST_TOO_LARGE",
    RequestBodyTimeout => "REQUEST_BODY_TIMEOUT",
    BodyNotJson => "BODY_NOT_JSON",
    RouteNotFound => "ROUTE_NOT_FOUND",
    MethodNotAllowed => "METHOD_NOT_ALLOWED",
    LengthRequired => "LENGTH_REQUIRED",
    MediaTypeUnsupported => "MEDIA_TYPE_UNSUPPORTED",
    RangeNotSatisfiable => "RANGE_NOT_SATISFIABLE",
    IdempotencyKeyMissing => "IDEMPOTENCY_KEY_MISSING",
    IdempotencyKeyInvalid => "IDEMPOTENCY_KEY_INVALID",
    IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
    IdempotencyKeyInProgress => "IDEMPOTENCY_KEY_IN_PROGRESS",
    Unauthenticated => "UNAUTHENTICATED",
    NotAnOperator => "NOT_AN_OPERATOR",
    // Templates and the job budget.
    TemplateNotFound => "TEMPLATE_NOT_FOUND",
    TemplateInvalid => "TEMPLATE_INVALID",
    TemplateTooLarge => "TEMPLATE_TOO_LARGE",
    TemplateTooComplex => "TEMPLATE_TOO_COMPLEX",
    TemplateRecordTooLarge => "TEMPLATE_RECORD_TOO_LARGE",
    TemplateUnrenderable => "TEMPLATE_UNRENDERABLE",
    TemplateQuotaExceeded => "TEMPLATE_QUOTA_EXCEEDED",
    SlotUnknown => "SLOT_UNKNOWN",
    SlotValueInvalid => "SLOT_VALUE_INVALID",
    ThemeUnknown => "THEME_UNKNOWN",
    AnimationUnknown => "ANIMATION_UNKNOWN",
    TextInvalid => "TEXT_INVALID",
    ImageInvalid => "IMAGE_INVALID",
    ImageNotFound => "IMAGE_NOT_FOUND",
    ImageQuotaExceeded => "IMAGE_QUOTA_EXCEEDED",
    JobTooLarge => "JOB_TOO_LARGE",
    OutputTooLong => "OUTPUT_TOO_LONG",
    OutputTooLarge => "OUTPUT_TOO_LARGE",
    RenderQuarantined => "RENDER_QUARANTINED",
    WebhookSecretMissing => "WEBHOOK_SECRET_MISSING",
    // Jobs and their outputs.
    JobNotFound => "JOB_NOT_FOUND",
    JobNotSucceeded => "JOB_NOT_SUCCEEDED",
    JobInvalid => "JOB_INVALID",
    JobRefused => "JOB_REFUSED",
    OutputNotFound => "OUTPUT_NOT_FOUND",
    OutputWriteFailed => "OUTPUT_WRITE_FAILED",
    SharedRenderCancelled => "SHARED_RENDER_CANCELLED",
    SharedRenderLost => "SHARED_RENDER_LOST",
    InstanceLost => "INSTANCE_LOST",
    Cancelled => "CANCELLED",
    // Rendering.
    RenderCrashed => "RENDER_CRASHED",
    RenderDeadlineExceeded => "RENDER_DEADLINE_EXCEEDED",
    RenderCpuExceeded => "RENDER_CPU_EXCEEDED",
    RenderMemoryExceeded => "RENDER_MEMORY_EXCEEDED",
    ExpressionsCpuExceeded => "EXPRESSIONS_CPU_EXCEEDED",
    RenderThreadDied => "RENDER_THREAD_DIED",
    ResourcesExhausted => "RESOURCES_EXHAUSTED",
    EncoderUnavailable => "ENCODER_UNAVAILABLE",
    EncoderFailed => "ENCODER_FAILED",
    WorkerUnavailable => "WORKER_UNAVAILABLE",
    // Capacity.
    QueueFull => "QUEUE_FULL",
    TenantJobLimit => "TENANT_JOB_LIMIT",
    TenantRateLimited => "TENANT_RATE_LIMITED",
    RetainedJobsFull => "RETAINED_JOBS_FULL",
    IdempotencyKeysFull => "IDEMPOTENCY_KEYS_FULL",
    ServerOverloaded => "SERVER_OVERLOADED",
    TemplateParsingBusy => "TEMPLATE_PARSING_BUSY",
    CompressedRequestsBusy => "COMPRESSED_REQUESTS_BUSY",
    RequestBuffersBusy => "REQUEST_BUFFERS_BUSY",
    AnalysisBusy => "ANALYSIS_BUSY",
    AnalysisBackoff => "ANALYSIS_BACKOFF",
    AnalysisDeadlineExceeded => "ANALYSIS_DEADLINE_EXCEEDED",
    AnalysisUnavailable => "ANALYSIS_UNAVAILABLE",
    AnalysisInput => "ANALYSIS_INPUT",
    TooManyWatchers => "TOO_MANY_WATCHERS",
    TooManyDownloads => "TOO_MANY_DOWNLOADS",
    DownloadStalled => "DOWNLOAD_STALLED",
    // Infrastructure and lifecycle.
    StorageUnavailable => "STORAGE_UNAVAILABLE",
    DiskFull => "DISK_FULL",
    JobStoreUnavailable => "JOB_STORE_UNAVAILABLE",
    IdempotencyStoreUnavailable => "IDEMPOTENCY_STORE_UNAVAILABLE",
    ServerDraining => "SERVER_DRAINING",
    ServerShuttingDown => "SERVER_SHUTTING_DOWN",
    Internal => "INTERNAL",
}

// Written by hand over the table's `as_str` rather than derived with a rename per variant:
// the same spelling by construction, and about 75 KB less of every debug binary (the derived
// visitors for this many variants are that large).
impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Reason, D::Error> {
        deserializer.deserialize_str(WireSpelling)
    }
}

/// Reads a reason from its wire spelling; any other string is an error, never a guess.
struct WireSpelling;

impl de::Visitor<'_> for WireSpelling {
    type Value = Reason;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a reason of the wire contract (e.g. TEMPLATE_INVALID)")
    }

    fn visit_str<E: de::Error>(self, wire: &str) -> Result<Reason, E> {
        Reason::ALL
            .iter()
            .copied()
            .find(|reason| reason.as_str() == wire)
            .ok_or_else(|| E::invalid_value(de::Unexpected::Str(wire), &self))
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> String {
        reason.as_str().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;
    use std::collections::HashSet;

    #[test]
    fn every_reason_is_spelt_uniquely_in_screaming_snake_case() {
        let mut spellings = HashSet::new();
        for &reason in Reason::ALL {
            let wire = reason.as_str();
            assert!(spellings.insert(wire), "{wire} is spelt by two variants");
            let screaming_snake = wire.starts_with(|c: char| c.is_ascii_uppercase())
                && !wire.ends_with('_')
                && !wire.contains("__")
                && wire.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            assert!(screaming_snake, "{wire} is not SCREAMING_SNAKE_CASE");
            // Workers and job records carry it through serde: the same spelling there.
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{wire}\""));
            assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), reason);
        }
    }

    #[test]
    fn wire_strings_the_api_tests_assert_keep_their_spelling() {
        // Spelt independently of the table: a renamed variant string breaks callers.
        for (reason, wire) in [
            (Reason::TemplateNotFound, "TEMPLATE_NOT_FOUND"),
            (Reason::QueueFull, "QUEUE_FULL"),
            (Reason::JobStoreUnavailable, "JOB_STORE_UNAVAILABLE"),
            (Reason::TenantJobLimit, "TENANT_JOB_LIMIT"),
            (Reason::RenderQuarantined, "RENDER_QUARANTINED"),
        ] {
            assert_eq!(reason.as_str(), wire);
        }
        assert!(serde_json::from_str::<Reason>(r#""NO_SUCH_REASON""#).is_err());
        assert!(serde_json::from_str::<Reason>(r#""queue_full""#).is_err());
    }
}
