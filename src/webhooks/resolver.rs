//! Webhook names resolved as the system resolves them (getaddrinfo: /etc/hosts, then DNS),
//! keeping only the addresses the [`Policy`] allows, so a name that resolves to loopback, or
//! resolves elsewhere at submit and to a private address now (DNS rebinding), is never
//! connected to.
//!
//! getaddrinfo blocks its thread for as long as DNS takes and cannot be cut short, so it runs
//! on tokio's blocking pool, the threads file storage and the data directory use too. A
//! resolution there takes a slot of [`RESOLVER_SLOTS`] first and holds it until getaddrinfo
//! returns (the slot travels with the blocking call, not with the future that awaits it, so
//! an attempt that times out does not free a slot whose thread is still blocked): however
//! slow DNS is, webhooks hold at most that many of the pool's threads. A resolution that
//! waits longer than [`RESOLVER_SLOT_WAIT`] for a slot fails like a connection that was never
//! made: the attempt is retried later, and nobody's call is refused for it.

use super::destination::Policy;
use hyper_util::client::legacy::connect::dns::Name;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Names resolved at once, each holding a thread of tokio's blocking pool for as long as
/// the system resolver takes (up to its timeout × attempts × servers when DNS is slow:
/// 5 s × 2 × 3 with glibc's defaults): four are ~1 % of the pool's 512 threads, so storage
/// always finds threads, and at a few milliseconds a resolution they still resolve thousands
/// of names a minute (and a receiver's connections are reused, resolved once).
pub const RESOLVER_SLOTS: usize = 4;
/// How long a resolution waits for a slot before its attempt counts as no connection
/// (retried later): far longer than a healthy resolution queued behind the others, half the
/// answer timeout, so a sender slot is not held the whole attempt for a resolver that is stuck.
pub const RESOLVER_SLOT_WAIT: Duration = Duration::from_secs(5);

/// A blocking name lookup: the system's, or a test's.
pub type Lookup = Arc<dyn Fn(&str) -> std::io::Result<Vec<SocketAddr>> + Send + Sync>;

/// The resolver the webhook client connects through.
#[derive(Clone)]
pub struct GuardedResolver {
    policy: Arc<Policy>,
    slots: Arc<Semaphore>,
    slot_wait: Duration,
    lookup: Lookup,
}

impl GuardedResolver {
    /// The system resolver under `policy`, on [`RESOLVER_SLOTS`] slots.
    pub fn new(policy: Arc<Policy>) -> GuardedResolver {
        GuardedResolver::with_lookup(policy, Arc::new(system_lookup), RESOLVER_SLOT_WAIT)
    }

    /// `lookup` instead of the system's, waiting `slot_wait` for a slot (tests).
    pub fn with_lookup(
        policy: Arc<Policy>,
        lookup: Lookup,
        slot_wait: Duration,
    ) -> GuardedResolver {
        GuardedResolver {
            policy,
            slots: Arc::new(Semaphore::new(RESOLVER_SLOTS)),
            slot_wait,
            lookup,
        }
    }

    /// The addresses of `host` the policy allows: none is PermissionDenied (the delivery is
    /// refused), no slot in time TimedOut (retried later).
    pub async fn resolve(&self, host: &str) -> std::io::Result<Vec<SocketAddr>> {
        let slot = tokio::time::timeout(self.slot_wait, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no resolver slot within {:?} to resolve {host}",
                        self.slot_wait
                    ),
                )
            })?
            .map_err(std::io::Error::other)?;
        let (lookup, name) = (self.lookup.clone(), host.to_owned());
        let resolved = tokio::task::spawn_blocking(move || {
            // Held until the lookup returns, whatever became of the caller.
            let _slot = slot;
            lookup(&name)
        })
        .await
        .map_err(std::io::Error::other)??;
        let allowed: Vec<SocketAddr> = resolved
            .iter()
            .copied()
            .filter(|address| self.policy.check_address(address.ip()).is_ok())
            .collect();
        if allowed.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{host} resolves only to refused addresses: {resolved:?}"),
            ));
        }
        Ok(allowed)
    }
}

fn system_lookup(host: &str) -> std::io::Result<Vec<SocketAddr>> {
    Ok((host, 0).to_socket_addrs()?.collect())
}

type Resolving =
    Pin<Box<dyn Future<Output = std::io::Result<std::vec::IntoIter<SocketAddr>>> + Send>>;

