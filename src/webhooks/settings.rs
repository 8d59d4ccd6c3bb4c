//! The webhook flags: who signs, where deliveries may go, how long they are retried, how
//! many are sent at once.

use super::destination::Policy;
use super::store::PendingCaps;
use std::path::PathBuf;
use std::time::Duration;

/// Hours a delivery is retried by default (the 24 h: a receiver down for a night
/// still gets its events in the morning).
pub const DEFAULT_WEBHOOK_RETRY_HOURS: u32 = 24;
/// Deliveries in flight at once on one instance by default: each holds a socket and a few
/// KiB for at most the answer timeout, so 64 cost nothing and deliver thousands a minute.
pub const DEFAULT_WEBHOOK_CONCURRENCY: u32 = 64;
/// Deliveries one tenant may have waiting by default: the default bound of the jobs a tenant
/// keeps (`--max-retained-jobs-per-tenant`), so its waiting events take no more room than
/// its jobs may (a day of one event every 9 s with its receiver down), and ten tenants at
/// it fill the instance's `webhooks::store::MAX_PENDING_DELIVERIES` as ten tenants at their
/// bound fill the jobs kept.
pub const DEFAULT_WEBHOOK_MAX_PENDING_PER_TENANT: u32 = 10_000;

#[derive(Debug, Clone, clap::Args)]
pub struct WebhookSettings {
    /// Signing secrets, one a line: `TENANT whsec_BASE64` (two lines for one tenant during a
    /// rotation: two signatures). Re-read when it changes. Without it every tenant's
    /// webhooks are signed with one secret generated at start and logged once.
    #[arg(long, env = "LOTTIE_RENDER_WEBHOOK_SECRETS")]
    pub webhook_secrets: Option<PathBuf>,
    /// Accept `http://` webhook URLs too (tests, closed networks): the body and its
    /// signature then travel in clear.
    #[arg(long, env = "LOTTIE_RENDER_WEBHOOK_ALLOW_HTTP")]
    pub webhook_allow_http: bool,
    /// Networks (`CIDR,CIDR,…`) whose addresses webhooks may reach although they are
    /// loopback, private or link-local (a receiver inside the cluster).
    #[arg(long, env = "LOTTIE_RENDER_WEBHOOK_ALLOW_NETWORKS", value_parser = parse_networks)]
    pub webhook_allow_networks: Option<Networks>,
    /// How long a delivery is retried before it is given up, hours.
    #[arg(long, env = "LOTTIE_RENDER_WEBHOOK_RETRY_HOURS", default_value_t = DEFAULT_WEBHOOK_RETRY_HOURS, value_parser = clap::value_parser!(u32).range(1..=168))]
    pub webhook_retry_hours: u32,
    /// Deliveries in flight at once on this instance (each destination has at most
    /// `webhooks::dispatch::MAX_PER_DESTINATION` of them).
    #[arg(long, env = "LOTTIE_RENDER_WEBHOOK_CONCURRENCY", default_value_t = DEFAULT_WEBHOOK_CONCURRENCY, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub webhook_concurrency: u32,
    /// Deliveries one tenant may have waiting (its events not yet delivered, refused or
    /// expired), never more than `--max-retained-jobs-per-tenant`; an event beyond it is not
    /// sent, and its job shows it (REFUSED, no attempt).
    #[arg(long, env = "LOTTIE_RENDER_WEBHOOK_MAX_PENDING_PER_TENANT", default_value_t = DEFAULT_WEBHOOK_MAX_PENDING_PER_TENANT, value_parser = clap::value_parser!(u32).range(1..=super::store::MAX_PENDING_DELIVERIES as i64))]
    pub webhook_max_pending_per_tenant: u32,
    /// How long a receiver has to answer (tests shorten it); not a flag.
    #[arg(skip)]
    pub answer_timeout: Option<Duration>,
}

/// The networks of `--webhook-allow-networks`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Networks(pub Vec<ipnet::IpNet>);

fn parse_networks(list: &str) -> Result<Networks, String> {
    Policy::parse_networks(list).map(Networks)
}

impl Default for WebhookSettings {
    fn default() -> WebhookSettings {
        WebhookSettings {
            webhook_secrets: None,
            webhook_allow_http: false,
            webhook_allow_networks: None,
            webhook_retry_hours: DEFAULT_WEBHOOK_RETRY_HOURS,
            webhook_concurrency: DEFAULT_WEBHOOK_CONCURRENCY,
            webhook_max_pending_per_tenant: DEFAULT_WEBHOOK_MAX_PENDING_PER_TENANT,
            answer_timeout: None,
        }
    }
}

impl WebhookSettings {
    /// Where deliveries may go.
    pub fn policy(&self) -> Policy {
        Policy {
            allow_http: self.webhook_allow_http,
            allowed_networks: self.webhook_allow_networks.clone().unwrap_or_default().0,
        }
    }

    /// The bounds of the deliveries waiting: a tenant's within the jobs it may keep
    /// (`retained_per_tenant`).
    pub fn pending_caps(&self, retained_per_tenant: u32) -> PendingCaps {
        PendingCaps::per_tenant(
            self.webhook_max_pending_per_tenant
                .min(retained_per_tenant)
                .max(1) as usize,
        )
    }

    /// How long a delivery is retried.
    pub fn window(&self) -> Duration {
        Duration::from_secs(u64::from(self.webhook_retry_hours) * 3600)
    }
}
