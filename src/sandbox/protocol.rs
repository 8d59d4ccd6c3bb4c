//! The worker protocol, the contract between the parent (service or CLI) and a
//! `lottie-render worker` child process:
//!
//! 1. The parent writes one [`WorkerJob`] as JSON to the child's stdin and closes it.
//! 2. The child writes [`WorkerEvent`]s as NDJSON (one JSON object a line) to stdout:
//!    `started` once, `progress` as frames are encoded, then exactly one of `succeeded`
//!    or `failed`. Human diagnostics go to stderr.
//! 3. The child writes the output file to `output_path` (the parent owns temp naming and the
//!    final rename) and exits with [`exit_code::SUCCESS`], [`exit_code::DETERMINISTIC`]
//!    (the input is at fault: never retry) or [`exit_code::TRANSIENT`] (retry may succeed).
//!    Any other exit, or death by a signal, is a crash, classified by the parent.

use crate::error::ErrorClass;
use crate::render::OutputInfo;
use crate::spec::{Modifications, OutputSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Exit codes (from sysexits.h, so they read the same in shell scripts).
pub mod exit_code {
    pub const SUCCESS: i32 = 0;
    /// EX_DATAERR: the template, a modification or the job itself is invalid.
    pub const DETERMINISTIC: i32 = 65;
    /// EX_TEMPFAIL: resources or infrastructure; retrying may succeed.
    pub const TRANSIENT: i32 = 75;
}

/// One render, as the worker receives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerJob {
    pub template_path: PathBuf,
    #[serde(default)]
    pub modifications: Modifications,
    pub output: OutputSpec,
    pub output_path: PathBuf,
    /// Render threads; 0 = one per available core.
    #[serde(default)]
    pub threads: usize,
    /// Fonts for text layers: family → font file (the template's uploaded fonts).
    #[serde(default)]
    pub fonts: BTreeMap<String, PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    Started {
        frames_total: u32,
    },
    Progress {
        frames_done: u32,
        frames_total: u32,
    },
    Succeeded {
        output: OutputInfo,
        /// The worker's own peak RSS (VmHWM), bytes.
        #[serde(default)]
        peak_rss_bytes: Option<u64>,
    },
    Failed {
        class: ErrorClass,
        reason: String,
        message: String,
    },
}
