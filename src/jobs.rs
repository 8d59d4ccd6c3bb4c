//! Render jobs: SubmitRender as one call ([`intake`]), what a job is ([`model`]), the checks
//! before one is accepted ([`admission`]), its fingerprint ([`fingerprint`]), the table of jobs that answers
//! Get/Watch/Cancel ([`board`]), the bounded queue in front of the workers ([`queue`]), the
//! fingerprints refused after repeated crashes ([`quarantine`]), the bounds of the jobs kept
//! ([`retention`]), this instance's jobs ([`local`]) and the scheduler that runs queued
//! jobs in sandboxed worker processes ([`scheduler`]).
//!
//! Everything lives in this process (the embedded default); with Redis, [`shared`] copies
//! every job's snapshots there so that all instances see all jobs and share renders, and
//! its queue ([`shared::queue`]) is the one work queue of every instance.

pub mod admission;
pub mod board;
pub mod fingerprint;
pub mod intake;
pub mod local;
pub mod model;
pub(crate) mod outcome;
pub mod quarantine;
pub mod queue;
pub mod retention;
pub mod scheduler;
pub mod shared;
#[cfg(test)]
mod test_support;

pub use board::JobBoard;
pub use fingerprint::Fingerprint;
pub use model::{Job, JobFailure, JobState, RenderWork};
pub use quarantine::Quarantine;
pub use queue::RenderQueue;
pub use scheduler::Scheduler;
