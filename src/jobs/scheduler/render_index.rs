//! Which render a new job joins. With shared jobs, the render index in Redis names the job
//! rendering each fingerprint: a new job leads, follows a live render (here or on another
//! instance), starts from a succeeded one's output, or takes over a failed one's
//! fingerprint. Then this instance's board decides the same locally, and a leading job is
//! queued: in the shared queue with shared jobs, else in this process's.

use super::outcome::refused_failure;
use super::{Scheduler, SubmitRefused, WorkQueue};
use crate::jobs::board::Admission;
use crate::jobs::model::{Job, JobState, RenderWork};
use crate::jobs::queue::{PushRefused, QueuedJob};
use crate::jobs::shared::RenderClaim;
use std::sync::Arc;
use std::time::SystemTime;
use uuid::Uuid;

/// What a job does about the render the index names for its fingerprint.
enum Step {
    /// It joined that render, reused its output, or was refused: the answer.
    Answer(Box<Result<Job, SubmitRefused>>),
    /// It took the fingerprint over: it leads.
    Leads,
    /// The index changed meanwhile: read it again.
    Again,
}

/// Blocking board work (it may link an output file) on a blocking thread; a panic there is
/// this service's bug.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SubmitRefused> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| SubmitRefused::Internal(error.to_string()))
}

impl Scheduler {
    /// [`Scheduler::submit`] once: with shared jobs, the render index first (lead, follow
    /// another instance's render, reuse its output, or take its fingerprint over), then
    /// [`Scheduler::submit_locally`].
    pub(super) async fn submit_once(
        self: &Arc<Self>,
        mut job: Job,
        work: RenderWork,
    ) -> Result<Job, SubmitRefused> {
        let tenant = job.tenant.clone();
        let work = Arc::new(work);
        if let Some(shared) = self.shared.clone() {
            job.owner = Some(shared.instance());
            // Nothing goes to Redis before the job is admitted: its record is shared only
            // once the render index may name it (it leads or takes a fingerprint over), and
            // a job the queue would refuse is refused before that. A follower's or a
            // reuser's record is written by the board once it is admitted.
            let mut record_shared = false;
            loop {
                let leader = match shared.render_of(&job.fingerprint).await? {
                    Some(leader) if leader == job.id => break,
                    Some(leader) => leader,
                    None => {
                        if let Some(refused) = self.refusal_before_leading(&tenant).await? {
                            self.count_tenant_refusal(&tenant, refused);
                            return Err(SubmitRefused::Queue(refused));
                        }
                        self.share_before_leading(&job, &mut record_shared).await?;
                        match shared.claim_render(&job.fingerprint, job.id).await? {
                            RenderClaim::Leads => break,
                            RenderClaim::Existing(leader) if leader == job.id => break,
                            RenderClaim::Existing(leader) => leader,
                        }
                    }
                };
                let step = if self.board.get(leader).is_some() {
                    self.join_local(&job, &work, leader, &mut record_shared)
                        .await?
                } else {
                    self.join_remote(&job, &work, leader, &mut record_shared)
                        .await?
                };
                match step {
                    Step::Answer(answer) => return *answer,
                    Step::Leads => break,
                    Step::Again => {}
                }
            }
        }
        // It leads: with shared jobs, in the queue every instance reads.
        if let WorkQueue::Shared(queue) = &self.work {
            return self.enqueue_shared(queue, job, work).await;
        }
        let scheduler = self.clone();
        let submitted = {
            let job = job.clone();
            off_runtime(move || scheduler.submit_locally(job, work)).await?
        };
        if let Err(refused) = &submitted {
            self.count_tenant_refusal(&tenant, *refused);
            self.share_refusal(&job, *refused).await;
        }
        submitted.map_err(SubmitRefused::Queue)
    }

