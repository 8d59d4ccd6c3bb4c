//! Spans measured inside a `lottie-render worker`, which has no network: the worker times a
//! few steps of its run ([`WorkerTrace`], children of the render span whose `traceparent`
//! its job carries) and writes them as `span` events on its protocol stream; the server
//! checks each one against the render it belongs to ([`WorkerSpanCheck`]) and exports what
//! passes through its own tracer, the worker's ids and timestamps kept. A worker runs
//! hostile input and may be subverted: nothing it says about its spans is trusted beyond
//! these checks, and what fails them is dropped.

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::KeyValue;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Spans one worker run may report: the worker sends four (its run, reading its inputs,
/// preparing the template, rendering and encoding); a few more leave room for new steps
/// without letting a subverted worker fill the exporter's queue.
pub(crate) const MAX_WORKER_SPANS: usize = 16;
/// Attributes of one worker span: ours carry at most five.
pub(crate) const MAX_SPAN_ATTRIBUTES: usize = 8;
/// Longest span name or attribute key, bytes: ours are short dotted words.
pub(crate) const MAX_SPAN_NAME_BYTES: usize = 64;
/// Longest text attribute value, bytes: enough for a failure reason; with the limits above a
/// span event stays far below the protocol's line limit
/// ([`crate::sandbox::lines::MAX_WORKER_LINE_BYTES`]).
pub(crate) const MAX_SPAN_VALUE_BYTES: usize = 256;
/// How far a worker span may start before the render span or end after the server read it:
/// the worker and the server read the same machine's clock, so this only absorbs rounding.
const CLOCK_SLACK: Duration = Duration::from_secs(1);
/// The attribute that marks a span measured inside a worker process.
pub(crate) const PROCESS_ATTRIBUTE: &str = "process";
/// Its value.
pub(crate) const WORKER_PROCESS: &str = "worker";

/// One span as a worker reports it (a `span` event of [`crate::sandbox::protocol`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpan {
    pub name: String,
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    pub parent_span_id: String,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    #[serde(default)]
    pub attributes: BTreeMap<String, SpanValue>,
    /// Whether the step failed.
    #[serde(default)]
    pub failed: bool,
}

/// An attribute value: the kinds our spans use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SpanValue {
    Bool(bool),
    Int(i64),
    Text(String),
}

/// `00-TRACE-SPAN-01`: the W3C `traceparent` of a sampled span.
pub(crate) fn format_traceparent(trace_id: TraceId, span_id: SpanId) -> String {
    format!("00-{trace_id}-{span_id}-01")
}

/// The trace and span ids of a version-00 `traceparent` (what [`format_traceparent`] writes);
/// `None` for anything else, invalid (all-zero) ids included.
pub(crate) fn parse_traceparent(text: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = text.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || version != "00" || flags.len() != 2 {
        return None;
    }
    let trace_id = lowercase_hex(trace, 32).and_then(|hex| TraceId::from_hex(hex).ok())?;
    let span_id = lowercase_hex(span, 16).and_then(|hex| SpanId::from_hex(hex).ok())?;
    (trace_id != TraceId::INVALID && span_id != SpanId::INVALID).then_some((trace_id, span_id))
}

/// `text` when it is exactly `digits` lowercase hex digits.
fn lowercase_hex(text: &str, digits: usize) -> Option<&str> {
    (text.len() == digits && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(text)
}

/// The spans of one worker run, as the worker records them.
#[derive(Debug)]
pub(crate) struct WorkerTrace {
    trace_id: TraceId,
    /// The server's render span: the parent of the worker's first span.
    render_span_id: SpanId,
    finished: Vec<WorkerSpan>,
}

/// A span the worker has started and not yet finished.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenSpan {
    pub span_id: SpanId,
    parent_span_id: SpanId,
    start: SystemTime,
}

impl WorkerTrace {
    /// Spans under the render span of `traceparent`; `None` (nothing recorded) when the job
    /// carries none or an unreadable one.
    pub(crate) fn from_traceparent(traceparent: Option<&str>) -> Option<WorkerTrace> {
        let (trace_id, render_span_id) = parse_traceparent(traceparent?)?;
        Some(WorkerTrace {
            trace_id,
            render_span_id,
            finished: Vec::new(),
        })
    }

