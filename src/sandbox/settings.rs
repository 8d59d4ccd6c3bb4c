//! The render workers' settings: how many worker processes render at once, how many wait
//! ready ([`super::spare`]), the address space of each and the program they run. Read by the
//! scheduler that runs them; flattened into `serve`'s flags.

use std::path::PathBuf;

/// Render workers started ahead of their job: a job taken by one skips the process start
/// (30–50 ms of loading shared libraries, most of a small job's time). Spares are forked from
/// the worker zygote (~1 ms), but while a zygote is being replaced they are started by exec,
/// which takes longer than a small job to render: a second spare keeps jobs that come back to
/// back finding one ready (`./dev bench-latency`). Each holds ~12 MiB of private memory.
pub(crate) const DEFAULT_SPARE_WORKERS: u8 = 2;
/// Most spare workers: beyond this they only hold memory.
pub(crate) const MAX_SPARE_WORKERS: u8 = 4;

/// The render worker processes, from the flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RenderWorkerSettings {
    /// Renders running at once, each in its own worker process [default: half the cores, at
    /// least 1].
    #[arg(long, env = "LOTTIE_RENDER_WORKERS", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: Option<u16>,
    /// Render workers started ahead of their job (0 to 4), sandboxed and waiting on stdin with
    /// their libraries loaded, so a small job does not wait for a process to start. Each
    /// still runs one job and exits; the next spare starts as one is taken.
    #[arg(long, env = "LOTTIE_RENDER_SPARE_WORKERS", default_value_t = DEFAULT_SPARE_WORKERS, value_parser = clap::value_parser!(u8).range(0..=MAX_SPARE_WORKERS as i64))]
    pub spare_workers: u8,
    /// Address space of one worker process, MiB.
    #[arg(long, env = "LOTTIE_RENDER_WORKER_MEMORY_MB", default_value_t = crate::sandbox::DEFAULT_WORKER_MEMORY_BYTES / (1024 * 1024), value_parser = clap::value_parser!(u64).range(64..))]
    pub worker_memory_mb: u64,
    /// The program run as `worker` for each render [default: this executable].
    #[arg(long, env = "LOTTIE_RENDER_WORKER_EXECUTABLE", hide = true)]
    pub worker_executable: Option<PathBuf>,
}

impl Default for RenderWorkerSettings {
    fn default() -> RenderWorkerSettings {
        RenderWorkerSettings {
            workers: None,
            spare_workers: DEFAULT_SPARE_WORKERS,
            worker_memory_mb: super::DEFAULT_WORKER_MEMORY_BYTES / (1024 * 1024),
            worker_executable: None,
        }
    }
}

impl RenderWorkerSettings {
    /// Renders at once: the flag's, else half the cores, at least one.
    pub(crate) fn worker_count(&self) -> usize {
        match self.workers {
            Some(workers) => usize::from(workers),
            None => (std::thread::available_parallelism().map_or(1, usize::from) / 2).max(1),
        }
    }

    /// The address space of one worker, bytes.
    pub(crate) fn worker_memory_bytes(&self) -> u64 {
        self.worker_memory_mb.saturating_mul(1024 * 1024)
    }
}
