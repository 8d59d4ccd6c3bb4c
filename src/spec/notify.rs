//! Who is told about a job: its webhook and the events it wants.

use serde::{Deserialize, Serialize};

/// What happened to a job, as its webhook is told (`RenderRequest.notify`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    Started,
    Succeeded,
    Failed,
    Cancelled,
}

impl EventType {
    /// Every terminal event: what a webhook sends when it names none.
    pub const TERMINAL: [EventType; 3] = [
        EventType::Succeeded,
        EventType::Failed,
        EventType::Cancelled,
    ];

    /// The last part of the `type` member, and of the webhook-id (`started`, …).
    pub fn short_name(self) -> &'static str {
        match self {
            EventType::Started => "started",
            EventType::Succeeded => "succeeded",
            EventType::Failed => "failed",
            EventType::Cancelled => "cancelled",
        }
    }

    /// The `webhook-id` of this event of job `job`: the same on every attempt and on
    /// every instance that might announce it, so the store keeps it once and a receiver
    /// deduplicates by it.
    pub fn webhook_id(self, job: uuid::Uuid) -> String {
        format!("msg_{}_{}", job.simple(), self.short_name())
    }

    /// The `type` member: a dotted name, as the specification's examples write them.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Started => "render.started",
            EventType::Succeeded => "render.succeeded",
            EventType::Failed => "render.failed",
            EventType::Cancelled => "render.cancelled",
        }
    }
}

/// Where to send which of a job's events (`RenderRequest.notify`). The URL passed the checks
/// that need no policy (length, syntax); the destination policy (https, no address of this
/// machine's networks) is applied at submit and again when sending
/// ([`crate::webhooks::destination`]). Not part of the render's fingerprint: it changes
/// who is told, not what is rendered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notify {
    pub url: String,
    /// Sorted, each once, never empty (none asked means every terminal event).
    pub events: Vec<EventType>,
}

impl Notify {
    /// What the Idempotency-Key's request hash adds for it: a retry that names another
    /// receiver or other events is another request.
    pub fn request_hash_part(&self) -> String {
        let events: Vec<&str> = self.events.iter().map(|event| event.as_str()).collect();
        format!("notify:{}:{}", events.join(","), self.url)
    }
}
