//! A webhook's body, in the payload structure the Standard Webhooks specification recommends:
//! `{"type": "render.succeeded", "timestamp": "…", "data": JOB}`, where JOB is the job as
//! GetRenderJob answers it, in the same canonical JSON as the HTTP door (the gRPC boundary
//! writes it: nothing here touches generated types).

use std::time::SystemTime;

pub use crate::spec::EventType;

/// The body of the event `event` about the job `job` (its canonical JSON), at `at`.
pub fn body(event: EventType, job: serde_json::Value, at: SystemTime) -> Vec<u8> {
    // RFC 3339 in UTC, as the canonical JSON of a Timestamp writes it.
    let timestamp = prost_types::Timestamp::from(at).to_string();
    let body = serde_json::json!({
        "type": event.as_str(),
        "timestamp": timestamp,
        "data": job,
    });
    body.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_body_carries_the_type_the_time_and_the_job() {
        let job = serde_json::json!({"jobId": "0b9c6b2e", "state": "JOB_STATE_SUCCEEDED"});
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_461_848);
        let body = body(EventType::Succeeded, job.clone(), at);
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["type"], "render.succeeded");
        assert_eq!(body["timestamp"], "2026-12-05T09:10:48Z");
        assert_eq!(body["data"], job);
    }
}
