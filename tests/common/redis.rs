//! Redis for the tests: the shared server's URL with a key prefix of a test's own, a
//! redis-server of a test's own, and the scenarios run once on each idempotency store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The idempotency store (and job records) a scenario's server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Memory,
    Redis,
}

impl Store {
    /// Puts the server of `settings` on this store (a key prefix of its own on Redis).
    pub fn configure(self, settings: &mut lottie_render::config::ServerSettings) {
        if self == Store::Redis {
            settings.redis.redis_url = Some(redis_url());
            settings.redis.redis_key_prefix = unique_prefix();
        }
    }
}

/// Two tests of each async `scenario(store: Store)`, as `scenario::in_memory` and
/// `scenario::with_redis`. (Only the api binary has such scenarios.)
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test]
                async fn in_memory() {
                    super::$scenario(crate::helpers::Store::Memory).await;
                }

                #[tokio::test]
                async fn with_redis() {
                    super::$scenario(crate::helpers::Store::Redis).await;
                }
            }
        )*
    };
}
#[allow(unused_imports)]
pub(crate) use on_both_stores;

/// The shared Redis of the tests (`./dev test` starts one when none answers).
pub fn redis_url() -> String {
    std::env::var("LOTTIE_RENDER_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

static PREFIXES: AtomicU64 = AtomicU64::new(0);

/// A Redis key prefix no other test (or run) uses.
pub fn unique_prefix() -> String {
    format!(
        "lottie-render-test:{}:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
        PREFIXES.fetch_add(1, Ordering::SeqCst)
    )
}

/// A port nothing listens on now.
pub fn spare_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Attempts, 10 ms apart, to connect to a redis-server just started.
const LISTEN_ATTEMPTS: usize = 500;

/// A redis-server of a test's own on a spare port (so that the test can stop it, pause it or
/// count its clients), stopped when dropped.
pub struct OwnRedis {
    pub port: u16,
    process: Option<std::process::Child>,
    /// Where a persistent one keeps its append-only file.
    persistence: Option<tempfile::TempDir>,
}

impl OwnRedis {
    pub fn start() -> OwnRedis {
        OwnRedis::start_on(spare_port())
    }

    pub fn start_on(port: u16) -> OwnRedis {
        OwnRedis::launch(port, None)
    }

    /// One that keeps every write on disk (an append-only file synced on each write), so
    /// that it can be killed and started again with its data, as a Redis restarted in
    /// production keeps its data.
    pub fn start_persistent() -> OwnRedis {
        OwnRedis::launch(spare_port(), Some(tempfile::tempdir().unwrap()))
    }

    fn launch(port: u16, persistence: Option<tempfile::TempDir>) -> OwnRedis {
        let mut redis = OwnRedis {
            port,
            process: None,
            persistence,
        };
        redis.restart();
        redis
    }

    /// Starts it again on its port (with its data when persistent).
    pub fn restart(&mut self) {
        let mut command = std::process::Command::new("redis-server");
        command.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ]);
        match &self.persistence {
            Some(dir) => command
                .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                .arg(dir.path()),
            None => command.args(["--appendonly", "no"]),
        };
        let process = command
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (./dev installs it)");
        self.process = Some(process);
        for _ in 0..LISTEN_ATTEMPTS {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        panic!("redis-server did not listen on {}", self.port);
    }

    /// Kills it (SIGKILL: no goodbye; what a persistent one acknowledged is on disk already).
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The redis-server's process id (to pause it with SIGSTOP: a slow Redis, not a gone one).
    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("a running redis-server").id()
    }

    /// A connection of the test's own.
    pub async fn connection(&self) -> deadpool_redis::redis::aio::MultiplexedConnection {
        connect(&self.url()).await
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A connection to the Redis at `url`.
pub async fn connect(url: &str) -> deadpool_redis::redis::aio::MultiplexedConnection {
    deadpool_redis::redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
