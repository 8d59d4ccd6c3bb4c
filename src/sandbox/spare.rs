//! Render workers started ahead of their jobs ("spares"), so that a small job does not wait
//! for a process to start and its libraries to load. A spare is forked from the zygote
//! ([`super::zygote`], a worker process that loaded the libraries once) or, while there is
//! no zygote, an ordinary `lottie-render worker` started by [`worker_command`]; either way it
//! has every fence of the sandbox, blocks reading its job on stdin and has touched no caller
//! data, so it has nothing to confine yet: it confines itself once the job arrives, exactly
//! as a worker started for that job does. A worker still runs one job and exits.
//!
//! Why a zygote: every job takes a spare, and starting its replacement by exec cost 25–33 ms
//! of CPU (the dynamic loader mapping and relocating some 140 libraries), more than the
//! small job itself (~8 ms of worker CPU); on two cores that bounded jobs in a row at ~22 ms
//! each. A fork of the zygote costs ~1 ms. A zygote that dies (or cannot start, or stops
//! answering) is replaced after a growing delay, as spares are; meanwhile spares are started
//! by exec as before.
//!
//! A supervisor thread owns the spares: it starts [`SpareSettings::count`] of them, replaces
//! one when the scheduler takes it ([`SpareWorkers::take`]) and, with a growing delay, when
//! one dies while waiting; closing ([`SpareWorkers::close`]) kills the waiting spares and
//! starts no other. Starting a worker (loading some 140 shared libraries) takes longer than a
//! small job, so jobs submitted back to back need more than one spare to find one ready. The supervisor
//! thread starts every spare because the kernel's parent-death signal
//! ([`crate::os::apply_in_child`]) follows the thread that started a process: a spare started
//! from a short-lived thread would be killed with it. So the thread lives on until
//! [`SpareWorkers::stop`], after the last worker it started has ended.

use super::spawn::{worker_command, worker_limits, WorkerProcess};
use super::zygote::Zygote;
use super::MAX_DEADLINE;
use crate::os;
use crate::sync::lock;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the supervisor checks that its waiting spare is alive. A dead spare costs
/// nothing until the next job (which then starts a worker of its own), so this only bounds
/// how long a job may find no spare after one died.
const SPARE_CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// Delay before replacing the first spare that died while waiting (or failed to start)…
const FIRST_RESPAWN_DELAY: Duration = Duration::from_millis(100);
/// …doubling with every further death in a row up to this, so that a machine that kills
/// every spare (a broken executable, memory pressure) is not hammered with process starts.
const MAX_RESPAWN_DELAY: Duration = Duration::from_secs(30);

/// A worker process waiting for its job on stdin.
#[derive(Debug)]
pub(crate) struct SpareWorker {
    pub process: WorkerProcess,
    /// When it was started (its waiting time is not the job's).
    pub started: Instant,
}

impl SpareWorker {
    /// Its process id, which is also its process group's.
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Kills its process group and reaps it.
    fn kill(self) {
        self.process.kill();
    }

    /// True when it has exited (or cannot be asked), i.e. it can no longer take a job.
    fn is_gone(&mut self) -> bool {
        self.process.has_exited()
    }
}

/// The zygote the spares are forked from, when one runs, and when the next may be started.
#[derive(Debug)]
struct ZygoteSlot {
    zygote: Option<Zygote>,
    /// Zygotes in a row that died, failed to start or stopped answering.
    failures_in_a_row: u32,
    /// No zygote is started before this (the growing delay after failures).
    next_start: Instant,
}

impl Default for ZygoteSlot {
    fn default() -> ZygoteSlot {
        ZygoteSlot {
            zygote: None,
            failures_in_a_row: 0,
            next_start: Instant::now(),
        }
    }
}

impl ZygoteSlot {
    /// True when there is no zygote and the next may be started.
    fn is_due(&self) -> bool {
        self.zygote.is_none() && Instant::now() >= self.next_start
    }

