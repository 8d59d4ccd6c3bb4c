//! Fair shares of the connection-level pools: request-body buffers, watch and download slots, TLS handshakes (issue 21, items 1, 8, 9).

use super::Case;

pub(super) fn cases() -> Vec<Case> {
    Vec::new()
}
