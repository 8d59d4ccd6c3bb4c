//! `lottie-render worker`: runs one job from stdin under the sandbox protocol
//! (see [`crate::sandbox::protocol`]). Nothing here trusts the job: a malformed one is a
//! deterministic failure like any bad template. Before it parses the template or the fonts,
//! the worker reads them into memory, creates its output file and confines itself to
//! writing that one file ([`crate::sandbox::confine`]: no other file, no network, no new
//! processes). A traced job's steps are timed and reported as `span` events
//! ([`crate::telemetry::worker_spans`]). `--self-test` (hidden) runs the sandbox self-test
//! instead of a job; `--zygote` (hidden) makes this process the zygote that forks spare
//! workers ([`crate::sandbox::zygote`]), each of which then carries on here as a worker.

use crate::error::{Classified, ErrorClass};
use crate::lottie::lowering::text::fonts::FontBook;
use crate::os::PeakRssProbe;
use crate::reason::Reason;
use crate::render::{self, RenderError};
use crate::sandbox::confine::{confine, FilePolicy};
use crate::sandbox::protocol::{
    bounded_failure_message, exit_code, ReportedFailure, WorkerEvent, WorkerJob,
};
use crate::sandbox::zygote::Served;
use crate::telemetry::worker_spans::{
    OpenSpan, SpanValue, WorkerSpan, WorkerTrace, PROCESS_ATTRIBUTE, WORKER_PROCESS,
};
use clap::Args;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

/// Largest job document read from stdin; a job is a few hundred bytes plus modifications.
const MAX_JOB_BYTES: u64 = 1024 * 1024;
/// Progress lines are written at least this often while frames complete…
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// …and whenever progress crosses a step of 1/PROGRESS_STEPS (5%: watchers of a job are
/// promised an update at least every 5%), and at the last frame.
const PROGRESS_STEPS: u64 = 20;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Try everything the sandbox forbids and report what was refused (JSON on stdout).
    #[arg(long, hide = true)]
    pub self_test: bool,
    /// Fork workers on request instead of running a job (the server's zygote).
    #[arg(long, hide = true, conflicts_with = "self_test")]
    pub zygote: bool,
}

pub(crate) fn run(args: WorkerArgs) -> ExitCode {
    if args.self_test {
        return crate::sandbox::self_test::worker_main();
    }
    if args.zygote {
        match crate::sandbox::zygote::serve() {
            // A worker forked for a job that has yet to come: carry on as any worker.
            Served::Forked => {}
            Served::Ended(code) => return code,
        }
    }
    // Opened before confinement, which refuses /proc.
    let mut peak_rss = PeakRssProbe::open();
    let mut steps = Steps::default();
    let outcome = read_job().and_then(|job| {
        // The run starts with its job: a spare worker ([`crate::sandbox::spare`]) was
        // started long before, and waiting is not the job's time.
        let began = SystemTime::now();
        steps.trace = WorkerTrace::from_traceparent(job.traceparent.as_deref());
        steps.run = steps
            .trace
            .as_ref()
            .map(|trace| trace.start_at(None, began));
        steps.format = Some(job.output.format.extension());
        execute(&job, &mut steps)
    });
    // The spans first: the parent reads the run's outcome from the last event.
    let failure_reason = outcome.as_ref().err().map(|failure| failure.reason);
    for span in steps.finish(failure_reason) {
        emit(&WorkerEvent::Span(span));
    }
    let code = match outcome {
        Ok(output) => {
            emit(&WorkerEvent::Succeeded {
                output,
                peak_rss_bytes: peak_rss.as_mut().and_then(PeakRssProbe::read),
            });
            exit_code::SUCCESS
        }
        Err(failure) => {
            let class = failure.class;
            emit(&WorkerEvent::Failed(ReportedFailure {
                class: failure.class,
                reason: failure.reason,
                message: bounded_failure_message(failure.message),
            }));
            exit_code::of_failure(class)
        }
    };
    // Everything the parent needs is on disk and flushed on stdout; the parent sees the job
    // end when this process does, so the libraries' finalizers are skipped.
    crate::os::exit_immediately(code)
}

/// The timed steps of this run, when its job is traced: the run itself (from the job's
/// arrival on stdin) and its steps as children.
#[derive(Default)]
struct Steps {
    trace: Option<WorkerTrace>,
    run: Option<OpenSpan>,
    format: Option<&'static str>,
    frames: Option<u32>,
}

impl Steps {
    /// Starts a step under the run (nothing when untraced).
    fn start(&self) -> Option<OpenSpan> {
        let trace = self.trace.as_ref()?;
        Some(trace.start(self.run.as_ref()))
    }

