//! The service's Redis connection (`--redis-url`), shared by the idempotency key store and
//! the shared job records: a deadpool pool whose every call has a deadline (pool wait and
//! connecting included), the key prefix, one pub/sub connection for every subscription of
//! the instance ([`Subscriptions`]), and the compare-and-set scripts both use. Connections
//! open lazily and are re-made after Redis comes back, so a Redis that is down makes calls
//! fail (and callers answer UNAVAILABLE), never the server. However many callers watch,
//! the instance holds at most `pool_size` + 1 connections.

pub mod settings;

use deadpool_redis::redis::{self, AsyncCommands, Script};
use deadpool_redis::{Config, Pool, PoolConfig, Runtime, Timeouts};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::broadcast;

/// `KEYS[1]` becomes `ARGV[2]` (expiry `ARGV[3]` ms) if it holds exactly `ARGV[1]`.
const COMPARE_AND_SET: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0";

/// `KEYS[1]` is deleted if it holds exactly `ARGV[1]`.
const COMPARE_AND_DELETE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// How the service reaches Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub url: String,
    /// Prefix of every key this service writes (several deployments can share one Redis).
    pub key_prefix: String,
    pub pool_size: usize,
    /// Deadline of one call, pool wait and connecting included.
    pub timeout: Duration,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisError {
    #[error("Redis is unreachable: {0}")]
    Unavailable(String),
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
}

pub(crate) fn unavailable(error: impl std::fmt::Display) -> RedisError {
    RedisError::Unavailable(error.to_string())
}

pub struct RedisClient {
    pool: Pool,
    subscriptions: Arc<Subscriptions>,
    prefix: String,
    timeout: Duration,
    compare_and_set: Script,
    compare_and_delete: Script,
}

impl std::fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClient")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A duration as Redis expiry milliseconds (at least 1).
pub(crate) fn millis(duration: Duration) -> u64 {
    duration.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

impl RedisClient {
    pub fn open(settings: &RedisSettings) -> Result<RedisClient, RedisError> {
        let mut config = Config::from_url(settings.url.clone());
        config.pool = Some(PoolConfig {
            max_size: settings.pool_size,
            timeouts: Timeouts {
                wait: Some(settings.timeout),
                create: Some(settings.timeout),
                recycle: Some(settings.timeout),
            },
            ..PoolConfig::default()
        });
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|error| unavailable(format!("bad Redis settings: {error}")))?;
        let client = redis::Client::open(settings.url.as_str()).map_err(unavailable)?;
        Ok(RedisClient {
            pool,
            subscriptions: Arc::new(Subscriptions::new(client, settings.timeout)),
            prefix: settings.key_prefix.clone(),
            timeout: settings.timeout,
            compare_and_set: Script::new(COMPARE_AND_SET),
            compare_and_delete: Script::new(COMPARE_AND_DELETE),
        })
    }

    /// The full Redis key of `suffix` (the prefix in front).
    pub(crate) fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// Runs `work` within the deadline.
    pub(crate) async fn within_deadline<T, E: From<RedisError>>(
        &self,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| E::from(RedisError::Timeout(self.timeout)))?
    }

    /// A pooled connection (call inside [`RedisClient::within_deadline`]).
    pub(crate) async fn connection(&self) -> Result<deadpool_redis::Connection, RedisError> {
        self.pool.get().await.map_err(unavailable)
    }

    /// The messages of `channel` from now on, over the instance's one pub/sub connection
    /// (connected on first use, within the deadline).
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription, RedisError> {
        self.within_deadline(self.subscriptions.subscribe(channel))
            .await
    }

    /// A connection of its own (outside the pool) for commands that block for up to
    /// `longest_block` (XREADGROUP BLOCK): answers may take that long plus the deadline.
    pub(crate) async fn blocking_connection(
        &self,
        longest_block: Duration,
    ) -> Result<redis::aio::MultiplexedConnection, RedisError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(longest_block + self.timeout));
        self.within_deadline(async {
            self.subscriptions
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(unavailable)
        })
        .await
    }

    /// `key` holds `value`, expiring after `ttl`.
    pub(crate) async fn set_expiring(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), RedisError> {
        self.within_deadline(async {
            let mut connection = self.connection().await?;
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(millis(ttl))
                .query_async::<()>(&mut connection)
                .await
                .map_err(unavailable)
        })
        .await
    }

    /// What `key` holds, if anything.
    pub(crate) async fn get(&self, key: &str) -> Result<Option<String>, RedisError> {
        self.within_deadline(async {
            let mut connection = self.connection().await?;
            connection.get(key).await.map_err(unavailable)
        })
        .await
    }

    /// Whether `key` exists.
    pub(crate) async fn exists(&self, key: &str) -> Result<bool, RedisError> {
        self.within_deadline(async {
            let mut connection = self.connection().await?;
            connection.exists(key).await.map_err(unavailable)
        })
        .await
    }

    /// Publishes `message` on `channel`.
    pub(crate) async fn publish(&self, channel: &str, message: &str) -> Result<(), RedisError> {
        self.within_deadline(async {
            let mut connection = self.connection().await?;
            connection
                .publish::<_, _, ()>(channel, message)
                .await
                .map_err(unavailable)
        })
        .await
    }

    /// Runs a script with its keys and arguments (`invocation`) within the deadline.
    pub(crate) async fn run_script<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, RedisError> {
        self.within_deadline(async {
            let mut connection = self.connection().await?;
            invocation
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)
        })
        .await
    }

    /// `key` becomes `new` (expiring after `ttl`) if it holds exactly `expected`.
    pub(crate) async fn compare_and_set(
        &self,
        key: &str,
        expected: &str,
        new: &str,
        ttl: Duration,
    ) -> Result<bool, RedisError> {
        let set: i64 = self
            .run_script(
                self.compare_and_set
                    .key(key)
                    .arg(expected)
                    .arg(new)
                    .arg(millis(ttl)),
            )
            .await?;
        Ok(set == 1)
    }

    /// Deletes `key` if it holds exactly `expected`.
    pub(crate) async fn compare_and_delete(
        &self,
        key: &str,
        expected: &str,
    ) -> Result<bool, RedisError> {
        let deleted: i64 = self
            .run_script(self.compare_and_delete.key(key).arg(expected))
            .await?;
        Ok(deleted == 1)
    }
}

