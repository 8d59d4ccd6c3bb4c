//! Render jobs: SubmitRender as one call ([`intake`]), what a job is ([`model`]), the checks
//! before one is accepted ([`admission`]), its fingerprint ([`fingerprint`]), the table of jobs that answers
//! Get/Watch/Cancel/List ([`board`]), the bounded queue in front of the workers ([`queue`]), the
//! fingerprints refused after repeated crashes ([`quarantine`]), the bounds of the jobs kept
//! ([`retention`]), this instance's jobs ([`local`]), a tenant's jobs listed a page at a
//! time ([`listing`]) and the scheduler that runs queued jobs in sandboxed worker processes
//! ([`scheduler`]).
//!
//! Everything lives in this process (the embedded default); with Redis, [`shared`] copies
//! every job's snapshots there so that all instances see all jobs and share renders, and
//! its queue ([`shared::queue`]) is the one work queue of every instance.

pub mod admission;
pub(crate) mod board;
pub(crate) mod fingerprint;
pub(crate) mod intake;
pub(crate) mod listing;
pub(crate) mod local;
pub(crate) mod model;
pub(crate) mod outcome;
pub(crate) mod quarantine;
pub(crate) mod queue;
pub(crate) mod retention;
pub(crate) mod scheduler;
pub mod settings;
pub(crate) mod shared;
#[cfg(test)]
mod test_support;

pub(crate) use board::JobBoard;
pub use fingerprint::Fingerprint;
pub use listing::MAX_JOBS_EXAMINED_PER_LIST;
pub use model::{Job, JobFailure, JobState, RenderWork};
pub use quarantine::Quarantine;
pub use queue::RenderQueue;
pub(crate) use scheduler::Scheduler;
pub use shared::records::MAX_INDEXED_JOBS_PER_TENANT;