    /// `leader` is on this instance's board: the board decides (follow a live render,
    /// reuse a succeeded one); one that ended or whose output is gone is taken over.
    async fn join_local(
        self: &Arc<Self>,
        job: &Job,
        work: &Arc<RenderWork>,
        leader: Uuid,
        record_shared: &mut bool,
    ) -> Result<Step, SubmitRefused> {
        let live = self
            .board
            .get(leader)
            .is_some_and(|local| !matches!(local.state, JobState::Failed | JobState::Cancelled));
        if live {
            let (scheduler, copy, work_copy) = (self.clone(), job.clone(), work.clone());
            let joined = off_runtime(move || scheduler.join_local_render(&copy, work_copy)).await?;
            match joined {
                Some(Ok(joined)) => return Ok(Step::Answer(Box::new(Ok(joined)))),
                Some(Err(refused)) => {
                    return Ok(Step::Answer(Box::new(Err(self
                        .refused(job, refused, *record_shared)
                        .await))))
                }
                // It ended (or its output is gone) meanwhile: take it over below.
                None => {}
            }
        }
        self.take_over(job, leader, record_shared).await
    }

    /// `leader` is not on this instance's board: follow its render on another instance,
    /// reuse its output, or, when it failed, was cancelled, expired or was evicted, name a
    /// job of this instance in its place or take the fingerprint over.
    async fn join_remote(
        self: &Arc<Self>,
        job: &Job,
        work: &Arc<RenderWork>,
        leader: Uuid,
        record_shared: &mut bool,
    ) -> Result<Step, SubmitRefused> {
        let Some(shared) = self.shared.clone() else {
            return Ok(Step::Leads);
        };
        // A job evicted here is gone, even while its record is still to be removed.
        let remote = shared
            .get(leader)
            .await?
            .filter(|_| !self.evicted_here(leader));
        match remote {
            Some(remote) if remote.state == JobState::Succeeded => {
                let (scheduler, copy, work_copy) = (self.clone(), job.clone(), work.clone());
                let reused =
                    off_runtime(move || scheduler.reuse(&copy, work_copy, &remote)).await?;
                match reused {
                    Ok(Some(reused)) => return Ok(Step::Answer(Box::new(Ok(reused)))),
                    Ok(None) => {}
                    Err(refused) => {
                        return Ok(Step::Answer(Box::new(Err(self
                            .refused(job, refused, *record_shared)
                            .await))))
                    }
                }
                // Its output is gone: render anew.
                self.share_before_leading(job, record_shared).await?;
                shared
                    .replace_render(&job.fingerprint, leader, job.id)
                    .await?;
                Ok(Step::Again)
            }
            Some(remote) if !remote.state.is_terminal() => {
                let followed = self.follow_remote(job.clone(), work.clone(), remote);
                Ok(Step::Answer(Box::new(match followed {
                    Ok(followed) => Ok(followed),
                    Err(refused) => Err(self.refused(job, refused, *record_shared).await),
                })))
            }
            // Failed, cancelled, expired or evicted: a job of this instance that renders the
            // fingerprint or reused its output (the newest reuse stands for an evicted render
            // on the board) is named in its place; else the first to take the fingerprint
            // over renders it.
            _ => {
                if let Some(local) = self
                    .board
                    .render_of(&job.fingerprint)
                    .filter(|local| *local != leader)
                {
                    shared
                        .replace_render(&job.fingerprint, leader, local)
                        .await?;
                    return Ok(Step::Again);
                }
                self.take_over(job, leader, record_shared).await
            }
        }
    }

    /// Takes `leader`'s fingerprint over for `job` (compare-and-set): it leads if it won,
    /// else the index is read again.
    async fn take_over(
        &self,
        job: &Job,
        leader: Uuid,
        record_shared: &mut bool,
    ) -> Result<Step, SubmitRefused> {
        let Some(shared) = self.shared.clone() else {
            return Ok(Step::Leads);
        };
        self.share_before_leading(job, record_shared).await?;
        Ok(
            if shared
                .replace_render(&job.fingerprint, leader, job.id)
                .await?
            {
                Step::Leads
            } else {
                Step::Again
            },
        )
    }

    /// A refusal of `job` by the queue or the jobs kept, counted for its tenant and, once
    /// its record was shared, ended there too.
    async fn refused(&self, job: &Job, refused: PushRefused, record_shared: bool) -> SubmitRefused {
        self.count_tenant_refusal(&job.tenant, refused);
        if record_shared {
            self.share_refusal(job, refused).await;
        }
        SubmitRefused::Queue(refused)
    }

