//! The analysis protocol, the contract between the server and a `lottie-render analyze`
//! child process:
//!
//! 1. The parent writes, on the child's stdin, one header line of JSON ([`InputHeader`]:
//!    the template's byte length and each uploaded font's family and byte length, in order),
//!    a newline, then the template's bytes, then each font's bytes, and closes stdin. No
//!    files: the child reads nothing but its stdin.
//! 2. The child writes one JSON document ([`AnalysisOutcome`]) to stdout, at most
//!    [`MAX_OUTPUT_BYTES`], and exits with the render worker's codes
//!    (`sandbox::protocol::exit_code`): 0 analysed, 65 the template is at fault (invalid, or
//!    over a budget it checks itself), 75 transient. Death by a signal or any other exit is
//!    classified by the parent (`crate::analysis`). Diagnostics go to stderr.

use crate::lottie::lowering::text::fonts::{MAX_FONTS_PER_TEMPLATE, MAX_FONT_BYTES};
use crate::lottie::reading::template::MAX_TEMPLATE_BYTES;
use crate::lottie::report::InspectReport;
use crate::sandbox::protocol::ReportedFailure;
use crate::storage::MAX_TEMPLATE_RECORD_BYTES;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Read};

/// Longest header line: sixteen families of 128 characters (4 bytes each at most) and their
/// lengths fit in a tenth of it.
pub(crate) const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Largest report the child answers: the template's record limit
/// (`storage::MAX_TEMPLATE_RECORD_BYTES`) less room for what the record adds to the report
/// (name, font families and hashes: under 16 KiB). A larger one is refused by the child
/// (`TEMPLATE_RECORD_TOO_LARGE`), so the server never reads nor keeps more.
pub(crate) const MAX_REPORT_BYTES: usize = MAX_TEMPLATE_RECORD_BYTES - 64 * 1024;
/// Largest answer the server reads: a report within [`MAX_REPORT_BYTES`] or a short failure.
pub(crate) const MAX_OUTPUT_BYTES: usize = MAX_TEMPLATE_RECORD_BYTES;

/// The header line of the input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputHeader {
    pub template_bytes: usize,
    pub fonts: Vec<FontHeader>,
    /// The dotLottie animation CreateTemplate chose (`animation_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub animation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FontHeader {
    pub family: String,
    pub bytes: usize,
}

/// What the child reads: the template and its uploaded fonts (family → bytes).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct AnalysisInput {
    pub template: Vec<u8>,
    pub fonts: BTreeMap<String, Vec<u8>>,
    pub animation: Option<String>,
}

/// The one document the child writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub(crate) enum AnalysisOutcome {
    Analysed {
        report: Box<InspectReport>,
        /// The child's own peak RSS (VmHWM), bytes.
        #[serde(default)]
        peak_rss_bytes: Option<u64>,
    },
    Failed(ReportedFailure),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProtocolError {
    #[error("cannot read the analysis input: {0}")]
    Io(#[from] std::io::Error),
    #[error("the analysis header is not valid: {0}")]
    Header(String),
    #[error("the analysis input is over its limits: {0}")]
    TooLarge(String),
}

impl InputHeader {
    /// The header for `template` and `fonts` (the order the bytes follow in).
    pub(crate) fn new<'a>(
        template: &[u8],
        fonts: impl IntoIterator<Item = (&'a String, &'a bytes::Bytes)>,
    ) -> InputHeader {
        InputHeader {
            template_bytes: template.len(),
            fonts: fonts
                .into_iter()
                .map(|(family, bytes)| FontHeader {
                    family: family.clone(),
                    bytes: bytes.len(),
                })
                .collect(),
            animation: None,
        }
    }

    /// The header line, newline included.
    pub(crate) fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }

    fn check(&self) -> Result<(), ProtocolError> {
        if self.template_bytes > MAX_TEMPLATE_BYTES {
            return Err(ProtocolError::TooLarge(format!(
                "template of {} bytes",
                self.template_bytes
            )));
        }
        if self.fonts.len() > MAX_FONTS_PER_TEMPLATE
            || self.fonts.iter().any(|font| font.bytes > MAX_FONT_BYTES)
            || self.animation.as_ref().is_some_and(|id| {
                id.chars().count() > crate::lottie::reading::dotlottie::MAX_ANIMATION_ID_CHARS
            })
        {
            return Err(ProtocolError::TooLarge("fonts".into()));
        }
        Ok(())
    }
}

/// Reads one input: the header line, then exactly the bytes it announces.
pub(crate) fn read_input(reader: impl Read) -> Result<AnalysisInput, ProtocolError> {
    let mut reader = std::io::BufReader::new(reader);
    let mut line = Vec::new();
    (&mut reader)
        .take(MAX_HEADER_BYTES as u64)
        .read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(ProtocolError::Header(
            "no header line within the limit".into(),
        ));
    }
    let header: InputHeader =
        serde_json::from_slice(&line).map_err(|error| ProtocolError::Header(error.to_string()))?;
    header.check()?;
    let mut exactly = |length: usize| -> Result<Vec<u8>, ProtocolError> {
        let mut bytes = vec![0; length];
        reader.read_exact(&mut bytes)?;
        Ok(bytes)
    };
    let template = exactly(header.template_bytes)?;
    let mut fonts = BTreeMap::new();
    for font in &header.fonts {
        fonts.insert(font.family.clone(), exactly(font.bytes)?);
    }
    Ok(AnalysisInput {
        template,
        fonts,
        animation: header.animation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_written_with_its_header_reads_back_the_same() {
        let fonts: BTreeMap<String, bytes::Bytes> = [
            ("Sans".to_owned(), bytes::Bytes::from_static(b"OTTOfont")),
            ("Serif".to_owned(), bytes::Bytes::new()),
        ]
        .into();
        let template = br#"{"v":"5.7"}"#.to_vec();
        let mut wire = InputHeader::new(&template, &fonts).to_line();
        wire.extend_from_slice(&template);
        for bytes in fonts.values() {
            wire.extend_from_slice(bytes);
        }
        let input = read_input(&wire[..]).unwrap();
        assert_eq!(
            input,
            AnalysisInput {
                template,
                fonts: fonts
                    .iter()
                    .map(|(family, bytes)| (family.clone(), bytes.to_vec()))
                    .collect(),
                animation: None
            }
        );
    }

    #[test]
    fn inputs_that_lie_about_their_size_or_exceed_the_limits_are_refused() {
        let cases: [(&str, Vec<u8>); 4] = [
            (
                "truncated body",
                b"{\"template_bytes\":10,\"fonts\":[]}\n{}".to_vec(),
            ),
            ("no newline", vec![b' '; MAX_HEADER_BYTES + 10]),
            (
                "template over the limit",
                format!(
                    "{{\"template_bytes\":{},\"fonts\":[]}}\n",
                    MAX_TEMPLATE_BYTES + 1
                )
                .into_bytes(),
            ),
            (
                "unknown field",
                b"{\"template_bytes\":0,\"fonts\":[],\"x\":1}\n".to_vec(),
            ),
        ];
        for (case, wire) in cases {
            assert!(read_input(&wire[..]).is_err(), "{case}");
        }
    }
}
