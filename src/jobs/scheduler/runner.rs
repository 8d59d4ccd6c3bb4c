//! The runner: `workers` worker loops each take the next job (from this process's queue,
//! or with shared jobs from the shared queue, [`shared_loops`]) and render it in a fresh
//! `lottie-render worker` process (the sandbox) on a blocking thread, retried once on a
//! fresh worker after a crash, publishing progress on the board as the worker reports it;
//! what the end of a render means is [`crate::jobs::outcome`]'s decision, applied here.

mod shared_loops;

use super::{Mode, SchedulerSettings};
use crate::error::ErrorClass;
use crate::jobs::local::{LocalJobs, MIN_RETRY_AFTER};
use crate::jobs::model::{Job, JobFailure, JobState, RenderWork};
use crate::jobs::outcome::{self, quarantined_failure, shutdown_failure, Circumstances, Decision};
use crate::jobs::queue::StartedJob;
use crate::jobs::Fingerprint;
use crate::metrics::FormatLabels;
use crate::reason::Reason;
use crate::sandbox::protocol::{WorkerEvent, WorkerJob};
use crate::sandbox::spare::{SpareSettings, SpareWorkers};
use crate::sandbox::{self, CancelToken, FailureKind, SandboxSettings, WorkerFailure, WorkerRun};
use crate::storage::pins::TemplatePin;
use crate::storage::POSTER_EXTENSION;
use crate::sync::lock;
use crate::telemetry::traces::{RenderSpan, Tracing};
use crate::telemetry::worker_spans::MAX_WORKER_SPANS;
use opentelemetry::KeyValue;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use uuid::Uuid;

