//! `lottie-render analyze`: parses, fences and builds one template's report from stdin under
//! the analysis protocol ([`crate::analysis::protocol`]). The server runs it as a child
//! process with a CPU-time and memory budget, so the JSON tree and typed model (hundreds of
//! bytes per template byte for crafted input), text shaping, layout, glyph outlines and font
//! parsing on caller bytes never run in the server. Not for people: hidden from `--help`.

use crate::analysis::protocol::{self, AnalysisOutcome, MAX_OUTPUT_BYTES, MAX_REPORT_BYTES};
use crate::error::{Classified, ErrorClass};
use crate::lottie::lowering::text::fonts::FontBook;
use crate::lottie::report::InspectReport;
use crate::lottie::Template;
use crate::reason::Reason;
use crate::sandbox::confine::{confine, FilePolicy};
use crate::sandbox::protocol::{exit_code, ReportedFailure};
use crate::storage::MAX_TEMPLATE_RECORD_BYTES;
use std::io::Write;
use std::process::ExitCode;

pub(crate) fn run() -> ExitCode {
    // Before the first caller byte is read: no file at all, no network, no new processes.
    let outcome = match confine(&FilePolicy::nothing()) {
        Ok(_) => analyse(std::io::stdin().lock()),
        Err(error) => failed(
            ErrorClass::Transient,
            Reason::AnalysisUnavailable,
            format!("the analysis worker cannot confine itself: {error}"),
        ),
    };
    let code = match &outcome {
        AnalysisOutcome::Analysed { .. } => exit_code::SUCCESS,
        AnalysisOutcome::Failed(reported) => exit_code::of_failure(reported.class),
    };
    let mut document = serde_json::to_vec(&outcome).unwrap_or_default();
    if matches!(outcome, AnalysisOutcome::Analysed { .. }) && document.len() > MAX_REPORT_BYTES {
        document = serde_json::to_vec(&failed(
            ErrorClass::Deterministic,
            Reason::TemplateRecordTooLarge,
            format!(
                "the template's record would pass its {MAX_TEMPLATE_RECORD_BYTES} byte limit: \
                 its report (slots with their default texts, and warnings) is {} bytes, more \
                 than the {MAX_REPORT_BYTES} it may take; shorten its default texts or slot \
                 names",
                document.len()
            ),
        ))
        .unwrap_or_default();
        return finish(&document, exit_code::DETERMINISTIC);
    }
    if document.len() > MAX_OUTPUT_BYTES {
        document = serde_json::to_vec(&failed(
            ErrorClass::Deterministic,
            Reason::TemplateTooComplex,
            format!("the template's report is larger than {MAX_OUTPUT_BYTES} bytes"),
        ))
        .unwrap_or_default();
        return finish(&document, exit_code::DETERMINISTIC);
    }
    finish(&document, code)
}

fn finish(document: &[u8], code: i32) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(document)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::from(exit_code::TRANSIENT as u8);
    }
    ExitCode::from(code as u8)
}

fn failed(class: ErrorClass, reason: Reason, message: String) -> AnalysisOutcome {
    AnalysisOutcome::Failed(ReportedFailure {
        class,
        reason,
        message,
    })
}

/// The outcome of analysing the input read from `reader`.
pub(crate) fn analyse(reader: impl std::io::Read) -> AnalysisOutcome {
    let input = match protocol::read_input(reader) {
        Ok(input) => input,
        // The server wrote it: a broken input is its fault, never the caller's.
        Err(error) => {
            return failed(
                ErrorClass::Transient,
                Reason::AnalysisInput,
                error.to_string(),
            )
        }
    };
    let template = match Template::parse_animation(&input.template, input.animation.as_deref()) {
        Ok(template) => template,
        Err(error) => return failed(error.class(), error.reason(), error.to_string()),
    };
    // The JSON tree is all that is needed from here on.
    drop(input.template);
    let fonts = FontBook::new(input.fonts);
    match InspectReport::with_fonts(&template, &fonts) {
        Ok(report) => AnalysisOutcome::Analysed {
            report: Box::new(report),
            peak_rss_bytes: crate::os::own_peak_rss_bytes(),
        },
        Err(error) => failed(error.class(), error.reason(), error.to_string()),
    }
}