    /// Starts a span now: a child of `parent`, or of the render span when none.
    pub(crate) fn start(&self, parent: Option<&OpenSpan>) -> OpenSpan {
        self.start_at(parent, SystemTime::now())
    }

    /// Starts a span that began at `start` (the run's span: when the worker had its job).
    pub(crate) fn start_at(&self, parent: Option<&OpenSpan>, start: SystemTime) -> OpenSpan {
        OpenSpan {
            span_id: random_span_id(),
            parent_span_id: parent.map_or(self.render_span_id, |parent| parent.span_id),
            start,
        }
    }

    /// Ends `span` now as `name` with `attributes` (the first [`MAX_SPAN_ATTRIBUTES`]).
    pub(crate) fn finish(
        &mut self,
        span: OpenSpan,
        name: &str,
        attributes: impl IntoIterator<Item = (&'static str, SpanValue)>,
        failed: bool,
    ) {
        if self.finished.len() >= MAX_WORKER_SPANS {
            return;
        }
        self.finished.push(WorkerSpan {
            name: name.to_owned(),
            trace_id: self.trace_id.to_string(),
            span_id: span.span_id.to_string(),
            parent_span_id: span.parent_span_id.to_string(),
            start_unix_nanos: unix_nanos(span.start),
            end_unix_nanos: unix_nanos(SystemTime::now()),
            attributes: attributes
                .into_iter()
                .take(MAX_SPAN_ATTRIBUTES)
                .map(|(key, value)| (key.to_owned(), value))
                .collect(),
            failed,
        });
    }

    /// The finished spans, parents before their children (the order the server needs to
    /// check parents).
    pub(crate) fn into_spans(mut self) -> Vec<WorkerSpan> {
        self.finished.sort_by_key(|span| {
            (
                span.start_unix_nanos,
                std::cmp::Reverse(span.end_unix_nanos),
            )
        });
        self.finished
    }
}

/// A span id from the operating system's random source (never the invalid all-zero id).
fn random_span_id() -> SpanId {
    loop {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[..8]);
        if id != [0u8; 8] {
            return SpanId::from_bytes(id);
        }
    }
}

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}

/// Why the server dropped a span a worker reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SpanRefused {
    #[error("more than {MAX_WORKER_SPANS} spans from one worker run")]
    TooMany,
    #[error("the {0} is not lowercase hex of the right length, or is all zeros")]
    BadId(&'static str),
    #[error("the span belongs to another trace")]
    OtherTrace,
    #[error("the span id is the render span's or one already reported")]
    DuplicateSpan,
    #[error("the parent is neither the render span nor an earlier span of this worker")]
    UnknownParent,
    #[error("the name is empty, longer than {MAX_SPAN_NAME_BYTES} bytes or not a dotted word")]
    BadName,
    #[error("more than {MAX_SPAN_ATTRIBUTES} attributes, or a key or value too long")]
    BadAttributes,
    #[error("the span ends before it starts, or lies outside the render")]
    BadTimes,
}

/// A worker span that passed [`WorkerSpanCheck::admit`], ready to export.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AdmittedSpan {
    pub name: String,
    pub span_id: SpanId,
    pub parent_span_id: SpanId,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub failed: bool,
}

/// Checks the spans of one worker run against the render span they must descend from.
#[derive(Debug)]
pub(crate) struct WorkerSpanCheck {
    trace_id: TraceId,
    render_span_id: SpanId,
    /// When the render span started: no worker span starts (much) earlier.
    render_start: SystemTime,
    /// Span ids admitted so far: the only parents a later span may name besides the render.
    admitted: HashSet<SpanId>,
    offered: usize,
}

impl WorkerSpanCheck {
    pub(crate) fn new(trace_id: TraceId, render_span_id: SpanId, render_start: SystemTime) -> Self {
        WorkerSpanCheck {
            trace_id,
            render_span_id,
            render_start,
            admitted: HashSet::new(),
            offered: 0,
        }
    }

