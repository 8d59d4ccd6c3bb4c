//! Which render a new job joins, with shared jobs. The render index in Redis names the job
//! rendering each fingerprint: a new job leads, follows a live render (here or on another
//! instance), starts from a succeeded one's output, or takes over a failed one's
//! fingerprint. A leading job is queued in the shared queue.

use super::{RenderClaim, Shared};
use crate::jobs::local::{off_runtime, SubmitRefused};
use crate::jobs::model::{Job, JobState, RenderWork};
use crate::jobs::queue::PushRefused;
use std::sync::Arc;
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

impl Shared {
    /// Adds a new job: through the render index (lead, follow a render here or on another
    /// instance, reuse its output, or take its fingerprint over), a leading job in the
    /// shared queue. On refusal the job is not kept.
    ///
    /// Refused because the shared records failed, the job may still be half-shared: its
    /// record published (queued, owned by this live instance) and the render index naming
    /// it, though nobody will ever run it. A retry (the caller's key is freed) would then
    /// follow that record until the silence limit of [`super::following`]; so it is ended
    /// as failed and taken out of the render index ([`Shared::abandon`]).
    pub(crate) async fn submit(
        self: &Arc<Self>,
        job: Job,
        work: RenderWork,
    ) -> Result<Job, SubmitRefused> {
        let mut abandoned = job.clone();
        abandoned.owner = Some(self.records.instance());
        let submitted = self.submit_once(job, work).await;
        if let Err(SubmitRefused::Shared(error)) = &submitted {
            self.abandon(abandoned, error.to_string());
        }
        submitted
    }

    async fn submit_once(
        self: &Arc<Self>,
        mut job: Job,
        work: RenderWork,
    ) -> Result<Job, SubmitRefused> {
        let tenant = job.tenant.clone();
        let work = Arc::new(work);
        job.owner = Some(self.records.instance());
        // Nothing goes to Redis before the job is admitted: its record is shared only once
        // the render index may name it (it leads or takes a fingerprint over), and a job the
        // queue would refuse is refused before that. A follower's or a reuser's record is
        // written by the board once it is admitted, and flushed before its answer.
        let mut record_shared = false;
        loop {
            let leader = match self.records.render_of(&job.fingerprint).await? {
                Some(leader) if leader == job.id => break,
                Some(leader) => leader,
                None => {
                    if let Some(refused) = self.refusal_before_leading(&tenant).await? {
                        self.local.count_tenant_refusal(&tenant, refused);
                        return Err(SubmitRefused::Queue(refused));
                    }
                    self.share_before_leading(&job, &mut record_shared).await?;
                    match self.records.claim_render(&job.fingerprint, job.id).await? {
                        RenderClaim::Leads => break,
                        RenderClaim::Existing(leader) if leader == job.id => break,
                        RenderClaim::Existing(leader) => leader,
                    }
                }
            };
            match self.join(&job, &work, leader, &mut record_shared).await? {
                Step::Answer(answer) => return *answer,
                Step::Leads => break,
                Step::Again => {}
            }
        }
        // It leads, in the queue every instance reads.
        self.enqueue(job, work).await
    }

    /// What `job` does about `leader`, the job the render index names. On this instance's
    /// board, the board decides (follow a live render, reuse a succeeded one); one that
    /// ended or whose output is gone is taken over. Elsewhere: follow its render on another
    /// instance, reuse its output, or, when it failed, was cancelled, expired or was evicted,
    /// name a job of this instance in its place or take the fingerprint over.
    async fn join(
        self: &Arc<Self>,
        job: &Job,
        work: &Arc<RenderWork>,
        leader: Uuid,
        record_shared: &mut bool,
    ) -> Result<Step, SubmitRefused> {
        if let Some(local) = self.local.board.get(leader) {
            if !matches!(local.state, JobState::Failed | JobState::Cancelled) {
                let (local, copy, work_copy) = (self.local.clone(), job.clone(), work.clone());
                let joined = off_runtime(move || local.join_render(&copy, work_copy)).await?;
                // None: it ended (or its output is gone) meanwhile: take it over below.
                if let Some(joined) = joined {
                    return Ok(self.answer(job, joined, *record_shared).await);
                }
            }
            return self.take_over(job, leader, record_shared).await;
        }
        // A job evicted here is gone, even while its record is still to be removed. Asked
        // before the record is read: the writer of shared records removes the record and
        // only then tells the board it may forget the eviction, so asked after, a read just
        // before the removal would find the record with the eviction forgotten already, and
        // the job would reuse an output removed with it: it would fail and render again.
        let evicted_here = self.local.evicted_here(leader);
        let remote = self.records.get(leader).await?.filter(|_| !evicted_here);
        match remote {
            Some(remote) if remote.state == JobState::Succeeded => {
                let (local, copy, work_copy) = (self.local.clone(), job.clone(), work.clone());
                let reused = off_runtime(move || local.reuse(&copy, work_copy, &remote)).await?;
                // Ok(None): its output is gone: render anew.
                if let Some(reused) = reused.transpose() {
                    return Ok(self.answer(job, reused, *record_shared).await);
                }
                self.share_before_leading(job, record_shared).await?;
                self.records
                    .replace_render(&job.fingerprint, leader, job.id)
                    .await?;
                Ok(Step::Again)
            }
            Some(remote) if !remote.state.is_terminal() => {
                let followed = self.follow_remote(job.clone(), work.clone(), remote);
                Ok(self.answer(job, followed, *record_shared).await)
            }
            // Failed, cancelled, expired or evicted: a job of this instance that renders the
            // fingerprint or reused its output (the newest reuse stands for an evicted render
            // on the board) is named in its place; else the first to take the fingerprint
            // over renders it.
            _ => {
                if let Some(local) = self
                    .local
                    .board
                    .render_of(&job.fingerprint)
                    .filter(|local| *local != leader)
                {
                    self.records
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
        self.share_before_leading(job, record_shared).await?;
        Ok(
            if self
                .records
                .replace_render(&job.fingerprint, leader, job.id)
                .await?
            {
                Step::Leads
            } else {
                Step::Again
            },
        )
    }

    /// The answer of `job` that joined a render (or reused its output): the job, or a
    /// refusal by the queue or the jobs kept, counted for its tenant and, once its record
    /// was shared, ended there too.
    async fn answer(
        &self,
        job: &Job,
        joined: Result<Job, PushRefused>,
        record_shared: bool,
    ) -> Step {
        let refused = match joined {
            Ok(joined) => {
                // Its record is written by the board's replication, which would reach Redis
                // after this answer: any instance the caller asks next must know the job
                // (it answered NOT_FOUND, not to be retried, meanwhile). A leader's record
                // is written with its queue entry, before its answer.
                self.flush().await;
                return Step::Answer(Box::new(Ok(joined)));
            }
            Err(refused) => refused,
        };
        self.local.count_tenant_refusal(&job.tenant, refused);
        if record_shared {
            self.share_refusal(job, refused).await;
        }
        Step::Answer(Box::new(Err(SubmitRefused::Queue(refused))))
    }

    /// The refusal a leading job would get from the shared queue now (read only): refused
    /// here, a submission leaves nothing in Redis. The queue's script checks again when the
    /// job is added, so a race costs only the short-lived records of a late refusal.
    async fn refusal_before_leading(
        &self,
        tenant: &crate::auth::TenantId,
    ) -> Result<Option<PushRefused>, SubmitRefused> {
        Ok(self
            .queue
            .refusal(tenant, self.local.queue.tenant_jobs(tenant))
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
        if !*record_shared {
            self.records.publish_pending(job).await?;
            *record_shared = true;
        }
        Ok(())
    }
}
