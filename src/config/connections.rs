//! Settings of the connections the gRPC listener admits ([`crate::app::open_connections`],
//! [`crate::app::first_request`]): how many one address may hold open, and how soon a
//! connection must send its first request.

use std::time::Duration;

/// Connections one peer address (an IPv6 /64) may hold open at once, at most: the cap on its
/// share of the connections (`app::open_connections`), whose budget follows the open files
/// limit. A gRPC client keeps one HTTP/2 connection and multiplexes its calls on it, so an
/// honest address needs a few; 256 leaves room for many clients behind one NAT or node
/// address and for a sidecar's pools, while one address's connections, silent or idle, hold
/// at most 256 descriptors and their memory however many descriptors the host allows.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: u32 = 256;
/// Time a connection has, from its accept, to send the headers of its first request,
/// milliseconds. An honest client connects because it has a call to make: its first request
/// follows the TCP (and TLS: at most `tls::incoming::TLS_HANDSHAKE_TIMEOUT`, 5 s) handshake
/// at once; 10 s is twice the handshake's deadline. A client that connected ahead and stays
/// idle longer is closed and reconnects for its next call (gRPC clients do so by themselves).
/// A silent peer holds its descriptor no longer than this.
pub(crate) const DEFAULT_FIRST_REQUEST_TIMEOUT_MS: u64 = 10_000;

/// Settings of the connections the gRPC listener admits (flattened into `serve`'s flags).
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionSettings {
    /// Connections one peer address (an IPv6 /64 counts as one) may hold open at once at
    /// most (its share of the connections is less while many addresses hold some); one more
    /// is closed at once.
    #[arg(long, env = "LOTTIE_RENDER_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections_per_address: u32,
    /// Time a connection has from its accept to send its first request's headers (after its
    /// TLS handshake, with TLS), milliseconds; beyond it the connection is closed.
    #[arg(long, env = "LOTTIE_RENDER_FIRST_REQUEST_TIMEOUT_MS", default_value_t = DEFAULT_FIRST_REQUEST_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub first_request_timeout_ms: u64,
}

impl Default for ConnectionSettings {
    fn default() -> ConnectionSettings {
        ConnectionSettings {
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            first_request_timeout_ms: DEFAULT_FIRST_REQUEST_TIMEOUT_MS,
        }
    }
}

impl ConnectionSettings {
    pub(crate) fn first_request_timeout(&self) -> Duration {
        Duration::from_millis(self.first_request_timeout_ms)
    }
}
