//! ListRenderJobs on the board (jobs in memory): a tenant's jobs in the listing order, from
//! its own ordered set ([`super::entries::BoardState::listing`]), so a page costs the jobs it
//! examines (at most [`crate::jobs::listing::MAX_JOBS_EXAMINED_PER_LIST`]), not the
//! instance's jobs; under the board's lock, which a page holds for that walk only (a few
//! hundred map look-ups, and a clone of each job kept).

use super::JobBoard;
use crate::auth::TenantId;
use crate::jobs::listing::{walk, JobPage, JobQuery};
use crate::sync::lock;

impl JobBoard {
    /// One page of `tenant`'s jobs on this board, as `query` asks.
    pub(crate) fn list(&self, tenant: &TenantId, query: &JobQuery) -> JobPage {
        let state = lock(&self.state);
        let Some(positions) = state.listing.get(tenant) else {
            return JobPage::default();
        };
        let newest_first = match query.after {
            Some(after) => positions.range(..after).rev(),
            None => positions.range(..).rev(),
        };
        let jobs = newest_first.map(|position| {
            let job = state.entries.get(&position.id).map(|entry| &entry.job);
            // Only the jobs kept are cloned (the walk keeps at most a page of them).
            let kept = job.filter(|job| query.filter.keeps(job)).cloned();
            (*position, kept)
        });
        walk(query, jobs)
    }
}
