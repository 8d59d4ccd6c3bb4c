//! `GET /v1/renders/{id}/output`: the file itself, with `Content-Type`, `Content-Length`,
//! `ETag` (its SHA-256) and single `Range` requests (`bytes=A-B`, `bytes=A-`) answered 206
//! from DownloadRenderOutput's `offset`/`length`. A suffix range (`bytes=-N`) or several
//! ranges are ignored (the whole file, 200), which RFC 9110 (14.2) allows.

use super::answer::{streamed, Messages, Next};
use super::problem;
use crate::grpc::renders::read_chunk;
use http::{HeaderValue, Response, StatusCode};
use tonic::body::Body;
use tonic::Status;

/// Largest message of a download: a chunk of 1 MiB with its description.
const MAX_CHUNK_MESSAGE_BYTES: usize = 2 * 1024 * 1024;

/// A single byte range asked for: its first byte and, if given, its last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asked {
    pub first: u64,
    pub last: Option<u64>,
}

impl Asked {
    /// The range of a `Range` header we answer (`None`: answer the whole file).
    pub(crate) fn of(headers: &http::HeaderMap) -> Option<Asked> {
        let spec = headers.get(http::header::RANGE)?.to_str().ok()?;
        let spec = spec.trim().strip_prefix("bytes=")?;
        if spec.contains(',') {
            return None;
        }
        let (first, last) = spec.split_once('-')?;
        let first: u64 = first.trim().parse().ok()?;
        let last = match last.trim() {
            "" => None,
            last => Some(last.parse::<u64>().ok()?),
        };
        if last.is_some_and(|last| last < first) {
            return None;
        }
        Some(Asked { first, last })
    }

    /// DownloadRenderOutput's `length` for this range (0: to the end).
    pub(crate) fn length(&self) -> u64 {
        self.last
            .map_or(0, |last| (last - self.first).saturating_add(1))
    }
}

/// The download's answer: the first chunk's description sets the headers, the chunks are
/// the body. A failure after the headers ends the body early (the client sees a transfer
/// shorter than `Content-Length`).
pub(crate) async fn file(
    response: Response<Body>,
    asked: Option<Asked>,
    head_only: bool,
) -> Response<Body> {
    if response.headers().contains_key("grpc-status") {
        let status = Status::from_header_map(response.headers())
            .unwrap_or_else(|| Status::internal("an answer with an unreadable status"));
        return problem::of_status(&status);
    }
    let mut reader = Messages::new(response.into_body());
    let first = match reader.next(MAX_CHUNK_MESSAGE_BYTES).await {
        Next::Message(message) => message,
        Next::End(status) if status.code() == tonic::Code::Ok => {
            // An empty output has no chunk to describe it.
            return Response::new(Body::empty());
        }
        Next::End(status) => return problem::of_status(&status),
    };
    let chunk = match read_chunk(first) {
        Ok(chunk) => chunk,
        Err(error) => return problem::of_status(&Status::internal(error)),
    };
    let Some(output) = chunk.file.clone() else {
        return problem::of_status(&Status::internal("a download without its description"));
    };
    let start = chunk.offset;
    let end = match asked.and_then(|asked| asked.last) {
        Some(last) => last.saturating_add(1).min(output.size_bytes),
        None => output.size_bytes,
    };
    let mut answer = if head_only {
        Response::new(Body::empty())
    } else {
        let first = Some(chunk.data);
        let stream =
            futures_util::stream::unfold((first, reader), |(first, mut reader)| async move {
                if let Some(data) = first {
                    return Some((Ok(data), (None, reader)));
                }
                match reader.next(MAX_CHUNK_MESSAGE_BYTES).await {
                    Next::Message(message) => match read_chunk(message) {
                        Ok(chunk) => Some((Ok(chunk.data), (None, reader))),
                        Err(error) => Some((Err(Status::internal(error)), (None, reader))),
                    },
                    Next::End(status) if status.code() == tonic::Code::Ok => None,
                    Next::End(status) => Some((Err(status), (None, reader))),
                }
            });
        Response::new(streamed(stream))
    };
    let headers = answer.headers_mut();
    let header = |value: String| HeaderValue::from_str(&value).ok();
    if let Some(value) = header(output.content_type.clone()) {
        headers.insert(http::header::CONTENT_TYPE, value);
    }
    if let Some(value) = header(format!("\"{}\"", output.sha256)) {
        headers.insert(http::header::ETAG, value);
    }
    headers.insert(
        http::header::ACCEPT_RANGES,
        HeaderValue::from_static("bytes"),
    );
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(end - start));
    if asked.is_some() {
        *answer.status_mut() = StatusCode::PARTIAL_CONTENT;
        let range = format!(
            "bytes {start}-{}/{}",
            end.saturating_sub(1),
            output.size_bytes
        );
        if let Some(value) = header(range) {
            answer
                .headers_mut()
                .insert(http::header::CONTENT_RANGE, value);
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(range: &str) -> Option<Asked> {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::RANGE, HeaderValue::from_str(range).unwrap());
        Asked::of(&headers)
    }

    #[test]
    fn single_ranges_are_read_and_the_others_ignored() {
        assert_eq!(
            asked("bytes=0-99"),
            Some(Asked {
                first: 0,
                last: Some(99)
            })
        );
        assert_eq!(asked("bytes=0-99").unwrap().length(), 100);
        assert_eq!(asked("bytes=500-").unwrap().length(), 0);
        for ignored in [
            "bytes=-5",
            "bytes=0-1,4-5",
            "lines=1-2",
            "bytes=9-3",
            "bytes=x-",
        ] {
            assert_eq!(asked(ignored), None, "{ignored}");
        }
    }
}