    /// Ends a step started by [`Steps::start`].
    fn end(
        &mut self,
        step: Option<OpenSpan>,
        name: &str,
        attributes: Vec<(&'static str, SpanValue)>,
        failed: bool,
    ) {
        if let (Some(trace), Some(step)) = (self.trace.as_mut(), step) {
            trace.finish(step, name, attributes, failed);
        }
    }

    /// Ends the run's span (marked as the worker's, with its pid) and answers every span.
    fn finish(mut self, failure_reason: Option<Reason>) -> Vec<WorkerSpan> {
        let (Some(mut trace), Some(run)) = (self.trace.take(), self.run.take()) else {
            return Vec::new();
        };
        let mut attributes = vec![
            (PROCESS_ATTRIBUTE, SpanValue::Text(WORKER_PROCESS.into())),
            ("process.pid", SpanValue::Int(i64::from(std::process::id()))),
        ];
        if let Some(format) = self.format {
            attributes.push(("output.format", SpanValue::Text(format.into())));
        }
        if let Some(frames) = self.frames {
            attributes.push(("frames", SpanValue::Int(i64::from(frames))));
        }
        if let Some(reason) = failure_reason {
            attributes.push(("error.reason", SpanValue::Text(reason.as_str().into())));
        }
        trace.finish(run, "worker", attributes, failure_reason.is_some());
        trace.into_spans()
    }
}

struct Failure {
    class: ErrorClass,
    reason: Reason,
    message: String,
}

impl From<RenderError> for Failure {
    fn from(error: RenderError) -> Failure {
        Failure {
            class: error.class(),
            reason: error.reason(),
            message: error.to_string(),
        }
    }
}

fn read_job() -> Result<WorkerJob, Failure> {
    let mut input = Vec::new();
    let invalid = |message: String| Failure {
        class: ErrorClass::Deterministic,
        reason: Reason::JobInvalid,
        message,
    };
    std::io::stdin()
        .take(MAX_JOB_BYTES + 1)
        .read_to_end(&mut input)
        .map_err(|error| invalid(format!("cannot read the job: {error}")))?;
    if input.len() as u64 > MAX_JOB_BYTES {
        return Err(invalid(format!("job is larger than {MAX_JOB_BYTES} bytes")));
    }
    serde_json::from_slice(&input).map_err(|error| invalid(format!("job is not valid: {error}")))
}

fn execute(job: &WorkerJob, steps: &mut Steps) -> Result<render::OutputInfo, Failure> {
    let step = steps.start();
    let inputs = read_inputs_and_confine(job);
    steps.end(step, "read_inputs", Vec::new(), inputs.is_err());
    let Inputs {
        template,
        fonts,
        images,
        threads,
    } = inputs?;
    let step = steps.start();
    let prepared = render::prepare_with_images(render::RenderInput {
        template: &template,
        animation: job.animation.as_deref(),
        modifications: &job.modifications,
        images: &images,
        output: job.output,
        fonts: &fonts,
    });
    steps.end(step, "prepare", Vec::new(), prepared.is_err());
    let prepared = prepared?;
    steps.frames = Some(prepared.frame_count);
    emit(&WorkerEvent::Started {
        frames_total: prepared.frame_count,
    });
    let mut last_report = Instant::now();
    let mut last_step = 0;
    let step = steps.start();
    let output = render::run(&prepared, &job.output_path, threads, &mut |done, total| {
        let step = u64::from(done) * PROGRESS_STEPS / u64::from(total.max(1));
        if done == total || step != last_step || last_report.elapsed() >= PROGRESS_INTERVAL {
            last_report = Instant::now();
            last_step = step;
            emit(&WorkerEvent::Progress {
                frames_done: done,
                frames_total: total,
            });
        }
    });
    let attributes = vec![
        ("frames", SpanValue::Int(i64::from(prepared.frame_count))),
        (
            "threads",
            SpanValue::Int(i64::try_from(threads).unwrap_or(i64::MAX)),
        ),
    ];
    steps.end(step, "render_encode", attributes, output.is_err());
    let mut output = output?;
    if let Some(path) = poster_path(job) {
        let step = steps.start();
        let poster = render::write_poster(&prepared, path);
        steps.end(step, "poster", Vec::new(), poster.is_err());
        output.poster = poster?;
    }
    Ok(output)
}

/// The poster's path when the job asks for a poster and says where.
fn poster_path(job: &WorkerJob) -> Option<&std::path::Path> {
    job.poster_path
        .as_deref()
        .filter(|_| job.output.poster.is_some())
}

/// What a worker reads before it confines itself.
struct Inputs {
    template: Vec<u8>,
    fonts: FontBook,
    /// SHA-256 → the bytes of a replacement image.
    images: BTreeMap<String, Vec<u8>>,
    /// Render threads.
    threads: usize,
}

/// Reads the template, fonts and replacement images, creates the output file and confines
/// the process: what the worker does before it touches caller data.
fn read_inputs_and_confine(job: &WorkerJob) -> Result<Inputs, Failure> {
    let template = std::fs::read(&job.template_path).map_err(RenderError::ReadTemplate)?;
    let mut fonts = BTreeMap::new();
    for (family, path) in &job.fonts {
        let bytes = std::fs::read(path).map_err(RenderError::ReadTemplate)?;
        fonts.insert(family.clone(), bytes);
    }
    let mut images = BTreeMap::new();
    for (sha256, path) in &job.images {
        // Their size was checked at submit (at most `images::MAX_IMAGE_BYTES` each).
        let bytes = std::fs::read(path).map_err(RenderError::ReadTemplate)?;
        images.insert(sha256.clone(), bytes);
    }
    // Counted before confinement, which hides the cgroup files that hold a CPU quota.
    let threads = if job.threads == 0 {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        job.threads
    };
    // The output exists before confinement, which allows writing it and creating nothing.
    std::fs::File::create(&job.output_path).map_err(RenderError::ReadOutput)?;
    let mut writable = vec![job.output_path.clone()];
    if let Some(poster) = poster_path(job) {
        std::fs::File::create(poster).map_err(RenderError::ReadOutput)?;
        writable.push(poster.to_path_buf());
    }
    let policy = FilePolicy {
        readable: Vec::new(),
        writable,
    };
    confine(&policy).map_err(|error| Failure {
        class: ErrorClass::Transient,
        reason: Reason::WorkerUnavailable,
        message: format!("the worker cannot confine itself: {error}"),
    })?;
    Ok(Inputs {
        template,
        fonts: FontBook::new(fonts),
        images,
        threads,
    })
}

/// One NDJSON line on stdout, flushed at once so the parent sees progress live.
fn emit(event: &WorkerEvent) {
    if let Ok(line) = serde_json::to_string(event) {
        let mut stdout = std::io::stdout().lock();
        // The parent went away: nothing useful can be done about it here.
        let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    }
}
