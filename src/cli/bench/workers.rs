//! The bench's worker runs. On a spare worker, as the service runs a job: a worker forked from the zygote
//! ahead of its job (libraries loaded, sandbox fences set, waiting on stdin) is handed the job,
//! and the time counts from that moment, as the job's deadline does. A fresh worker (the other
//! worker figure) also pays for the process start and the loading of some 140 libraries,
//! which the service pays ahead of its jobs.

use crate::os::ResourceUsage;
use crate::sandbox::protocol::WorkerJob;
use crate::sandbox::spare::{SpareSettings, SpareWorker, SpareWorkerEvents, SpareWorkers};
use crate::sandbox::{self, CancelToken, SandboxSettings};
use crate::spec::{Modifications, OutputSpec};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the bench waits for the zygote to fork a spare (it loads its libraries once,
/// some 100 ms; a machine too loaded for that gets a clear error).
const SPARE_WAIT: Duration = Duration::from_secs(20);
/// Checks of the forked count while waiting.
const POLL: Duration = Duration::from_millis(10);

/// Counts the spares forked from the zygote: the bench hands its jobs only to those.
#[derive(Debug, Default)]
struct Forks(AtomicUsize);

impl SpareWorkerEvents for Forks {
    fn worker_started(&self) {}
    fn spare_worker_forked(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn spare_worker_died(&self) {}
    fn worker_zygote_started(&self) {}
    fn worker_zygote_died(&self) {}
}

/// One spare kept ready for the bench's runs.
pub(super) struct Spares {
    pool: Arc<SpareWorkers>,
    forks: Arc<Forks>,
    /// Forks counted when the last spare was handed a job.
    forks_used: usize,
    executable: PathBuf,
}

impl Spares {
    pub(super) fn start(executable: PathBuf) -> Spares {
        let forks = Arc::new(Forks::default());
        let settings = SpareSettings {
            executable: executable.clone(),
            memory_bytes: sandbox::DEFAULT_WORKER_MEMORY_BYTES,
            count: 1,
        };
        Spares {
            pool: SpareWorkers::start(settings, forks.clone()),
            forks,
            forks_used: 0,
            executable,
        }
    }

    /// Runs `job` on a spare forked from the zygote: its usage and wall time from the hand-over.
    pub(super) fn run(&mut self, job: &WorkerJob) -> Result<(ResourceUsage, Duration), String> {
        let spare = self.next_forked()?;
        let settings = SandboxSettings {
            executable: self.executable.clone(),
            memory_bytes: sandbox::DEFAULT_WORKER_MEMORY_BYTES,
            deadline: sandbox::MAX_DEADLINE,
        };
        let run = sandbox::run_worker_on(
            Some(spare),
            job,
            &settings,
            &CancelToken::default(),
            &mut |_| {},
        );
        if !run.on_spare {
            return Err("the spare worker could not take the job".to_owned());
        }
        run.result.map_err(|failure| failure.to_string())?;
        Ok((run.usage, run.wall))
    }

    /// The next waiting spare forked from the zygote. One kept waiting at a time: while the
    /// zygote loads, the pool starts its spare by exec, which the bench kills unused.
    fn next_forked(&mut self) -> Result<SpareWorker, String> {
        let started = Instant::now();
        loop {
            let forked = self.forks.0.load(Ordering::SeqCst);
            if let Some(spare) = self.pool.take() {
                if forked > self.forks_used {
                    self.forks_used = forked;
                    return Ok(spare);
                }
                spare.process.kill();
            }
            if started.elapsed() > SPARE_WAIT {
                return Err(format!("no spare worker was forked within {SPARE_WAIT:?}"));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        self.pool.stop();
    }
}

pub(super) fn run_pipeline(
    executable: &Path,
    template_path: PathBuf,
    spec: OutputSpec,
    scratch: &Path,
) -> Result<(ResourceUsage, Duration), String> {
    let job = pipeline_job(template_path, spec, scratch);
    let settings = SandboxSettings {
        executable: executable.to_path_buf(),
        memory_bytes: sandbox::DEFAULT_WORKER_MEMORY_BYTES,
        deadline: sandbox::MAX_DEADLINE,
    };
    let run = sandbox::run_worker(&job, &settings, &CancelToken::default(), &mut |_| {});
    run.result.map_err(|failure| failure.to_string())?;
    Ok((run.usage, run.wall))
}

/// The bench's worker job: `template_path` to `spec`, output in `scratch`, one render
/// thread per core.
pub(super) fn pipeline_job(template_path: PathBuf, spec: OutputSpec, scratch: &Path) -> WorkerJob {
    WorkerJob {
        images: Default::default(),
        template_path,
        modifications: Modifications::default(),
        output: spec,
        output_path: scratch.join(format!("pipeline.{}", spec.format.extension())),
        poster_path: None,
        threads: 0,
        fonts: Default::default(),
        animation: None,
        traceparent: None,
    }
}
