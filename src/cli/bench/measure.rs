//! How the bench times a piece of work: wall and CPU time of this process, the median of runs.

use crate::os::own_usage;
use std::time::{Duration, Instant};

/// What one run of a piece of work cost.
pub(super) struct Measure {
    pub wall: Duration,
    pub cpu: Duration,
}

pub(super) fn measure<T>(work: impl FnOnce() -> Result<T, String>) -> Result<(T, Measure), String> {
    let (cpu_before, started) = (own_usage().cpu, Instant::now());
    let value = work()?;
    Ok((
        value,
        Measure {
            wall: started.elapsed(),
            cpu: own_usage().cpu.saturating_sub(cpu_before),
        },
    ))
}

/// Runs `run` `times` times; the run with the median wall time.
pub(super) fn median_of(
    times: usize,
    mut run: impl FnMut() -> Result<Measure, String>,
) -> Result<Measure, String> {
    let mut measures = (0..times).map(|_| run()).collect::<Result<Vec<_>, _>>()?;
    measures.sort_by_key(|measure| measure.wall);
    Ok(measures.swap_remove(measures.len() / 2))
}