    /// Notes that the zygote is gone: the next one starts after a growing delay.
    fn failed(&mut self) {
        if let Some(zygote) = self.zygote.take() {
            zygote.kill();
        }
        self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
        self.next_start = Instant::now() + respawn_delay(self.failures_in_a_row);
    }

    /// Checks that the waiting zygote is alive.
    fn check(&mut self, metrics: &dyn SpareWorkerEvents) {
        if let Some(zygote) = self.zygote.as_mut() {
            if zygote.has_exited() {
                metrics.worker_zygote_died();
                tracing::warn!(pid = zygote.pid(), "the worker zygote died; replacing it");
                self.failed();
            }
        }
    }

    fn kill(&mut self) {
        if let Some(zygote) = self.zygote.take() {
            tracing::debug!(pid = zygote.pid(), "worker zygote stopped");
            zygote.kill();
        }
    }
}

/// What a spare is started with: the job-independent part of [`super::SandboxSettings`].
#[derive(Debug, Clone)]
pub(crate) struct SpareSettings {
    /// The `lottie-render` executable to run as `worker`.
    pub executable: PathBuf,
    pub memory_bytes: u64,
    /// Spares kept waiting (at least 1).
    pub count: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Oldest first: the one most likely done loading its libraries.
    spares: VecDeque<SpareWorker>,
    /// A live spare was handed to a job since the supervisor last looked: the run of
    /// deaths is over.
    taken: bool,
    /// Out of the state (None) while the supervisor forks from it.
    zygote: Option<ZygoteSlot>,
    closed: bool,
    stopping: bool,
}

/// The pre-started workers and the thread that keeps them ready.
/// What the pool reports as it goes; the server's metrics count it. A trait here, so that
/// the sandbox does not depend on the metrics module, which sits above it.
pub(crate) trait SpareWorkerEvents: std::fmt::Debug + Send + Sync {
    /// A worker process started, forked or by exec.
    fn worker_started(&self);
    /// A spare forked from the zygote (also a started worker).
    fn spare_worker_forked(&self);
    /// A spare died while it waited.
    fn spare_worker_died(&self);
    fn worker_zygote_started(&self);
    /// The zygote died, failed to fork or failed to start.
    fn worker_zygote_died(&self);
}

