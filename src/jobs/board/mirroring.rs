//! What a job that follows another's render (a follower) takes over from its leader's
//! snapshot: state, progress, output, error and times; a leader cancelled by its own caller
//! ends the follower with a retryable failure of its own, since its caller cancelled nothing.

use crate::jobs::model::{Job, JobFailure, JobState};
use crate::reason::Reason;
use std::time::Duration;

fn shared_render_cancelled() -> JobFailure {
    JobFailure {
        reason: Reason::SharedRenderCancelled,
        message: "this job shared the render of an identical request, which its caller \
                  cancelled; submit again"
            .into(),
        retryable: true,
        retry_after: Some(Duration::from_secs(1)),
    }
}

/// What a follower takes over from its leader's snapshot.
pub(crate) fn mirror(follower: &mut Job, leader: &Job) {
    follower.state = leader.state;
    follower.frames_done = leader.frames_done;
    follower.frames_total = leader.frames_total;
    follower.output = leader.output.clone();
    follower.error = match (leader.state, &leader.error) {
        (JobState::Cancelled, None) => Some(shared_render_cancelled()),
        (_, error) => error.clone(),
    };
    follower.started_at = leader.started_at;
    follower.finished_at = leader.finished_at;
}