/// Messages a subscriber may fall behind by before it misses some (it is told by the record
/// it re-reads when quiet): a job publishes its state changes and one progress change per
/// percent; cancel requests come one per cancel call.
const SUBSCRIPTION_BACKLOG: usize = 256;

/// Every subscription of the instance over one pub/sub connection, dispatched by channel:
/// however many callers watch jobs of other instances or cancel them, Redis sees one
/// connection and one SUBSCRIBE per channel. When the connection is lost, every open
/// subscription ends (its holder re-reads the state and subscribes again); the next
/// subscription connects anew.
pub(crate) struct Subscriptions {
    client: redis::Client,
    /// Deadline of an UNSUBSCRIBE (subscribing runs within the caller's deadline).
    timeout: Duration,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    /// The connection; its lock also orders SUBSCRIBE and UNSUBSCRIBE calls.
    connection: Arc<tokio::sync::Mutex<Option<HubConnection>>>,
    generations: AtomicU64,
}

/// One channel's subscribers.
struct Channel {
    sender: broadcast::Sender<String>,
    subscribers: usize,
    /// The connection it is subscribed on.
    generation: u64,
}

struct HubConnection {
    generation: u64,
    sink: redis::aio::PubSubSink,
    dispatcher: tokio::task::AbortHandle,
}

/// The channel table stays consistent whatever panicked while it was held (every change is
/// one map operation), so a poisoned lock is used as it is.
fn lock_channels(
    channels: &Mutex<HashMap<String, Channel>>,
) -> MutexGuard<'_, HashMap<String, Channel>> {
    channels
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Subscriptions {
    fn new(client: redis::Client, timeout: Duration) -> Subscriptions {
        Subscriptions {
            client,
            timeout,
            channels: Arc::default(),
            connection: Arc::default(),
            generations: AtomicU64::new(0),
        }
    }

    /// Joins the channel's subscribers when there are any.
    fn join(&self, channel: &str) -> Option<Subscription> {
        let mut channels = lock_channels(&self.channels);
        let entry = channels.get_mut(channel)?;
        entry.subscribers += 1;
        Some(Subscription {
            receiver: entry.sender.subscribe(),
            _membership: Membership {
                channels: Arc::downgrade(&self.channels),
                connection: Arc::downgrade(&self.connection),
                channel: channel.to_owned(),
                generation: entry.generation,
                timeout: self.timeout,
            },
        })
    }

    async fn subscribe(&self, channel: &str) -> Result<Subscription, RedisError> {
        if let Some(subscription) = self.join(channel) {
            return Ok(subscription);
        }
        let mut connection = self.connection.lock().await;
        // Someone may have subscribed while this call waited for the lock.
        if let Some(subscription) = self.join(channel) {
            return Ok(subscription);
        }
        if connection.is_none() {
            let (sink, stream) = self
                .client
                .get_async_pubsub()
                .await
                .map_err(unavailable)?
                .split();
            let generation = self.generations.fetch_add(1, Ordering::SeqCst) + 1;
            let dispatcher = tokio::spawn(dispatch(
                stream,
                generation,
                Arc::downgrade(&self.channels),
                Arc::downgrade(&self.connection),
            ))
            .abort_handle();
            *connection = Some(HubConnection {
                generation,
                sink,
                dispatcher,
            });
        }
        let Some(hub) = connection.as_mut() else {
            return Err(unavailable("the pub/sub connection is gone"));
        };
        if let Err(error) = hub.sink.subscribe(channel).await {
            // The connection is broken: the next subscription makes a new one.
            if let Some(broken) = connection.take() {
                broken.dispatcher.abort();
                forget_generation(&self.channels, broken.generation);
            }
            return Err(unavailable(error));
        }
        let (sender, _) = broadcast::channel(SUBSCRIPTION_BACKLOG);
        lock_channels(&self.channels).insert(
            channel.to_owned(),
            Channel {
                sender,
                subscribers: 0,
                generation: hub.generation,
            },
        );
        drop(connection);
        self.join(channel)
            .ok_or_else(|| unavailable("the pub/sub connection was lost while subscribing"))
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        // The dispatcher holds the connection open; with nobody left to subscribe, it goes.
        if let Ok(mut connection) = self.connection.try_lock() {
            if let Some(connection) = connection.take() {
                connection.dispatcher.abort();
            }
        }
    }
}

