//! The hard end of a connection's life: a connection older than its age plus the grace is
//! closed, whatever is still open on it.
//!
//! The age itself is tonic's `Server::max_connection_age`: at the age hyper sends GOAWAY and
//! lets the calls in flight finish. The grace is not tonic's `max_connection_age_grace`: in
//! tonic 0.14.9 setting it replaces the GOAWAY at the age by an abrupt close at age + grace
//! (`connection_timeout_future` answers `ForcefulShutdown` only, never `GracefulShutdown`,
//! once a grace is set), so a client would never be asked to go away, only cut off. Here each
//! accepted socket carries its own deadline instead: once it passes, reads and writes fail,
//! hyper ends the connection and tonic drops it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

/// An accepted connection (a TCP socket by default; any stream, so a TLS acceptor of our own
/// can wrap it or be wrapped) that fails every read and write once its deadline has passed.
#[derive(Debug)]
pub(crate) struct AgedConnection<IO = TcpStream> {
    stream: IO,
    /// Boxed so the connection stays `Unpin`; polled on every read, so an idle connection is
    /// woken (and ended) at the deadline too.
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<IO> AgedConnection<IO> {
    /// `stream`, to be closed `lifetime` from now.
    pub(crate) fn new(stream: IO, lifetime: Duration) -> AgedConnection<IO> {
        AgedConnection {
            stream,
            deadline: Box::pin(tokio::time::sleep(lifetime)),
        }
    }

    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.deadline.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection outlived its maximum age and grace",
            )
        })
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for AgedConnection<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.expired(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for AgedConnection<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(error) = this.expired(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(error) = this.expired(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.expired(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for AgedConnection<IO> {
    // The wrapped stream's, so layers reading the peer address see no difference.
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> IO::ConnectInfo {
        self.stream.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::AgedConnection;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn an_aged_connection_serves_until_its_deadline_then_fails_its_reads() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let mut server = AgedConnection::new(accepted, Duration::from_millis(300));
        client.write_all(b"ping").await.unwrap();
        let mut buffer = [0u8; 4];
        server.read_exact(&mut buffer).await.unwrap();
        assert_eq!(&buffer, b"ping");
        // Nothing more arrives: the pending read ends at the deadline, as an error.
        let read = tokio::time::timeout(Duration::from_secs(10), server.read(&mut buffer))
            .await
            .expect("the read ends at the deadline");
        assert_eq!(read.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        assert!(server.write_all(b"late").await.is_err());
    }
}