    /// The render span's trace id: the trace every admitted span is exported in.
    pub(crate) fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    pub(crate) fn render_span_id(&self) -> SpanId {
        self.render_span_id
    }

    /// `span` ready to export, or why it is dropped; `now` is when the server read it.
    pub(crate) fn admit(
        &mut self,
        span: &WorkerSpan,
        now: SystemTime,
    ) -> Result<AdmittedSpan, SpanRefused> {
        self.offered += 1;
        if self.offered > MAX_WORKER_SPANS {
            return Err(SpanRefused::TooMany);
        }
        let trace_id = lowercase_hex(&span.trace_id, 32)
            .and_then(|hex| TraceId::from_hex(hex).ok())
            .filter(|id| *id != TraceId::INVALID)
            .ok_or(SpanRefused::BadId("trace id"))?;
        let span_id = span_id(&span.span_id).ok_or(SpanRefused::BadId("span id"))?;
        let parent_span_id =
            self::span_id(&span.parent_span_id).ok_or(SpanRefused::BadId("parent span id"))?;
        if trace_id != self.trace_id {
            return Err(SpanRefused::OtherTrace);
        }
        if span_id == self.render_span_id || self.admitted.contains(&span_id) {
            return Err(SpanRefused::DuplicateSpan);
        }
        if parent_span_id != self.render_span_id && !self.admitted.contains(&parent_span_id) {
            return Err(SpanRefused::UnknownParent);
        }
        if !is_dotted_word(&span.name) {
            return Err(SpanRefused::BadName);
        }
        let attributes = attributes(&span.attributes).ok_or(SpanRefused::BadAttributes)?;
        let start = UNIX_EPOCH + Duration::from_nanos(span.start_unix_nanos);
        let end = UNIX_EPOCH + Duration::from_nanos(span.end_unix_nanos);
        let earliest = self
            .render_start
            .checked_sub(CLOCK_SLACK)
            .unwrap_or(UNIX_EPOCH);
        if start > end || start < earliest || end > now + CLOCK_SLACK {
            return Err(SpanRefused::BadTimes);
        }
        self.admitted.insert(span_id);
        Ok(AdmittedSpan {
            name: span.name.clone(),
            span_id,
            parent_span_id,
            start,
            end,
            attributes,
            failed: span.failed,
        })
    }
}

fn span_id(text: &str) -> Option<SpanId> {
    lowercase_hex(text, 16)
        .and_then(|hex| SpanId::from_hex(hex).ok())
        .filter(|id| *id != SpanId::INVALID)
}

