//! `lottie-render inspect FILE.json`: the JSON report of a template on stdout.

use super::exit;
use crate::lottie::report::InspectReport;
use crate::lottie::Template;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The Lottie JSON file.
    pub template: PathBuf,
}

pub fn run(args: InspectArgs) -> ExitCode {
    let bytes = match std::fs::read(&args.template) {
        Ok(bytes) => bytes,
        Err(error) => {
            eprintln!("error: cannot read {}: {error}", args.template.display());
            return ExitCode::from(exit::TRANSIENT as u8);
        }
    };
    match Template::parse(&bytes) {
        Ok(template) => {
            let report = match InspectReport::new(&template) {
                Ok(report) => report,
                Err(error) => {
                    eprintln!("error: {}: {error}", args.template.display());
                    return ExitCode::from(exit::DETERMINISTIC as u8);
                }
            };
            match serde_json::to_string_pretty(&report) {
                Ok(json) => {
                    println!("{json}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: cannot write the report: {error}");
                    ExitCode::from(exit::CRASHED)
                }
            }
        }
        Err(error) => {
            eprintln!("error: {}: {error}", args.template.display());
            ExitCode::from(exit::DETERMINISTIC as u8)
        }
    }
}