/// Ends every subscription made on connection `generation` (their senders go).
fn forget_generation(channels: &Mutex<HashMap<String, Channel>>, generation: u64) {
    lock_channels(channels).retain(|_, channel| channel.generation != generation);
}

/// Hands each message of the connection to its channel's subscribers, until the connection
/// ends; then its subscriptions end too.
async fn dispatch(
    mut stream: redis::aio::PubSubStream,
    generation: u64,
    channels: Weak<Mutex<HashMap<String, Channel>>>,
    connection: Weak<tokio::sync::Mutex<Option<HubConnection>>>,
) {
    while let Some(message) = stream.next().await {
        let Some(channels) = channels.upgrade() else {
            return;
        };
        let Ok(payload) = message.get_payload::<String>() else {
            continue;
        };
        let table = lock_channels(&channels);
        if let Some(channel) = table.get(message.get_channel_name()) {
            if channel.generation == generation {
                // No receiver left is fine: its last subscriber just went.
                let _ = channel.sender.send(payload);
            }
        }
    }
    tracing::warn!("the Redis pub/sub connection closed; watchers re-read the job records");
    if let Some(channels) = channels.upgrade() {
        forget_generation(&channels, generation);
    }
    if let Some(connection) = connection.upgrade() {
        let mut connection = connection.lock().await;
        if connection.as_ref().map(|c| c.generation) == Some(generation) {
            *connection = None;
        }
    }
}

/// The messages of one channel for one subscriber; unsubscribes when the channel's last
/// subscriber drops it.
pub(crate) struct Subscription {
    receiver: broadcast::Receiver<String>,
    _membership: Membership,
}

impl Subscription {
    /// The next message; `None` once the connection was lost (state may have changed
    /// unseen: re-read it).
    pub(crate) async fn next(&mut self) -> Option<String> {
        loop {
            match self.receiver.recv().await {
                Ok(message) => return Some(message),
                // Missed some: the holder's re-read of the record covers them.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

struct Membership {
    channels: Weak<Mutex<HashMap<String, Channel>>>,
    connection: Weak<tokio::sync::Mutex<Option<HubConnection>>>,
    channel: String,
    generation: u64,
    timeout: Duration,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let Some(channels) = self.channels.upgrade() else {
            return;
        };
        {
            let mut table = lock_channels(&channels);
            match table.get_mut(&self.channel) {
                Some(entry) if entry.generation == self.generation => {
                    entry.subscribers = entry.subscribers.saturating_sub(1);
                    if entry.subscribers > 0 {
                        return;
                    }
                    table.remove(&self.channel);
                }
                _ => return,
            }
        }
        // Dropped outside a runtime only at exit, when the connection goes anyway.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (connection, channel, generation, timeout) = (
            self.connection.clone(),
            self.channel.clone(),
            self.generation,
            self.timeout,
        );
        runtime.spawn(async move {
            let Some(connection) = connection.upgrade() else {
                return;
            };
            let mut connection = connection.lock().await;
            // Subscribed again meanwhile (under this lock): it stays.
            if lock_channels(&channels).contains_key(&channel) {
                return;
            }
            if let Some(hub) = connection
                .as_mut()
                .filter(|hub| hub.generation == generation)
            {
                match tokio::time::timeout(timeout, hub.sink.unsubscribe(&channel)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "cannot unsubscribe; the connection is going");
                    }
                    Err(_) => tracing::debug!("unsubscribing timed out"),
                }
            }
        });
    }
}
