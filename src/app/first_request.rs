//! `AdmittedConnection`: an accepted connection as tonic serves it, holding its place among
//! the open connections ([`ConnectionPermit`]) for its whole life, and closed when the headers
//! of its first request have not arrived within `--first-request-timeout-ms` of its accept.
//!
//! The first request is watched in the bytes the server reads (decrypted, under TLS), before
//! hyper sees them: HTTP/2 (prior knowledge or ALPN) is its preface, then frames, until a
//! end of a HEADERS or CONTINUATION frame that ends a header block; HTTP/1.1 is its request line and
//! headers, up to the blank line. A peer that sends nothing, or the preface and SETTINGS
//! only, or a byte at a time (slow loris), holds its descriptor no longer than the timeout.
//! Once the first request is there, nothing more is watched: what follows is hyper's and the
//! tower stack's (streams, keepalive, the body deadline, the connection's age).

use super::open_connections::ConnectionPermit;
use crate::metrics::Metrics;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tonic::transport::server::Connected;

/// The `connections_closed` metric's label for a connection closed at the timeout.
pub(crate) const FIRST_REQUEST_TIMEOUT: &str = "first_request_timeout";

/// The HTTP/2 connection preface (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HTTP2_FRAME_HEADER_BYTES: usize = 9;
const HTTP2_HEADERS: u8 = 0x1;
const HTTP2_CONTINUATION: u8 = 0x9;
const HTTP2_END_HEADERS: u8 = 0x4;

/// How far the first request's headers have come, from the bytes read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FirstRequest {
    /// The first `matched` bytes of the HTTP/2 preface (0: nothing read yet).
    Preface { matched: usize },
    /// An HTTP/2 frame header, `filled` of its nine bytes read.
    FrameHeader {
        header: [u8; HTTP2_FRAME_HEADER_BYTES],
        filled: usize,
    },
    /// The payload of a frame, `remaining` bytes of it; `ends_headers`: the frame ends the
    /// first header block, so the request has arrived with the payload's last byte.
    Payload {
        remaining: usize,
        ends_headers: bool,
    },
    /// HTTP/1.1: `blank_line` bytes of a "\r\n\r\n" in a row, and whether anything but line
    /// ends came before (empty lines before a request line are not a request).
    Http1 { blank_line: usize, started: bool },
    /// The first request's headers are complete.
    Arrived,
}

impl FirstRequest {
    fn new() -> FirstRequest {
        FirstRequest::Preface { matched: 0 }
    }

    /// Takes the next bytes read from the peer.
    fn read(&mut self, mut bytes: &[u8]) {
        while let Some((&byte, rest)) = bytes.split_first() {
            match self {
                FirstRequest::Arrived => return,
                FirstRequest::Payload {
                    remaining,
                    ends_headers,
                } => {
                    // Payloads are skipped whole, not byte by byte.
                    let skipped = (*remaining).min(bytes.len());
                    *remaining -= skipped;
                    bytes = &bytes[skipped..];
                    if *remaining == 0 {
                        *self = FirstRequest::after_payload(*ends_headers);
                    }
                    continue;
                }
                FirstRequest::Preface { matched } => {
                    if HTTP2_PREFACE[*matched] == byte {
                        *matched += 1;
                        if *matched == HTTP2_PREFACE.len() {
                            *self = FirstRequest::frame_header();
                        }
                    } else {
                        // Not HTTP/2: what matched so far was the start of an HTTP/1 request.
                        let seen = &HTTP2_PREFACE[..*matched];
                        *self = FirstRequest::Http1 {
                            blank_line: 0,
                            started: false,
                        };
                        self.read(seen);
                        self.read(&[byte]);
                    }
                }
                FirstRequest::FrameHeader { header, filled } => {
                    header[*filled] = byte;
                    *filled += 1;
                    if *filled == HTTP2_FRAME_HEADER_BYTES {
                        *self = FirstRequest::after_frame_header(header);
                    }
                }
                FirstRequest::Http1 {
                    blank_line,
                    started,
                } => {
                    let expected = b"\r\n\r\n"[*blank_line];
                    *blank_line = match byte {
                        _ if byte == expected => *blank_line + 1,
                        b'\r' => 1,
                        _ => 0,
                    };
                    *started |= byte != b'\r' && byte != b'\n';
                    if *blank_line == 4 && *started {
                        *self = FirstRequest::Arrived;
                    } else if *blank_line == 4 {
                        *blank_line = 2;
                    }
                }
            }
            bytes = rest;
        }
    }

    fn frame_header() -> FirstRequest {
        FirstRequest::FrameHeader {
            header: [0; HTTP2_FRAME_HEADER_BYTES],
            filled: 0,
        }
    }

    fn after_frame_header(header: &[u8; HTTP2_FRAME_HEADER_BYTES]) -> FirstRequest {
        let length = usize::from(header[0]) << 16 | usize::from(header[1]) << 8;
        let length = length | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let ends_headers =
            flags & HTTP2_END_HEADERS != 0 && (kind == HTTP2_HEADERS || kind == HTTP2_CONTINUATION);
        if length == 0 {
            FirstRequest::after_payload(ends_headers)
        } else {
            FirstRequest::Payload {
                remaining: length,
                ends_headers,
            }
        }
    }