#[derive(Debug)]
pub(super) struct Runner {
    local: Arc<LocalJobs>,
    /// Where the loops take jobs from, and where quarantines and retry delays go.
    mode: Mode,
    /// The `lottie-render worker` executable and the memory limit of each worker.
    executable: PathBuf,
    worker_memory_bytes: u64,
    /// Where render spans go.
    tracing: Tracing,
    /// The workers started ahead of the next jobs, when enabled.
    spares: Option<Arc<SpareWorkers>>,
    /// Past the shutdown grace period: renders still running are cancelled, retryable.
    shutting_down: AtomicBool,
    loops: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Runner {
    /// Starts the spare workers and `local.workers` worker loops on the current runtime.
    pub(super) fn start(
        local: Arc<LocalJobs>,
        mode: Mode,
        settings: SchedulerSettings,
    ) -> Arc<Runner> {
        let workers = local.workers;
        let spares = (settings.spare_workers > 0).then(|| {
            SpareWorkers::start(
                SpareSettings {
                    executable: settings.executable.clone(),
                    memory_bytes: settings.worker_memory_bytes,
                    count: settings.spare_workers,
                },
                local.metrics.clone(),
            )
        });
        let runner = Arc::new(Runner {
            local,
            mode,
            executable: settings.executable,
            worker_memory_bytes: settings.worker_memory_bytes,
            tracing: settings.tracing,
            spares,
            shutting_down: AtomicBool::new(false),
            loops: Mutex::new(Vec::new()),
        });
        let loops = (0..workers)
            .map(|_| match &runner.mode {
                Mode::Local => tokio::spawn(runner.clone().worker_loop()),
                Mode::Shared(shared) => {
                    tokio::spawn(runner.clone().shared_worker_loop(shared.clone()))
                }
            })
            .collect();
        *lock(&runner.loops) = loops;
        runner
    }

    /// No job will come for a spare.
    pub(super) fn close_spares(&self) {
        if let Some(spares) = &self.spares {
            spares.close();
        }
    }

    /// Waits for the worker loops (the queue is closed) for `grace`, then cancels the renders
    /// still running (retryable) and waits for them; returns when every worker is gone.
    pub(super) async fn stop(&self, grace: Duration) {
        let loops = std::mem::take(&mut *lock(&self.loops));
        let mut all = futures_util::future::join_all(loops);
        if tokio::time::timeout(grace, &mut all).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs_f64(),
                "renders still running after the shutdown grace period; cancelling them"
            );
            self.shutting_down.store(true, Ordering::SeqCst);
            for token in self.local.board.running_cancel_tokens() {
                token.cancel();
            }
            all.await;
        }
        // Every worker has ended: the thread that started the spares (their parent, for
        // the kernel's parent-death signal) may go.
        if let Some(spares) = &self.spares {
            spares.stop();
        }
    }

    /// One worker loop: the next queued job, rendered to its end, until the queue closes.
    pub(super) async fn worker_loop(self: Arc<Self>) {
        while let Some(started) = self.local.queue.pop().await {
            let id = started.id;
            self.local
                .metrics
                .queue_depth
                .set(self.local.queue.len() as i64);
            let runner = self.clone();
            // The job's tenant slot goes with it: freed as the job ends (or its runner panics).
            let ran = tokio::task::spawn_blocking(move || runner.run_job(id, Some(started))).await;
            if let Err(error) = ran {
                self.runner_panicked(id, error);
            }
        }
    }

    /// A bug of ours in run_job: the job must not stay RUNNING for ever.
    pub(super) fn runner_panicked(&self, id: Uuid, error: tokio::task::JoinError) {
        let template_id = self
            .local
            .board
            .get(id)
            .map(|job| job.template_id.to_string());
        tracing::error!(job_id = %id, template_id = template_id.as_deref().unwrap_or("-"), %error, "the job runner panicked");
        let failure = JobFailure {
            reason: Reason::Internal,
            message: "internal error; it has been logged".into(),
            retryable: true,
            retry_after: Some(MIN_RETRY_AFTER),
        };
        let mut ended_here = false;
        self.local.board.update(id, |job| {
            ended_here = !job.state.is_terminal();
            job.finish(JobState::Failed, Some(failure.clone()));
            true
        });
        // Counted like any failure (a job that had ended already was counted then): the
        // render-success SLO sees the service's own bugs.
        if ended_here {
            self.local
                .count_finished(JobState::Failed, Some(&failure), None);
        }
    }

    /// Runs job `id` to a terminal state (blocking: waits for worker processes). Its tenant's
    /// slot of the in-process queue (`slot`, none for a job of the shared queue) is given back
    /// before a rendered job is seen to end, so a caller that saw it end may submit again at
    /// once.
    pub(super) fn run_job(&self, id: Uuid, slot: Option<StartedJob>) {
        let Some((work, cancel)) = self.local.board.work(id) else {
            return;
        };
        let Some(job) = self.local.board.update(id, |job| {
            if job.state != JobState::Queued {
                return false;
            }
            if cancel.is_cancelled() {
                // Cancelled between leaving the queue and starting: nothing to spawn.
                job.finish(JobState::Cancelled, None);
                return true;
            }
            if self.local.quarantine.contains(&job.fingerprint) {
                // An identical request crashed twice while this one waited.
                job.finish(JobState::Failed, Some(quarantined_failure()));
                return true;
            }
            job.state = JobState::Running;
            job.started_at = Some(SystemTime::now());
            true
        }) else {
            return;
        };
        if job.state.is_terminal() {
            self.local
                .count_finished(job.state, job.error.as_ref(), None);
            tracing::info!(job_id = %id, template_id = %job.template_id, state = job.state.label(), "job ended before its render started");
            return;
        }
        if job.state != JobState::Running {
            return;
        }
        if let Some(waited) = job
            .started_at
            .and_then(|started| started.duration_since(job.created_at).ok())
        {
            self.local
                .metrics
                .queue_wait_seconds
                .observe(waited.as_secs_f64());
        }
        let span = tracing::info_span!("job", job_id = %id, template_id = %job.template_id);
        let _entered = span.enter();
        tracing::info!(frames_total = job.frames_total, "render started");
        let mut render_span = self.tracing.render_span(work.trace_parent.as_ref(), || {
            vec![
                KeyValue::new("job.id", id.to_string()),
                KeyValue::new("template.id", job.template_id.to_string()),
                KeyValue::new("output.format", work.output.format.extension()),
                KeyValue::new("frames", i64::from(job.frames_total)),
            ]
        });
        self.local.metrics.jobs_running.inc();
        self.local.metrics.renders_started.inc();
        let started = Instant::now();
        let (run, attempts) = self.run_attempts(id, &job.fingerprint, &work, &cancel, &render_span);
        let (state, error) = self.conclude(&job, &work, run, attempts, &cancel);
        drop(slot);
        render_span.set_attribute(KeyValue::new("job.state", state.label()));
        render_span.set_attribute(KeyValue::new("attempts", i64::from(attempts)));
        render_span.end(error.as_ref().map(|error| error.reason.as_str()));
        if outcome::handed_back(
            job.reclaimable,
            error.as_ref(),
            self.shutting_down.load(Ordering::SeqCst),
        ) {
            // A job of the shared queue stopped by this instance's shutdown does not end: the
            // worker loop hands it back (its record QUEUED again, its entry at the front of
            // the queue) for another instance; jobs following it here end CANCELLED,
            // retryable.
            self.local
                .board
                .remove_refused(id, JobState::Cancelled, &shutdown_failure());
            self.local.metrics.jobs_running.dec();
            tracing::info!(
                seconds = started.elapsed().as_secs_f64(),
                "render stopped by shutdown; its job goes back to the shared queue"
            );
            return;
        }
        let tenant = job.tenant.clone();
        let job = self.local.board.update(id, |job| {
            if state == JobState::Succeeded {
                job.frames_done = job.frames_total;
            }
            job.finish(state, error.clone());
            true
        });
        if state == JobState::Succeeded {
            // Jobs that joined between the first linking and the update.
            self.local
                .link_followers(id, work.output.format.extension());
        }
        self.local.metrics.jobs_running.dec();
        let seconds = started.elapsed().as_secs_f64();
        self.local
            .count_finished(state, error.as_ref(), Some(seconds));
        self.local.metrics.tenant_rendered(tenant.as_str(), seconds);
        if state != JobState::Cancelled {
            self.local.record_job_seconds(seconds);
        }
        match (&state, &error, job) {
            (JobState::Succeeded, _, Some(job)) => tracing::info!(
                seconds,
                attempts,
                size_bytes = job.output.as_ref().map_or(0, |o| o.size_bytes),
                "render succeeded"
            ),
            (_, Some(error), _) => tracing::warn!(
                seconds,
                attempts,
                reason = %error.reason,
                retryable = error.retryable,
                message = %error.message,
                "render ended without output"
            ),
            _ => tracing::info!(seconds, attempts, state = state.label(), "render ended"),
        }
    }

    /// Worker runs until one does not crash or the attempts are used up; the spans each
    /// worker reports are exported under `render_span`.
    pub(super) fn run_attempts(
        &self,
        id: Uuid,
        fingerprint: &Fingerprint,
        work: &RenderWork,
        cancel: &CancelToken,
        render_span: &RenderSpan,
    ) -> (WorkerRun, u32) {
        let extension = work.output.format.extension();
        // The worker has no network: its inputs are staged on this instance's disk first,
        // and removed when the runs are over.
        let staged = match work.pin.as_deref().map(TemplatePin::stage) {
            Some(Ok(staged)) => staged,
            Some(Err(error)) => return (staging_failed(error.to_string()), 1),
            None => return (staging_failed("the job has no template files".into()), 1),
        };
        let job = WorkerJob {
            template_path: staged.template_path.clone(),
            modifications: work.modifications.clone(),
            output: work.output,
            output_path: self.local.outputs.partial_path(id, extension),
            poster_path: work
                .output
                .poster
                .map(|_| self.local.outputs.partial_path(id, POSTER_EXTENSION)),
            threads: 0,
            fonts: staged.fonts.clone(),
            images: staged.images.clone(),
            animation: work.animation.clone(),
            traceparent: render_span.traceparent(),
        };
        let settings = SandboxSettings {
            executable: self.executable.clone(),
            memory_bytes: self.worker_memory_bytes,
            deadline: work.deadline,
        };
        let mut attempt = 1;
        loop {
            let mut spans = Vec::new();
            let mut on_event = |event: &WorkerEvent| match event {
                WorkerEvent::Span(span) if spans.len() < MAX_WORKER_SPANS => {
                    spans.push(span.clone());
                }
                WorkerEvent::Span(_) => {}
                _ => self.publish_progress(id, event),
            };
            // A retry after a crash runs on a worker started for it, as the first run may
            // have failed for the spare's sake.
            let spare = match (&self.spares, attempt) {
                (Some(spares), 1) => spares.take(),
                _ => None,
            };
            let run = sandbox::run_worker_on(spare, &job, &settings, cancel, &mut on_event);
            if run.on_spare {
                self.local.metrics.spare_worker_hits.inc();
            } else if !matches!(&run.result, Err(failure) if failure.kind == FailureKind::SpawnFailed)
            {
                self.local.metrics.workers_started.inc();
            }
            render_span.export_worker_spans(&spans);
            if outcome::crashed(&run.result) {
                self.local.metrics.worker_crashes.inc();
                if let Err(failure) = &run.result {
                    tracing::warn!(attempt, message = %failure.message, "the worker crashed");
                }
            }
            if !outcome::runs_again(
                &run.result,
                attempt,
                cancel.is_cancelled(),
                self.local.quarantine.contains(fingerprint),
            ) {
                return (run, attempt);
            }
            attempt += 1;
            self.local.board.update(id, |job| {
                job.frames_done = 0;
                true
            });
        }
    }

    /// The terminal state and error of a finished worker run ([`outcome::decide`]), applied:
    /// the output stored and given to the followers, or the fingerprint quarantined.
    pub(super) fn conclude(
        &self,
        job: &Job,
        work: &RenderWork,
        run: WorkerRun,
        attempts: u32,
        cancel: &CancelToken,
    ) -> (JobState, Option<JobFailure>) {
        let circumstances = Circumstances {
            attempts,
            cancelled: cancel.is_cancelled(),
            shutting_down: self.shutting_down.load(Ordering::SeqCst),
            retry_after: self.mode.queue_retry_after(&self.local),
        };
        match outcome::decide(run.result, &circumstances) {
            Decision::StoreOutput(output) => {
                let extension = work.output.format.extension();
                if let Err(error) = self.local.outputs.commit(job.id, extension) {
                    self.local.outputs.remove(job.id, extension);
                    return (JobState::Failed, Some(outcome::storage_failure(error)));
                }
                self.local.link_followers(job.id, extension);
                let fps = f64::from(output.frame_count) / run.wall.as_secs_f64().max(1e-3);
                self.local
                    .metrics
                    .frames_per_second
                    .get_or_create(&FormatLabels {
                        format: extension.to_owned(),
                    })
                    .observe(fps);
                self.local
                    .metrics
                    .render_duration_seconds
                    .get_or_create(&FormatLabels {
                        format: extension.to_owned(),
                    })
                    .observe(run.wall.as_secs_f64());
                self.local
                    .metrics
                    .frames_rendered
                    .inc_by(u64::from(output.frame_count));
                self.local.board.update(job.id, |job| {
                    job.output = Some(output);
                    false
                });
                (JobState::Succeeded, None)
            }
            Decision::Ends {
                state,
                failure,
                quarantine,
            } => {
                if let Some(why) = quarantine {
                    self.quarantine_fingerprint(job, why);
                }
                (state, failure)
            }
        }
    }

    /// Quarantines `job`'s fingerprint here and, with shared jobs, for every instance.
    fn quarantine_fingerprint(&self, job: &Job, why: &'static str) {
        let quarantined = self.local.quarantine.add(job.fingerprint.clone());
        if let Mode::Shared(shared) = &self.mode {
            shared.quarantine(&job.fingerprint);
        }
        self.local
            .metrics
            .quarantined_fingerprints
            .set(quarantined as i64);
        tracing::error!(fingerprint = %job.fingerprint, quarantined, "{why}");
    }

    /// Progress on the board: a published change per whole percent (watchers are promised
    /// at least one every 5%).
    pub(super) fn publish_progress(&self, id: Uuid, event: &WorkerEvent) {
        let (done, total) = match event {
            WorkerEvent::Started { frames_total } => (0, *frames_total),
            WorkerEvent::Progress {
                frames_done,
                frames_total,
            } => (*frames_done, *frames_total),
            _ => return,
        };
        self.local.board.update(id, |job| {
            let before = percent(job.frames_done, job.frames_total);
            let changed_total = job.frames_total != total;
            job.frames_done = done;
            job.frames_total = total;
            changed_total || percent(done, total) != before
        });
    }
}

/// The run of a job whose template files could not be staged: the store failed, so the job
/// fails retryable (STORAGE_UNAVAILABLE) without a worker.
fn staging_failed(message: String) -> WorkerRun {
    WorkerRun {
        result: Err(WorkerFailure {
            kind: FailureKind::Reported,
            class: ErrorClass::Transient,
            reason: Reason::StorageUnavailable,
            message: format!("cannot stage the template's files: {message}"),
        }),
        usage: Default::default(),
        wall: std::time::Duration::ZERO,
        on_spare: false,
    }
}

fn percent(done: u32, total: u32) -> u64 {
    if total == 0 {
        0
    } else {
        u64::from(done) * 100 / u64::from(total)
    }
}