    /// The refusal a leading job would get from the shared queue now (read only): refused
    /// here, a submission leaves nothing in Redis. The queue's script checks again when the
    /// job is added, so a race costs only the short-lived records of a late refusal.
    async fn refusal_before_leading(
        &self,
        tenant: &crate::auth::TenantId,
    ) -> Result<Option<PushRefused>, SubmitRefused> {
        let WorkQueue::Shared(queue) = &self.work else {
            return Ok(None);
        };
        Ok(queue
            .refusal(tenant, self.queue.tenant_jobs(tenant))
            .await?)
    }

    /// Shares `job`'s record (once, short-lived until it is admitted) before the render
    /// index may name it: another instance that finds the job there must find its record
    /// too, or it would take it for gone and render twice.
    async fn share_before_leading(
        &self,
        job: &Job,
        record_shared: &mut bool,
    ) -> Result<(), SubmitRefused> {
        if let (false, Some(shared)) = (*record_shared, &self.shared) {
            shared.publish_pending(job).await?;
            *record_shared = true;
        }
        Ok(())
    }

    /// The local part of [`Scheduler::submit`]. Blocking (it may link an output file).
    pub(super) fn submit_locally(
        &self,
        job: Job,
        work: Arc<RenderWork>,
    ) -> Result<Job, PushRefused> {
        let id = job.id;
        loop {
            match self.board.admit(&job, &work) {
                Admission::Leads => {
                    let queued = QueuedJob {
                        id,
                        tenant: job.tenant.clone(),
                        deadline: work.deadline,
                    };
                    return match self.queue.try_push(queued) {
                        Ok(depth) => {
                            self.metrics.queue_depth.set(depth as i64);
                            Ok(job)
                        }
                        Err(refused) => {
                            self.board.remove_refused(
                                id,
                                JobState::Failed,
                                &refused_failure(refused, self.queue_retry_after()),
                            );
                            Err(refused)
                        }
                    };
                }
                Admission::Follows(leader) => {
                    self.metrics.render_joins.inc();
                    tracing::info!(job_id = %id, template_id = %job.template_id, leader_job_id = %leader, "job joins the render of an identical request");
                    return Ok(self.board.get(id).unwrap_or(job));
                }
                Admission::Refused(refused) => return Err(refused),
                Admission::Reuses(leader) => match self.reuse(&job, work.clone(), &leader)? {
                    Some(reused) => return Ok(reused),
                    // The output expired under us: render again.
                    None => self.board.forget_render(&job.fingerprint, leader.id),
                },
            }
        }
    }

    /// Gives `job` the output of `source` (an identical request's succeeded job) and adds
    /// it as succeeded; `None` when that output is gone. Refused, like any new job, when the
    /// jobs kept are at their bound ([`crate::jobs::retention`]): a reuse costs no worker, but
    /// is kept as long as any job. Blocking (links a file).
    pub(super) fn reuse(
        &self,
        job: &Job,
        work: Arc<RenderWork>,
        source: &Job,
    ) -> Result<Option<Job>, PushRefused> {
        let extension = job.format.extension();
        if let Err(error) = self.outputs.link(source.id, job.id, extension) {
            tracing::warn!(job_id = %job.id, template_id = %job.template_id, source_job_id = %source.id, %error, "cannot reuse an output");
            return Ok(None);
        }
        let now = SystemTime::now();
        let mut reused = job.clone();
        reused.state = JobState::Succeeded;
        reused.frames_total = source.frames_total;
        reused.frames_done = source.frames_total;
        reused.output = source.output.clone();
        reused.started_at = Some(now);
        reused.finished_at = Some(now);
        if let Err(refused) = self.board.insert(reused.clone(), work) {
            // Its link goes: nothing of the refused job stays.
            self.outputs.remove(job.id, extension);
            return Err(refused);
        }
        self.metrics.render_cache_hits.inc();
        tracing::info!(job_id = %job.id, template_id = %job.template_id, source_job_id = %source.id, "job reuses the output of an identical request");
        Ok(Some(reused))
    }
}