#[derive(Debug)]
pub(crate) struct SpareWorkers {
    state: Mutex<State>,
    changed: Condvar,
    settings: SpareSettings,
    metrics: Arc<dyn SpareWorkerEvents>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl SpareWorkers {
    /// Starts the supervisor, which starts the spares at once.
    pub(crate) fn start(
        settings: SpareSettings,
        metrics: Arc<dyn SpareWorkerEvents>,
    ) -> Arc<SpareWorkers> {
        let spares = Arc::new(SpareWorkers {
            state: Mutex::new(State {
                zygote: Some(ZygoteSlot::default()),
                ..State::default()
            }),
            changed: Condvar::new(),
            settings,
            metrics,
            supervisor: Mutex::new(None),
        });
        let supervisor = {
            let spares = spares.clone();
            std::thread::Builder::new()
                .name("spare-worker".into())
                .spawn(move || spares.supervise())
        };
        match supervisor {
            Ok(handle) => *lock(&spares.supervisor) = Some(handle),
            // Jobs then start workers of their own, as without spares.
            Err(error) => {
                tracing::warn!(%error, "cannot start the spare worker thread; workers start with their jobs")
            }
        }
        spares
    }

    /// The oldest waiting spare that is alive, if any; the supervisor starts the next at once.
    pub(crate) fn take(&self) -> Option<SpareWorker> {
        let mut dead = Vec::new();
        let taken = {
            let mut state = lock(&self.state);
            let mut taken = None;
            while let Some(mut spare) = state.spares.pop_front() {
                if spare.is_gone() {
                    dead.push(spare);
                } else {
                    taken = Some(spare);
                    break;
                }
            }
            state.taken |= taken.is_some();
            self.changed.notify_all();
            taken
        };
        for spare in dead {
            self.metrics.spare_worker_died();
            tracing::warn!(pid = spare.pid(), "a spare worker died while waiting");
        }
        taken
    }

    /// No more spares: kills the waiting ones and the zygote. Workers already handed out run
    /// on.
    pub(crate) fn close(&self) {
        let (spares, zygote) = {
            let mut state = lock(&self.state);
            state.closed = true;
            self.changed.notify_all();
            (std::mem::take(&mut state.spares), state.zygote.take())
        };
        // (A zygote out of the state is being forked from: the supervisor kills it on return.)
        if let Some(mut zygote) = zygote {
            zygote.kill();
        }
        for spare in spares {
            tracing::debug!(pid = spare.pid(), "spare worker stopped");
            spare.kill();
        }
    }

    /// Closes and ends the supervisor thread. Call once every worker taken from here has
    /// ended: they die with the thread that started them.
    pub(crate) fn stop(&self) {
        self.close();
        lock(&self.state).stopping = true;
        self.changed.notify_all();
        let supervisor = lock(&self.supervisor).take();
        if let Some(supervisor) = supervisor {
            let _ = supervisor.join();
        }
    }

    /// The supervisor: keeps the spares waiting until closed, then waits to be stopped.
    fn supervise(&self) {
        let mut deaths_in_a_row: u32 = 0;
        let mut state = lock(&self.state);
        loop {
            if state.stopping {
                return;
            }
            if std::mem::take(&mut state.taken) {
                deaths_in_a_row = 0;
            }
            if state.closed {
                state = wait(&self.changed, state, None);
                continue;
            }
            if let Some(zygote) = state.zygote.as_mut() {
                zygote.check(self.metrics.as_ref());
            }
            let waiting = std::mem::take(&mut state.spares);
            for mut spare in waiting {
                if spare.is_gone() {
                    self.metrics.spare_worker_died();
                    tracing::warn!(
                        pid = spare.pid(),
                        "a spare worker died while waiting; replacing it"
                    );
                    deaths_in_a_row = deaths_in_a_row.saturating_add(1);
                } else {
                    state.spares.push_back(spare);
                }
            }
            if state.spares.len() >= self.settings.count.max(1) {
                // Enough spares: a zygote that died is replaced now (once its delay is over),
                // so that the next replacement spare is a fork again.
                if state.zygote.as_ref().is_some_and(ZygoteSlot::is_due) {
                    let mut zygote = state.zygote.take().unwrap_or_default();
                    drop(state);
                    self.start_zygote(&mut zygote);
                    state = lock(&self.state);
                    if state.closed {
                        zygote.kill();
                    }
                    state.zygote = Some(zygote);
                    continue;
                }
                state = wait(&self.changed, state, Some(SPARE_CHECK_INTERVAL));
                continue;
            }
            if deaths_in_a_row > 0 {
                // A backoff that close and stop cut short.
                let until = Instant::now() + respawn_delay(deaths_in_a_row);
                while !state.closed && !state.stopping {
                    let now = Instant::now();
                    if now >= until {
                        break;
                    }
                    state = wait(&self.changed, state, Some(until - now));
                }
                if state.closed || state.stopping {
                    continue;
                }
            }
            let mut zygote = state.zygote.take().unwrap_or_default();
            drop(state);
            let started = self.spawn(&mut zygote);
            state = lock(&self.state);
            if state.closed {
                zygote.kill();
            }
            state.zygote = Some(zygote);
            match started {
                Some(spare) if state.closed => spare.kill(),
                Some(spare) => state.spares.push_back(spare),
                None => deaths_in_a_row = deaths_in_a_row.saturating_add(1),
            }
        }
    }

    /// A new spare: forked from the zygote (started first if there is none and its delay
    /// has passed), else started by exec.
    fn spawn(&self, zygote: &mut ZygoteSlot) -> Option<SpareWorker> {
        let limits = self.spare_limits();
        if let Some(process) = self.fork(zygote) {
            self.metrics.worker_started();
            self.metrics.spare_worker_forked();
            tracing::debug!(pid = process.pid(), "spare worker forked");
            return Some(SpareWorker {
                process,
                started: Instant::now(),
            });
        }
        match worker_command(&self.settings.executable, ["worker"], limits).spawn() {
            Ok(child) => {
                self.metrics.worker_started();
                tracing::debug!(pid = child.id(), "spare worker started");
                Some(SpareWorker {
                    process: WorkerProcess::from(child),
                    started: Instant::now(),
                })
            }
            Err(error) => {
                tracing::warn!(%error, "cannot start a spare worker");
                None
            }
        }
    }

    /// Starts the zygote if there is none and its delay has passed.
    fn start_zygote(&self, slot: &mut ZygoteSlot) {
        if !slot.is_due() {
            return;
        }
        match Zygote::start(&self.settings.executable, self.spare_limits()) {
            Ok(zygote) => {
                self.metrics.worker_zygote_started();
                tracing::debug!(pid = zygote.pid(), "worker zygote started");
                slot.zygote = Some(zygote);
            }
            Err(error) => {
                self.metrics.worker_zygote_died();
                tracing::warn!(%error, "no worker zygote; spare workers are started by exec");
                slot.failed();
            }
        }
    }

    /// A worker forked from the zygote (started first if needed and allowed); None (the
    /// zygote, if any, killed and its replacement delayed) when that fails.
    fn fork(&self, slot: &mut ZygoteSlot) -> Option<WorkerProcess> {
        self.start_zygote(slot);
        let zygote = slot.zygote.as_mut()?;
        match zygote.fork_worker() {
            Ok(process) => {
                slot.failures_in_a_row = 0;
                Some(process)
            }
            Err(error) => {
                self.metrics.worker_zygote_died();
                tracing::warn!(pid = zygote.pid(), %error, "the worker zygote failed; replacing it");
                slot.failed();
                None
            }
        }
    }

    /// The limits of a spare (and of the zygote, whose forks inherit them): the loosest CPU
    /// budget, lowered to the job's when the job arrives (lowering a limit needs no
    /// privilege, raising one would).
    fn spare_limits(&self) -> os::ResourceLimits {
        worker_limits(
            self.settings.memory_bytes,
            super::deadline::cpu_budget_seconds(MAX_DEADLINE),
        )
    }
}

impl Drop for SpareWorkers {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        for spare in std::mem::take(&mut state.spares) {
            spare.kill();
        }
        if let Some(mut zygote) = state.zygote.take() {
            zygote.kill();
        }
    }
}

/// The delay before the next spare after `deaths` in a row.
fn respawn_delay(deaths: u32) -> Duration {
    let doublings = deaths.saturating_sub(1).min(16);
    FIRST_RESPAWN_DELAY
        .saturating_mul(1 << doublings)
        .min(MAX_RESPAWN_DELAY)
}

fn wait<'a>(
    changed: &Condvar,
    state: MutexGuard<'a, State>,
    timeout: Option<Duration>,
) -> MutexGuard<'a, State> {
    match timeout {
        Some(timeout) => {
            changed
                .wait_timeout(state, timeout)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0
        }
        None => changed
            .wait(state)
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_respawn_delay_doubles_from_the_first_and_stops_at_the_maximum() {
        assert_eq!(respawn_delay(1), FIRST_RESPAWN_DELAY);
        assert_eq!(respawn_delay(2), FIRST_RESPAWN_DELAY * 2);
        assert_eq!(respawn_delay(4), FIRST_RESPAWN_DELAY * 8);
        assert_eq!(respawn_delay(1000), MAX_RESPAWN_DELAY);
    }
}
