//! `lottie-render inspect FILE.json`: the JSON report of a template on stdout.

use super::exit;
use crate::lottie::report::InspectReport;
use crate::lottie::Template;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The Lottie JSON file.
    pub template: PathBuf,
}

pub(crate) fn run(args: InspectArgs) -> ExitCode {
    match report_json(&args.template) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err((message, code)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

/// The report of the template at `path` as JSON, or what went wrong and the exit code saying
/// so (the file unreadable: transient; the template at fault: deterministic).
fn report_json(path: &Path) -> Result<String, (String, u8)> {
    let bytes = std::fs::read(path).map_err(|error| {
        let message = format!("cannot read {}: {error}", path.display());
        (message, exit::TRANSIENT as u8)
    })?;
    let invalid = |error: &dyn std::fmt::Display| {
        let message = format!("{}: {error}", path.display());
        (message, exit::DETERMINISTIC as u8)
    };
    let template = Template::parse(&bytes).map_err(|error| invalid(&error))?;
    let report = InspectReport::new(&template).map_err(|error| invalid(&error))?;
    serde_json::to_string_pretty(&report)
        .map_err(|error| (format!("cannot write the report: {error}"), exit::CRASHED))
}
