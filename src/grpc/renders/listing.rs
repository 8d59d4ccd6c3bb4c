//! ListRenderJobs on the wire: the request read into a [`JobQuery`] (every field's mistake
//! reported at once), and a [`JobPage`] answered within [`paging::MAX_PAGE_BYTES`] with the
//! token the next call continues from. Where the jobs come from is the scheduler's business
//! ([`crate::jobs::scheduler::Lookup::list_jobs`]).

use super::job_to_proto;
use crate::error::{FieldViolation, ServiceError};
use crate::grpc::convert::parse_id;
use crate::grpc::paging;
use crate::grpc::proto;
use crate::jobs::listing::{JobFilter, JobPage, JobQuery, ListPosition};
use crate::jobs::JobState;
use crate::reason::Reason;
use prost::Message;

/// The query `request` asks; INVALID_ARGUMENT naming every field at fault.
pub(super) fn job_query(request: &proto::ListRenderJobsRequest) -> Result<JobQuery, ServiceError> {
    let mut violations = Vec::new();
    let limit = paging::page_size(request.page_size, &mut violations);
    let after = paging::page_position(&request.page_token, &mut violations)
        .map(|(created_ms, id)| ListPosition { created_ms, id });
    let state = match proto::JobState::try_from(request.state) {
        Ok(state) => job_state(state),
        Err(_) => {
            violations.push(FieldViolation {
                field: "state".into(),
                description: format!("is no JobState: {}", request.state),
            });
            None
        }
    };
    let template = match request.template_id.as_str() {
        "" => None,
        id => parse_id("template_id", id)
            .map_err(|error| violations.extend(error.violations))
            .ok(),
    };
    let reason = match request.reason.as_str() {
        "" => None,
        wire => {
            let known = Reason::ALL.iter().copied().find(|r| r.as_str() == wire);
            if known.is_none() {
                violations.push(FieldViolation {
                    field: "reason".into(),
                    description: "is no reason of the contract (e.g. RENDER_CRASHED)".into(),
                });
            }
            known
        }
    };
    let filter = JobFilter {
        state,
        template,
        reason,
    };
    if violations.is_empty() {
        return Ok(JobQuery {
            after,
            filter,
            limit,
        });
    }
    let message = violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ");
    Err(ServiceError::invalid_argument(
        Reason::RequestInvalid,
        message,
        violations,
    ))
}

/// The state a filter keeps (`None`: any).
fn job_state(state: proto::JobState) -> Option<JobState> {
    Some(match state {
        proto::JobState::Unspecified => return None,
        proto::JobState::Queued => JobState::Queued,
        proto::JobState::Running => JobState::Running,
        proto::JobState::Succeeded => JobState::Succeeded,
        proto::JobState::Failed => JobState::Failed,
        proto::JobState::Cancelled => JobState::Cancelled,
    })
}

/// `page` on the wire: its jobs up to [`paging::MAX_PAGE_BYTES`] (at least one), and the
/// token of where the next page starts (after the last job shown when the bytes ran out).
pub(super) fn page_answer(page: &JobPage) -> proto::ListRenderJobsResponse {
    let mut jobs = Vec::with_capacity(page.jobs.len());
    let mut page_bytes = paging::PageBytes::default();
    let mut resume_after = page.resume_after;
    for (shown, job) in page.jobs.iter().enumerate() {
        let answer = job_to_proto(job);
        if !page_bytes.take(answer.encoded_len()) {
            resume_after = page.jobs.get(shown - 1).map(ListPosition::of);
            break;
        }
        jobs.push(answer);
    }
    proto::ListRenderJobsResponse {
        jobs,
        next_page_token: resume_after.map_or_else(String::new, |position| {
            paging::page_token(position.created_ms, position.id)
        }),
    }
}