/// A span name or attribute key: 1..=64 bytes of ASCII letters, digits, `.`, `_` and `-`.
fn is_dotted_word(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_SPAN_NAME_BYTES
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn attributes(attributes: &BTreeMap<String, SpanValue>) -> Option<Vec<KeyValue>> {
    if attributes.len() > MAX_SPAN_ATTRIBUTES {
        return None;
    }
    attributes
        .iter()
        .map(|(key, value)| {
            if !is_dotted_word(key) {
                return None;
            }
            let key = key.clone();
            Some(match value {
                SpanValue::Bool(value) => KeyValue::new(key, *value),
                SpanValue::Int(value) => KeyValue::new(key, *value),
                SpanValue::Text(value) if value.len() <= MAX_SPAN_VALUE_BYTES => {
                    KeyValue::new(key, value.clone())
                }
                SpanValue::Text(_) => return None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::lines::MAX_WORKER_LINE_BYTES;
    use crate::sandbox::protocol::WorkerEvent;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const RENDER_SPAN: &str = "00f067aa0ba902b7";

    fn check() -> (WorkerSpanCheck, SystemTime) {
        let render_start = SystemTime::now();
        let check = WorkerSpanCheck::new(
            TraceId::from_hex(TRACE).unwrap(),
            SpanId::from_hex(RENDER_SPAN).unwrap(),
            render_start,
        );
        (check, render_start)
    }

    fn span(render_start: SystemTime) -> WorkerSpan {
        let start = unix_nanos(render_start) + 1_000;
        WorkerSpan {
            name: "prepare".into(),
            trace_id: TRACE.into(),
            span_id: "a1b2c3d4e5f60718".into(),
            parent_span_id: RENDER_SPAN.into(),
            start_unix_nanos: start,
            end_unix_nanos: start + 5_000,
            attributes: BTreeMap::from([
                ("process".into(), SpanValue::Text("worker".into())),
                ("process.pid".into(), SpanValue::Int(42)),
            ]),
            failed: false,
        }
    }

    #[test]
    fn a_worker_span_under_the_render_span_is_admitted_with_its_ids_and_times() {
        let (mut check, render_start) = check();
        let reported = span(render_start);
        let admitted = check.admit(&reported, SystemTime::now()).unwrap();
        assert_eq!(
            admitted.span_id,
            SpanId::from_hex("a1b2c3d4e5f60718").unwrap()
        );
        assert_eq!(
            admitted.parent_span_id,
            SpanId::from_hex(RENDER_SPAN).unwrap()
        );
        assert_eq!(
            admitted.start,
            UNIX_EPOCH + Duration::from_nanos(reported.start_unix_nanos)
        );
        assert_eq!(admitted.attributes.len(), 2);
        // A child of the admitted span is admitted too.
        let child = WorkerSpan {
            span_id: "0000000000000001".into(),
            parent_span_id: "a1b2c3d4e5f60718".into(),
            ..span(render_start)
        };
        assert!(check.admit(&child, SystemTime::now()).is_ok());
    }

    #[test]
    fn malformed_worker_spans_are_dropped_one_reason_each() {
        type Spoil = fn(&mut WorkerSpan);
        let cases: [(&str, Spoil, SpanRefused); 14] = [
            (
                "short trace id",
                |s| s.trace_id.truncate(31),
                SpanRefused::BadId("trace id"),
            ),
            (
                "uppercase trace id",
                |s| s.trace_id = s.trace_id.to_uppercase(),
                SpanRefused::BadId("trace id"),
            ),
            (
                "zero trace id",
                |s| s.trace_id = "0".repeat(32),
                SpanRefused::BadId("trace id"),
            ),
            (
                "non-hex span id",
                |s| s.span_id = "zzzzzzzzzzzzzzzz".into(),
                SpanRefused::BadId("span id"),
            ),
            (
                "zero span id",
                |s| s.span_id = "0".repeat(16),
                SpanRefused::BadId("span id"),
            ),
            (
                "huge parent id",
                |s| s.parent_span_id = "f".repeat(4000),
                SpanRefused::BadId("parent span id"),
            ),
            (
                "another trace",
                |s| s.trace_id = "1".repeat(32),
                SpanRefused::OtherTrace,
            ),
            (
                "the render span's own id",
                |s| s.span_id = RENDER_SPAN.into(),
                SpanRefused::DuplicateSpan,
            ),
            (
                "a parent never reported",
                |s| s.parent_span_id = "1234567812345678".into(),
                SpanRefused::UnknownParent,
            ),
            ("an empty name", |s| s.name.clear(), SpanRefused::BadName),
            (
                "a name with spaces",
                |s| s.name = "render everything".into(),
                SpanRefused::BadName,
            ),
            (
                "a huge value",
                |s| {
                    s.attributes.insert(
                        "x".into(),
                        SpanValue::Text("x".repeat(MAX_SPAN_VALUE_BYTES + 1)),
                    );
                },
                SpanRefused::BadAttributes,
            ),
            (
                "an end before the start",
                |s| s.end_unix_nanos = s.start_unix_nanos - 1,
                SpanRefused::BadTimes,
            ),
            (
                "a start long before the render",
                |s| s.start_unix_nanos = 1,
                SpanRefused::BadTimes,
            ),
        ];
        for (case, spoil, refused) in cases {
            let (mut check, render_start) = check();
            let mut reported = span(render_start);
            spoil(&mut reported);
            assert_eq!(
                check.admit(&reported, SystemTime::now()),
                Err(refused),
                "{case}"
            );
        }
    }

    #[test]
    fn too_many_attributes_or_spans_are_dropped() {
        let (mut check, render_start) = check();
        let mut crowded = span(render_start);
        crowded.attributes = (0..=MAX_SPAN_ATTRIBUTES)
            .map(|i| (format!("key{i}"), SpanValue::Int(1)))
            .collect();
        assert_eq!(
            check.admit(&crowded, SystemTime::now()),
            Err(SpanRefused::BadAttributes)
        );
        let (mut check, render_start) = self::check();
        for i in 0..MAX_WORKER_SPANS as u64 * 2 {
            let reported = WorkerSpan {
                span_id: format!("{:016x}", i + 1),
                ..span(render_start)
            };
            let admitted = check.admit(&reported, SystemTime::now());
            assert_eq!(admitted.is_ok(), i < MAX_WORKER_SPANS as u64, "span {i}");
        }
    }

    #[test]
    fn a_span_line_with_malformed_data_is_not_a_protocol_event() {
        let (_, render_start) = check();
        let good = serde_json::to_value(WorkerEvent::Span(span(render_start))).unwrap();
        assert!(serde_json::from_value::<WorkerEvent>(good.clone()).is_ok());
        for (case, field, value) in [
            (
                "a float attribute",
                "attributes",
                serde_json::json!({"x": 1.5}),
            ),
            (
                "a negative start",
                "start_unix_nanos",
                serde_json::json!(-1),
            ),
            ("a numeric trace id", "trace_id", serde_json::json!(7)),
            ("an unknown field", "surprise", serde_json::json!(true)),
        ] {
            let mut bad = good.clone();
            bad[field] = value;
            assert!(
                serde_json::from_value::<WorkerEvent>(bad).is_err(),
                "{case}"
            );
        }
    }

    #[test]
    fn the_largest_admissible_span_fits_in_one_protocol_line() {
        let (_, render_start) = check();
        let largest = WorkerSpan {
            name: "n".repeat(MAX_SPAN_NAME_BYTES),
            attributes: (0..MAX_SPAN_ATTRIBUTES)
                .map(|i| {
                    (
                        format!("{i}{}", "k".repeat(MAX_SPAN_NAME_BYTES - 1)),
                        SpanValue::Text("\"".repeat(MAX_SPAN_VALUE_BYTES / 2)),
                    )
                })
                .collect(),
            ..span(render_start)
        };
        let line = serde_json::to_string(&WorkerEvent::Span(largest)).unwrap();
        assert!(line.len() < MAX_WORKER_LINE_BYTES, "{}", line.len());
    }

    #[test]
    fn a_traceparent_round_trips_and_garbage_is_refused() {
        let trace = TraceId::from_hex(TRACE).unwrap();
        let span = SpanId::from_hex(RENDER_SPAN).unwrap();
        let text = format_traceparent(trace, span);
        assert_eq!(text, format!("00-{TRACE}-{RENDER_SPAN}-01"));
        assert_eq!(parse_traceparent(&text), Some((trace, span)));
        for garbage in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(parse_traceparent(garbage), None, "{garbage}");
        }
    }

    #[test]
    fn a_worker_trace_records_its_spans_parents_first_under_the_render_span() {
        let traceparent = format!("00-{TRACE}-{RENDER_SPAN}-01");
        let mut trace = WorkerTrace::from_traceparent(Some(&traceparent)).unwrap();
        let run = trace.start(None);
        let step = trace.start(Some(&run));
        trace.finish(step, "prepare", [("frames", SpanValue::Int(3))], false);
        trace.finish(run, "worker", [], false);
        let spans = trace.into_spans();
        assert_eq!(spans[0].name, "worker");
        assert_eq!(spans[0].parent_span_id, RENDER_SPAN);
        assert_eq!(spans[1].parent_span_id, spans[0].span_id);
        let (mut check, _) = check();
        for span in &spans {
            check.admit(span, SystemTime::now()).unwrap();
        }
        assert!(WorkerTrace::from_traceparent(None).is_none());
        assert!(WorkerTrace::from_traceparent(Some("garbage")).is_none());
    }
}
