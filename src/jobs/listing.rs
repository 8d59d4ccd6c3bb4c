//! ListRenderJobs on domain types: a tenant's jobs in one order (newest first: by creation
//! time in milliseconds, then by id, both descending), the filters a caller may set, and
//! the page one call answers. The same walk serves both modes: the board's per-tenant order
//! (in memory) and the tenant's index in Redis (shared jobs, `shared::records`).
//!
//! A call examines at most [`MAX_JOBS_EXAMINED_PER_LIST`] jobs, kept by its filters or not:
//! a filter that matches nothing among a tenant's ten thousand jobs costs one call a bounded
//! walk (and Redis a bounded read), and the caller continues from where it stopped with the
//! page token, each call charged to it by the tenant rate like any other.

use super::model::{Job, JobState};
use crate::reason::Reason;
use std::time::{SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// Jobs one ListRenderJobs call examines at most, whatever its filters keep: five times the
/// largest page, so a filter that keeps one job in five still fills a page, while a call
/// costs a bounded walk (in Redis five reads of 100 records, some hundreds of KB).
pub const MAX_JOBS_EXAMINED_PER_LIST: usize = 500;

/// A job's place in the listing order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ListPosition {
    /// Its creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
    pub id: Uuid,
}

impl ListPosition {
    pub(crate) fn of(job: &Job) -> ListPosition {
        ListPosition {
            created_ms: millis_since_epoch(job.created_at),
            id: job.id,
        }
    }
}

/// `time` in milliseconds since the Unix epoch (0 before it, which no job is).
pub(crate) fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// What a caller keeps of its jobs; `None` keeps any.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JobFilter {
    pub state: Option<JobState>,
    pub template: Option<Uuid>,
    /// The reason of the job's error (failed jobs, and jobs cancelled by a shutdown).
    pub reason: Option<Reason>,
}

impl JobFilter {
    pub(crate) fn keeps(&self, job: &Job) -> bool {
        self.state.is_none_or(|state| job.state == state)
            && self
                .template
                .is_none_or(|template| job.template_id == template)
            && self.reason.is_none_or(|reason| {
                job.error
                    .as_ref()
                    .is_some_and(|error| error.reason == reason)
            })
    }
}

/// One call's question: the jobs after `after` (none: from the newest) that `filter`
/// keeps, at most `limit` of them.
#[derive(Debug, Clone)]
pub(crate) struct JobQuery {
    pub after: Option<ListPosition>,
    pub filter: JobFilter,
    pub limit: usize,
}

/// One call's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JobPage {
    /// The jobs kept, newest first, at most the query's limit.
    pub jobs: Vec<Job>,
    /// Where the next call continues (the last job examined); `None` when every job after
    /// the query's position was examined.
    pub resume_after: Option<ListPosition>,
}

/// The walk of one call over `positions` (the tenant's jobs after the query's position,
/// newest first, each with its job when it still exists): keeps what the filter keeps, up
/// to the limit, and stops after [`MAX_JOBS_EXAMINED_PER_LIST`] positions.
pub(crate) fn walk<I>(query: &JobQuery, positions: I) -> JobPage
where
    I: IntoIterator<Item = (ListPosition, Option<Job>)>,
{
    let mut page = JobPage::default();
    let mut positions = positions.into_iter().peekable();
    let mut examined = 0;
    while let Some((position, job)) = positions.next() {
        examined += 1;
        if let Some(job) = job.filter(|job| query.filter.keeps(job)) {
            page.jobs.push(job);
        }
        let full = page.jobs.len() >= query.limit || examined >= MAX_JOBS_EXAMINED_PER_LIST;
        if full {
            page.resume_after = positions.peek().map(|_| position);
            break;
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::TenantId;
    use crate::jobs::model::JobFailure;
    use crate::jobs::test_support::{gif_fingerprint, queued_job};
    use std::time::Duration;

    fn job(millis: u64, state: JobState) -> Job {
        let tenant = TenantId::default_tenant();
        let mut job = queued_job(tenant.clone(), gif_fingerprint(&tenant, "00"));
        job.template_id = Uuid::nil();
        job.created_at = UNIX_EPOCH + Duration::from_millis(millis);
        job.state = state;
        job
    }

    fn positions(jobs: &[Job]) -> Vec<(ListPosition, Option<Job>)> {
        jobs.iter()
            .map(|job| (ListPosition::of(job), Some(job.clone())))
            .collect()
    }

    #[test]
    fn a_page_stops_at_its_limit_and_says_where_to_go_on_only_when_more_are_left() {
        let jobs: Vec<Job> = (0..5).map(|i| job(100 - i, JobState::Queued)).collect();
        let query = JobQuery {
            after: None,
            filter: JobFilter::default(),
            limit: 2,
        };
        let page = walk(&query, positions(&jobs));
        assert_eq!(page.jobs, jobs[..2]);
        assert_eq!(page.resume_after, Some(ListPosition::of(&jobs[1])));
        let last = walk(&query, positions(&jobs[3..]));
        assert_eq!(last.jobs, jobs[3..]);
        assert_eq!(last.resume_after, None);
    }

    #[test]
    fn a_filter_that_keeps_nothing_examines_a_bounded_number_of_jobs() {
        let jobs: Vec<Job> = (0..MAX_JOBS_EXAMINED_PER_LIST as u64 + 10)
            .map(|i| job(10_000 - i, JobState::Succeeded))
            .collect();
        let query = JobQuery {
            after: None,
            filter: JobFilter {
                state: Some(JobState::Failed),
                ..JobFilter::default()
            },
            limit: 1,
        };
        let page = walk(&query, positions(&jobs));
        assert!(page.jobs.is_empty());
        assert_eq!(
            page.resume_after,
            Some(ListPosition::of(&jobs[MAX_JOBS_EXAMINED_PER_LIST - 1]))
        );
    }

    #[test]
    fn filters_keep_by_state_template_and_reason() {
        let mut failed = job(5, JobState::Failed);
        failed.error = Some(JobFailure {
            reason: Reason::RenderCrashed,
            message: "crashed".into(),
            retryable: false,
            retry_after: None,
        });
        let template = Uuid::new_v4();
        let mut other_template = job(4, JobState::Queued);
        other_template.template_id = template;
        let by_reason = JobFilter {
            reason: Some(Reason::RenderCrashed),
            ..JobFilter::default()
        };
        assert!(by_reason.keeps(&failed));
        assert!(!by_reason.keeps(&other_template));
        let by_template = JobFilter {
            template: Some(template),
            ..JobFilter::default()
        };
        assert!(by_template.keeps(&other_template));
        assert!(!by_template.keeps(&failed));
        let by_state = JobFilter {
            state: Some(JobState::Failed),
            reason: Some(Reason::RenderDeadlineExceeded),
            ..JobFilter::default()
        };
        assert!(!by_state.keeps(&failed), "both filters must keep it");
    }
}
