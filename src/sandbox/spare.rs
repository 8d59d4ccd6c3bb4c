//! Render workers started ahead of their jobs ("spares"), so that a small job does not wait
//! for a process to start and its libraries to load. The spare is an ordinary
//! `lottie-render worker` started by [`worker_command`] with every fence of the sandbox; it
//! blocks reading its job on stdin and has touched no caller data, so it has nothing to
//! confine yet: it confines itself once the job arrives, exactly as a worker started for that
//! job does. A worker still runs one job and exits.
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

use super::spawn::{worker_command, worker_limits};
use super::MAX_DEADLINE;
use crate::metrics::Metrics;
use crate::os;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Child;
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
pub struct SpareWorker {
    pub child: Child,
    /// When it was started (its waiting time is not the job's).
    pub started: Instant,
}

impl SpareWorker {
    /// Its process id, which is also its process group's.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills its process group and reaps it.
    fn kill(mut self) {
        os::kill_process_group(self.child.id());
        let _ = self.child.wait();
    }

    /// True when it has exited (or cannot be asked), i.e. it can no longer take a job.
    fn is_gone(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

/// What a spare is started with: the job-independent part of [`super::SandboxSettings`].
#[derive(Debug, Clone)]
pub struct SpareSettings {
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
    closed: bool,
    stopping: bool,
}

/// The pre-started workers and the thread that keeps them ready.
#[derive(Debug)]
pub struct SpareWorkers {
    state: Mutex<State>,
    changed: Condvar,
    settings: SpareSettings,
    metrics: Arc<Metrics>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl SpareWorkers {
    /// Starts the supervisor, which starts the spares at once.
    pub fn start(settings: SpareSettings, metrics: Arc<Metrics>) -> Arc<SpareWorkers> {
        let spares = Arc::new(SpareWorkers {
            state: Mutex::new(State::default()),
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
    pub fn take(&self) -> Option<SpareWorker> {
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
            self.metrics.spare_worker_deaths.inc();
            tracing::warn!(pid = spare.pid(), "a spare worker died while waiting");
        }
        taken
    }

    /// No more spares: kills the waiting ones. Workers already handed out run on.
    pub fn close(&self) {
        let spares = {
            let mut state = lock(&self.state);
            state.closed = true;
            self.changed.notify_all();
            std::mem::take(&mut state.spares)
        };
        for spare in spares {
            tracing::debug!(pid = spare.pid(), "spare worker stopped");
            spare.kill();
        }
    }

    /// Closes and ends the supervisor thread. Call once every worker taken from here has
    /// ended: they die with the thread that started them.
    pub fn stop(&self) {
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
            let waiting = std::mem::take(&mut state.spares);
            for mut spare in waiting {
                if spare.is_gone() {
                    self.metrics.spare_worker_deaths.inc();
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
            drop(state);
            let started = self.spawn();
            state = lock(&self.state);
            match started {
                Some(spare) if state.closed => spare.kill(),
                Some(spare) => state.spares.push_back(spare),
                None => deaths_in_a_row = deaths_in_a_row.saturating_add(1),
            }
        }
    }

    fn spawn(&self) -> Option<SpareWorker> {
        // The loosest CPU budget: it is lowered to the job's when the job arrives
        // (lowering a limit needs no privilege, raising one would).
        let limits = worker_limits(self.settings.memory_bytes, MAX_DEADLINE);
        match worker_command(&self.settings.executable, ["worker"], limits).spawn() {
            Ok(child) => {
                self.metrics.workers_started.inc();
                tracing::debug!(pid = child.id(), "spare worker started");
                Some(SpareWorker {
                    child,
                    started: Instant::now(),
                })
            }
            Err(error) => {
                tracing::warn!(%error, "cannot start a spare worker");
                None
            }
        }
    }
}

impl Drop for SpareWorkers {
    fn drop(&mut self) {
        for spare in std::mem::take(&mut lock(&self.state).spares) {
            spare.kill();
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
