//! A webhook's body, in the payload structure the Standard Webhooks specification recommends:
//! `{"type": "render.succeeded", "timestamp": "…", "data": JOB}`, where JOB is the job as
//! GetRenderJob answers it, in the same canonical JSON as the HTTP door.

use crate::grpc::proto;
use crate::http_json::transcode::to_json;
use prost::Message;
use std::time::SystemTime;

/// What happened to the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Started,
    Succeeded,
    Failed,
    Cancelled,
}

impl EventType {
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

/// The body of the event `event` about `job`, at `at`.
pub fn body(event: EventType, job: &proto::RenderJob, at: SystemTime) -> Result<Vec<u8>, String> {
    let descriptor = crate::grpc::codec::descriptor_pool()?
        .get_message_by_name("lottie.render.v1.RenderJob")
        .ok_or("the descriptors have no RenderJob")?;
    let data = to_json(&descriptor, &job.encode_to_vec())?;
    let data: serde_json::Value = serde_json::from_slice(&data).map_err(|e| e.to_string())?;
    // RFC 3339 in UTC, as the canonical JSON of a Timestamp writes it.
    let timestamp = prost_types::Timestamp::from(at).to_string();
    let body = serde_json::json!({
        "type": event.as_str(),
        "timestamp": timestamp,
        "data": data,
    });
    serde_json::to_vec(&body).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_body_carries_the_type_the_time_and_the_job_as_the_door_writes_it() {
        let job = proto::RenderJob {
            job_id: "0b9c6b2e-4f7e-4a53-9d3e-2f1d8e0c1a55".into(),
            state: proto::JobState::Succeeded as i32,
            frames_total: 61,
            ..Default::default()
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_461_848);
        let body = body(EventType::Succeeded, &job, at).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["type"], "render.succeeded");
        assert_eq!(body["timestamp"], "2026-12-05T09:10:48Z");
        assert_eq!(body["data"]["jobId"], job.job_id.as_str());
        assert_eq!(body["data"]["state"], "JOB_STATE_SUCCEEDED");
        assert_eq!(body["data"]["framesTotal"], 61);
    }
}
