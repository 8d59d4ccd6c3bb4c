//! Who may call, from the flags: the authentication mode, the API keys and identities files,
//! the mesh sidecar whose identity header is believed, the operators, and the one exception
//! to "anonymous callers only on loopback" ([`AuthSettings::check_exposure`]). Read at start-up to build
//! [`super::Identities`]; flattened into `serve`'s flags.

use super::{AuthMode, OperatorPattern, Operators, TrustedSidecar};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The callers' authentication, from the flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuthSettings {
    /// Whether calls must say who they are: `off` (one anonymous tenant), `optional` (known
    /// identities get their tenant, others the default tenant) or `required` (a call without
    /// a known identity is answered UNAUTHENTICATED).
    #[arg(id = "auth", long = "auth", value_name = "AUTH", env = "LOTTIE_RENDER_AUTH", value_enum, default_value_t = AuthMode::Off)]
    pub mode: AuthMode,
    /// Serve with `--auth off` on an address beyond loopback: anyone who reaches the port is
    /// the one anonymous tenant and may list, render and delete every template. Refused at
    /// start-up unless this is given (a mesh sidecar or network policy that authenticates
    /// callers in front of the pod is the one case for it).
    #[arg(long, env = "LOTTIE_RENDER_ALLOW_UNAUTHENTICATED_NETWORK")]
    pub allow_unauthenticated_network: bool,
    /// API keys, one a line: `TENANT CALLER SHA256HEX` (the hex SHA-256 of the key callers
    /// send as `authorization: Bearer KEY`).
    #[arg(long, env = "LOTTIE_RENDER_API_KEYS")]
    pub api_keys: Option<PathBuf>,
    /// Certificate and sidecar identities, one a line: `TENANT IDENTITY` (a SPIFFE id such
    /// as `spiffe://cluster.local/ns/web/sa/billing`, a certificate's subject CN, or a
    /// Linkerd identity name).
    #[arg(long, env = "LOTTIE_RENDER_IDENTITIES")]
    pub identities: Option<PathBuf>,
    /// Believe the identity the mesh sidecar in front of every call puts in its own header:
    /// `envoy` (Envoy, Istio) reads `x-forwarded-client-cert`, `linkerd` reads
    /// `l5d-client-id`, and the other mesh's header is ignored (that sidecar leaves it as the
    /// caller wrote it). Only behind such a sidecar: anyone else could write the header.
    #[arg(long, env = "LOTTIE_RENDER_TRUST_SIDECAR_IDENTITY", value_enum)]
    pub trust_sidecar_identity: Option<TrustedSidecar>,
    /// The identities that operate the service and may read its status (GetServiceStatus,
    /// `GET /v1/status`: every tenant's queue, workers and refusals), separated by commas:
    /// `TENANT/CALLER` (the caller name of an API key, a certificate's or sidecar's identity)
    /// or `TENANT/*` (every caller of the tenant). With `--auth off` every caller is one.
    #[arg(
        long,
        env = "LOTTIE_RENDER_OPERATORS",
        value_name = "TENANT/CALLER,...",
        value_delimiter = ','
    )]
    pub operators: Vec<OperatorPattern>,
}

/// `serve` was asked to answer anonymous callers beyond this machine (DESIGN.md, "Trust
/// boundaries": the shipped deployment is safe by default).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing to serve {listen} with --auth off: anyone who reaches it could list, render and \
     delete every template; use --auth required with --api-keys (or --identities), listen on \
     127.0.0.1, or say --allow-unauthenticated-network when something in front of the port \
     authenticates callers"
)]
pub struct UnauthenticatedNetworkListen {
    pub listen: SocketAddr,
}

impl AuthSettings {
    /// The operators these settings name (everyone with authentication off).
    pub fn operators(&self) -> Operators {
        Operators::new(self.mode, self.operators.clone())
    }

    /// Whether callers on `listen` (the address actually bound) are authenticated, or
    /// reachable only from this machine, or the operator said that exposure is meant.
    pub fn check_exposure(&self, listen: SocketAddr) -> Result<(), UnauthenticatedNetworkListen> {
        let anonymous = self.mode == AuthMode::Off;
        if anonymous && !listen.ip().is_loopback() && !self.allow_unauthenticated_network {
            return Err(UnauthenticatedNetworkListen { listen });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_callers_beyond_loopback_are_refused_unless_the_operator_says_so() {
        for (listen, mode, allowed, expected_ok) in [
            ("127.0.0.1:50051", AuthMode::Off, false, true),
            ("[::1]:50051", AuthMode::Off, false, true),
            ("0.0.0.0:50051", AuthMode::Off, false, false),
            ("[::]:50051", AuthMode::Off, false, false),
            ("10.1.2.3:50051", AuthMode::Off, false, false),
            ("0.0.0.0:50051", AuthMode::Off, true, true),
            ("0.0.0.0:50051", AuthMode::Required, false, true),
            ("0.0.0.0:50051", AuthMode::Optional, false, true),
        ] {
            let listen: SocketAddr = listen.parse().unwrap();
            let settings = AuthSettings {
                mode,
                allow_unauthenticated_network: allowed,
                ..AuthSettings::default()
            };
            assert_eq!(
                settings.check_exposure(listen).is_ok(),
                expected_ok,
                "{listen} {mode:?} allowed={allowed}"
            );
        }
    }
}