impl tower::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolver = self.clone();
        Box::pin(async move { Ok(resolver.resolve(name.as_str()).await?.into_iter()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;
    use std::sync::{Condvar, Mutex};

    /// A lookup that blocks its thread until the gate opens (a name server that hangs),
    /// counting the lookups under way; then answers 127.0.0.1.
    #[derive(Default)]
    struct HangingDns {
        open: Mutex<bool>,
        opened: Condvar,
        blocked: std::sync::atomic::AtomicUsize,
    }

    impl HangingDns {
        fn lookup(self: &Arc<Self>) -> Lookup {
            let dns = self.clone();
            Arc::new(move |_| {
                dns.blocked
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut open = dns.open.lock().unwrap();
                while !*open {
                    open = dns.opened.wait(open).unwrap();
                }
                Ok(vec![SocketAddr::from(([127, 0, 0, 1], 0))])
            })
        }

        fn open(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    /// Opens the gate however the test ends, so that a failure does not leave the runtime
    /// waiting for its blocked threads.
    struct OpenOnDrop(Arc<HangingDns>);

    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.open();
        }
    }

    fn loopback_allowed() -> Arc<Policy> {
        Arc::new(Policy {
            allow_http: true,
            allowed_networks: Policy::parse_networks("127.0.0.0/8").unwrap(),
        })
    }

    /// Issue 42, finding 10: resolutions that hang hold their slots only; storage's calls on
    /// the blocking pool (a pool of a few threads here, so that a resolver without a bound
    /// would fill it) still run, and the resolutions beyond the slots give up, to be retried.
    #[test]
    fn storage_on_the_blocking_pool_proceeds_while_every_resolver_slot_is_held() {
        const BLOCKING_THREADS: usize = RESOLVER_SLOTS + 2;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(BLOCKING_THREADS)
            .enable_all()
            .build()
            .unwrap();
        let dns = Arc::new(HangingDns::default());
        let _open = OpenOnDrop(dns.clone());
        let resolver = GuardedResolver::with_lookup(
            loopback_allowed(),
            dns.lookup(),
            Duration::from_millis(300),
        );
        runtime.block_on(async {
            let mut resolutions = tokio::task::JoinSet::new();
            for _ in 0..4 * BLOCKING_THREADS {
                let mut resolver = resolver.clone();
                resolutions.spawn(async move {
                    let name = Name::from_str("receiver.example").unwrap();
                    tower::Service::call(&mut resolver, name)
                        .await
                        .map(Iterator::count)
                });
            }
            while dns.blocked.load(std::sync::atomic::Ordering::SeqCst) < RESOLVER_SLOTS {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // File storage: a delivery kept in the data directory, on the blocking pool.
            let dir = tempfile::tempdir().unwrap();
            let store = crate::webhooks::store::Deliveries::Directory(Arc::new(
                crate::webhooks::store::DirectoryDeliveries::open(
                    dir.path(),
                    crate::webhooks::store::PendingCaps::per_tenant(10),
                )
                .unwrap(),
            ));
            let stored =
                crate::webhooks::store::tests::stored("msg_1", std::time::SystemTime::now());
            let kept = tokio::time::timeout(Duration::from_secs(10), store.create(&stored)).await;
            assert!(kept.is_ok(), "storage waited behind hanging resolutions");
            kept.unwrap().unwrap();
            assert_eq!(
                dns.blocked.load(std::sync::atomic::Ordering::SeqCst),
                RESOLVER_SLOTS,
                "only the slots' lookups hold threads"
            );
            // The rest waited their turn, then gave up as a connection not made (retried).
            let mut timed_out = 0;
            while timed_out < 4 * BLOCKING_THREADS - RESOLVER_SLOTS {
                let outcome = resolutions.join_next().await.unwrap().unwrap();
                assert_eq!(outcome.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
                timed_out += 1;
            }
            // DNS answers again: the held slots come back, and a new name resolves.
            dns.open();
            while let Some(outcome) = resolutions.join_next().await {
                assert_eq!(outcome.unwrap().unwrap(), 1);
            }
            assert_eq!(resolver.resolve("receiver.example").await.unwrap().len(), 1);
        });
    }

    #[tokio::test]
    async fn a_name_whose_addresses_are_all_refused_is_never_connected_to() {
        let strict = Arc::new(Policy {
            allow_http: true,
            allowed_networks: Vec::new(),
        });
        let mut resolver = GuardedResolver::new(strict);
        // A name that resolves to loopback is refused at resolution, whatever its spelling.
        let resolved =
            tower::Service::call(&mut resolver, Name::from_str("localhost").unwrap()).await;
        assert_eq!(
            resolved.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
    }
}