    fn after_payload(ends_headers: bool) -> FirstRequest {
        if ends_headers {
            FirstRequest::Arrived
        } else {
            FirstRequest::frame_header()
        }
    }
}

/// What is watched until the first request's headers arrive.
#[derive(Debug)]
struct Watch {
    progress: FirstRequest,
    /// Boxed so the connection stays `Unpin`; polled on every read, so a silent connection is
    /// woken (and closed) at the deadline too.
    deadline: Pin<Box<tokio::time::Sleep>>,
    metrics: Arc<Metrics>,
}

/// An accepted connection (a TCP socket, or a TLS stream over one) holding its place among
/// the open connections, whose reads fail once its first request is late.
#[derive(Debug)]
pub(crate) struct AdmittedConnection<IO> {
    stream: IO,
    /// Until the first request's headers have arrived.
    first_request: Option<Watch>,
    /// Given back when tonic drops the connection.
    _permit: ConnectionPermit,
}

impl<IO> AdmittedConnection<IO> {
    /// `stream`, accepted at `accepted_at`, whose first request's headers must arrive within
    /// `first_request_timeout` of then.
    pub(crate) fn new(
        stream: IO,
        permit: ConnectionPermit,
        accepted_at: Instant,
        first_request_timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> AdmittedConnection<IO> {
        let deadline = tokio::time::sleep_until(accepted_at + first_request_timeout);
        AdmittedConnection {
            stream,
            first_request: Some(Watch {
                progress: FirstRequest::new(),
                deadline: Box::pin(deadline),
                metrics,
            }),
            _permit: permit,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for AdmittedConnection<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(watch) = &mut this.first_request else {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        };
        if watch.deadline.as_mut().poll(cx).is_ready() {
            watch.metrics.connection_closed(FIRST_REQUEST_TIMEOUT);
            tracing::debug!("connection closed: no request within the first request timeout");
            this.first_request = None;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request within the first request timeout",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            watch.progress.read(&buf.filled()[before..]);
            if watch.progress == FirstRequest::Arrived {
                this.first_request = None;
            }
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for AdmittedConnection<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for AdmittedConnection<IO> {
    // The wrapped stream's, so layers reading the peer address see no difference.
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> IO::ConnectInfo {
        self.stream.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the first request has arrived after `chunks`, read one after another.
    fn arrived(chunks: &[&[u8]]) -> bool {
        let mut progress = FirstRequest::new();
        for chunk in chunks {
            progress.read(chunk);
        }
        progress == FirstRequest::Arrived
    }

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let length = payload.len() as u32;
        let mut frame = length.to_be_bytes()[1..].to_vec();
        frame.extend([kind, flags, 0, 0, 0, 1]);
        frame.extend(payload);
        frame
    }

    #[test]
    fn http2_arrives_with_the_frame_that_ends_the_first_header_block() {
        let settings = frame(0x4, 0, &[0, 3, 0, 0, 0, 100]);
        let ping = frame(0x6, 0, &[7; 8]);
        let headers_open = frame(HTTP2_HEADERS, 0, &[0x82; 40]);
        let continuation_end = frame(HTTP2_CONTINUATION, HTTP2_END_HEADERS, &[0x84; 10]);
        let headers_end = frame(HTTP2_HEADERS, HTTP2_END_HEADERS | 0x1, &[0x82; 3]);
        let preface: &[u8] = HTTP2_PREFACE;
        // The preface, SETTINGS and PINGs are not a request.
        assert!(!arrived(&[preface, &settings, &ping, &ping]));
        assert!(!arrived(&[preface, &settings, &headers_open]));
        assert!(arrived(&[preface, &settings, &headers_end]));
        assert!(arrived(&[
            preface,
            &settings,
            &headers_open,
            &continuation_end
        ]));
        // Whatever the reads' boundaries, a byte at a time included; the header block is
        // there with its last byte, not with the frame header that announces it.
        let whole: Vec<u8> = [preface, &settings, &ping, &headers_open, &continuation_end].concat();
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert!(arrived(&bytes));
        assert!(!arrived(&bytes[..bytes.len() - 1]));
        // A payload that looks like a HEADERS frame is skipped as a payload.
        let disguised = frame(0x0, 0, &headers_end);
        assert!(!arrived(&[preface, &settings, &disguised]));
    }

    #[test]
    fn http1_arrives_with_the_blank_line_after_the_first_requests_headers() {
        let request: &[u8] =
            b"POST /v1/templates HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        assert!(arrived(&[request]));
        assert!(!arrived(&[&request[..request.len() - 4]]));
        let bytes: Vec<&[u8]> = request.chunks(1).collect();
        assert!(arrived(&bytes));
        // Starting like the HTTP/2 preface, then not ("PRI" then "POST"-like).
        assert!(arrived(&[b"PRI /x HTTP/1.1\r\nhost: x\r\n\r\n"]));
        assert!(!arrived(&[b"PRI /x HTTP/1.1\r\nhost: x\r\n"]));
        // Empty lines alone are not a request.
        assert!(!arrived(&[b"\r\n\r\n\r\n\r\n"]));
        assert!(arrived(&[b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"]));
        assert!(!arrived(&[b""]));
    }
}
