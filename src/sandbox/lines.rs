//! Reading a worker's output one line at a time with a bound on each line: a worker is
//! running hostile input through C++ and may be subverted, so what the parent buffers of
//! its output must not depend on what it writes. `BufRead::lines` would grow a line without
//! end.

use std::io::{BufRead, BufReader, Read};

/// Longest line a worker may write on stdout, newline excluded. The longest legitimate
/// event, `failed` with a message the worker cuts to
/// [`crate::sandbox::protocol::MAX_FAILURE_MESSAGE_BYTES`], is well under 2 KiB; a longer
/// line is a protocol violation: the worker is killed and the run is a crash.
pub const MAX_WORKER_LINE_BYTES: usize = 4 * 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LineError {
    #[error("a line longer than {limit} bytes")]
    TooLong { limit: usize },
    #[error("cannot read the worker's output: {0}")]
    Read(#[from] std::io::Error),
}

/// Lines of at most `limit` bytes from a stream; holds at most `limit` + 1 bytes of a line
/// (plus the reader's buffer) whatever the stream sends.
pub(crate) struct BoundedLines<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    limit: usize,
}

impl<R: Read> BoundedLines<R> {
    pub(crate) fn new(stream: R, limit: usize) -> BoundedLines<R> {
        BoundedLines {
            reader: BufReader::new(stream),
            line: Vec::new(),
            limit,
        }
    }

    /// The next line without its newline (a last line without one counts), or None at the
    /// end of the stream.
    pub(crate) fn next_line(&mut self) -> Result<Option<&[u8]>, LineError> {
        self.line.clear();
        // One byte past the limit tells a line of exactly `limit` bytes plus its newline
        // from a longer one.
        let allowed = self.limit as u64 + 1;
        let read = (&mut self.reader)
            .take(allowed)
            .read_until(b'\n', &mut self.line)?;
        if read == 0 {
            return Ok(None);
        }
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
        } else if self.line.len() > self.limit {
            return Err(LineError::TooLong { limit: self.limit });
        }
        Ok(Some(&self.line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], limit: usize) -> Vec<Result<String, String>> {
        let mut reader = BoundedLines::new(input, limit);
        let mut out = Vec::new();
        loop {
            match reader.next_line() {
                Ok(Some(line)) => out.push(Ok(String::from_utf8_lossy(line).into_owned())),
                Ok(None) => return out,
                Err(error) => {
                    out.push(Err(error.to_string()));
                    return out;
                }
            }
        }
    }

    #[test]
    fn lines_up_to_the_limit_are_read_whole_and_a_last_line_needs_no_newline() {
        assert_eq!(
            lines(b"abcd\n\nab\nxyz", 4),
            vec![
                Ok("abcd".to_owned()),
                Ok(String::new()),
                Ok("ab".to_owned()),
                Ok("xyz".to_owned())
            ]
        );
    }

    #[test]
    fn a_line_over_the_limit_is_refused_one_byte_over_or_last_without_a_newline() {
        let refused = || Err("a line longer than 4 bytes".to_owned());
        let cases: [(&[u8], _); 2] = [
            (b"ok\nabcde\nnever", vec![Ok("ok".to_owned()), refused()]),
            (b"abcdefgh", vec![refused()]),
        ];
        for (input, expected) in cases {
            assert_eq!(lines(input, 4), expected, "{input:?}");
        }
    }
}
