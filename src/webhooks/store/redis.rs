//! Deliveries in Redis (a farm), beside the job records: `webhooks:d:<id>` holds a delivery,
//! `webhooks:due:<tenant>` orders a tenant's due ones by time, `webhooks:tenants` names the
//! tenants with due ones. Each step is one script, so the bounds are checked and a claim
//! taken atomically across instances. Tenant names are plain (letters, digits, `.`, `_`,
//! `-`), so they are safe in a key.

use super::{Full, Kept, PendingCaps, StoreError, Stored, MAX_PENDING_DELIVERIES};
use crate::redis_client::{millis, RedisClient};
use crate::webhooks::delivery::State;
use deadpool_redis::redis::Script;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Creates a delivery once: KEYS record, the tenant's due index, tenants; ARGV json, due
/// time (ms), ttl (ms), id, tenant cap, instance cap, the not-kept record, tenant, due index
/// prefix. Answers 1 created, 0 exists, -2 the tenant is full, -1 the instance is (the
/// not-kept record written instead).
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local full = 0
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  full = -2
else
  local total = 0
  for _, tenant in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    total = total + redis.call('ZCARD', ARGV[9] .. tenant)
  end
  if total >= tonumber(ARGV[6]) then full = -1 end
end
if full ~= 0 then
  redis.call('SET', KEYS[1], ARGV[7], 'PX', ARGV[3])
  return full
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
redis.call('SADD', KEYS[3], ARGV[8])
return 1
";

/// Counts the due deliveries of every tenant: KEYS tenants; ARGV now (ms), cap, due index
/// prefix. Answers tenant, count, tenant, count… (a tenant with none left leaves the set).
const DUE: &str = r"
local counts = {}
for _, tenant in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[3] .. tenant
  if redis.call('EXISTS', key) == 0 then
    redis.call('SREM', KEYS[1], tenant)
  else
    local count = redis.call('ZCOUNT', key, '-inf', ARGV[1])
    if count > 0 then
      table.insert(counts, tenant)
      table.insert(counts, tostring(math.min(count, tonumber(ARGV[2]))))
    end
  end
end
return counts
";

/// The earliest time (ms) of any tenant's due index, or nil when none has an entry: KEYS
/// tenants; ARGV due index prefix.
const EARLIEST: &str = r"
local earliest = nil
for _, tenant in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local first = redis.call('ZRANGE', ARGV[1] .. tenant, 0, 0, 'WITHSCORES')
  if first[2] then
    local at = tonumber(first[2])
    if earliest == nil or at < earliest then earliest = at end
  end
end
if earliest == nil then return false end
return tostring(earliest)
";

/// Claims due deliveries: ARGV now (ms), lease end (ms), record prefix, due index prefix,
/// then tenant, count pairs. Answers the records (a missing one, expired, leaves the index).
const CLAIM: &str = r"
local found = {}
for i = 5, #ARGV, 2 do
  local key = ARGV[4] .. ARGV[i]
  local ids = redis.call('ZRANGEBYSCORE', key, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[i + 1]))
  for _, id in ipairs(ids) do
    local record = redis.call('GET', ARGV[3] .. id)
    if record then
      redis.call('ZADD', key, ARGV[2], id)
      table.insert(found, record)
    else
      redis.call('ZREM', key, id)
    end
  end
end
return found
";

/// Keeps a delivery: KEYS record, the tenant's due index, tenants; ARGV json, ttl (ms), id,
/// due time (ms) or '' (ended), tenant.
const PUT: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[2], ARGV[3])
else
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
  redis.call('SADD', KEYS[3], ARGV[5])
end
return 1
";

/// Moves up to ARGV[3] entries of the one due index of earlier versions (KEYS[1]) to their
/// tenants' (KEYS[2] the tenants; ARGV record prefix, due index prefix, batch). Answers how
/// many it moved.
const ADOPT: &str = r"
local entries = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local id, at = entries[i], entries[i + 1]
  local record = redis.call('GET', ARGV[1] .. id)
  if record then
    local read, stored = pcall(cjson.decode, record)
    if read and type(stored.tenant) == 'string' then
      redis.call('ZADD', ARGV[2] .. stored.tenant, at, id)
      redis.call('SADD', KEYS[2], stored.tenant)
    end
  end
  redis.call('ZREM', KEYS[1], id)
end
return #entries / 2
";

/// Entries of the earlier due index moved per script run: a short script, run until none
/// is left.
const ADOPT_BATCH: usize = 1000;

/// The deliveries of every instance on one Redis.
#[derive(Debug)]
pub struct RedisDeliveries {
    redis: Arc<RedisClient>,
    tenants: String,
    due_prefix: String,
    /// The one due index of earlier versions, taken over at start.
    single_index: String,
    record_prefix: String,
    /// How long a record is kept: its retry window and, after it, as long as jobs are.
    ttl: Duration,
    caps: PendingCaps,
    create: Script,
    due: Script,
    earliest: Script,
    claim: Script,
    put: Script,
    adopt: Script,
}

fn unix_millis(time: SystemTime) -> u64 {
    millis(
        time.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

impl RedisDeliveries {
    pub fn new(redis: Arc<RedisClient>, ttl: Duration, caps: PendingCaps) -> RedisDeliveries {
        RedisDeliveries {
            tenants: redis.key("webhooks:tenants"),
            due_prefix: redis.key("webhooks:due:"),
            single_index: redis.key("webhooks:due"),
            record_prefix: redis.key("webhooks:d:"),
            redis,
            ttl,
            caps,
            create: Script::new(CREATE),
            due: Script::new(DUE),
            earliest: Script::new(EARLIEST),
            claim: Script::new(CLAIM),
            put: Script::new(PUT),
            adopt: Script::new(ADOPT),
        }
    }

    #[cfg(test)]
    pub(super) fn client(&self) -> &RedisClient {
        &self.redis
    }

    fn record_key(&self, id: &str) -> String {
        format!("{}{id}", self.record_prefix)
    }

    fn due_key(&self, tenant: &str) -> String {
        format!("{}{tenant}", self.due_prefix)
    }

    pub(super) async fn create(&self, stored: &Stored) -> Result<Kept, StoreError> {
        let at = match stored.delivery.state {
            State::Due(at) => at,
            _ => SystemTime::now(),
        };
        let answer: i64 = self
            .redis
            .run_script(
                self.create
                    .key(self.record_key(&stored.delivery.id))
                    .key(self.due_key(&stored.tenant))
                    .key(&self.tenants)
                    .arg(serde_json::to_string(stored)?)
                    .arg(unix_millis(at))
                    .arg(millis(self.ttl))
                    .arg(&stored.delivery.id)
                    .arg(self.caps.per_tenant)
                    .arg(self.caps.instance)
                    .arg(serde_json::to_string(&stored.not_kept())?)
                    .arg(&stored.tenant)
                    .arg(&self.due_prefix),
            )
            .await?;
        Ok(match answer {
            1 => Kept::New,
            -2 => Kept::NotKept(Full::Tenant),
            -1 => Kept::NotKept(Full::Instance),
            _ => Kept::Before,
        })
    }

    pub(super) async fn due(
        &self,
        now: SystemTime,
        cap: usize,
    ) -> Result<Vec<(String, usize)>, StoreError> {
        self.due_until(&unix_millis(now).to_string(), cap).await
    }

    /// The tenants with deliveries whose time is at most `until` (a score: ms, or `+inf`).
    async fn due_until(&self, until: &str, cap: usize) -> Result<Vec<(String, usize)>, StoreError> {
        let flat: Vec<String> = self
            .redis
            .run_script(
                self.due
                    .key(&self.tenants)
                    .arg(until)
                    .arg(cap)
                    .arg(&self.due_prefix),
            )
            .await?;
        Ok(flat
            .chunks_exact(2)
            .filter_map(|pair| Some((pair[0].clone(), pair[1].parse().ok()?)))
            .collect())
    }

    pub(super) async fn claim(
        &self,
        claims: &[(String, usize)],
        now: SystemTime,
    ) -> Result<Vec<Stored>, StoreError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = self.claim.prepare_invoke();
        invocation
            .arg(unix_millis(now))
            .arg(unix_millis(now + super::CLAIM_LEASE))
            .arg(&self.record_prefix)
            .arg(&self.due_prefix);
        for (tenant, count) in claims {
            invocation.arg(tenant).arg(*count);
        }
        let records: Vec<String> = self.redis.run_script(&invocation).await?;
        Ok(records
            .iter()
            .filter_map(|record| match serde_json::from_str(record) {
                Ok(stored) => Some(stored),
                Err(error) => {
                    tracing::warn!(%error, "skipping an unreadable webhook delivery");
                    None
                }
            })
            .collect())
    }

    pub(super) async fn put(&self, stored: &Stored) -> Result<(), StoreError> {
        let due = match stored.delivery.state {
            State::Due(at) => unix_millis(at).to_string(),
            _ => String::new(),
        };
        let _: i64 = self
            .redis
            .run_script(
                self.put
                    .key(self.record_key(&stored.delivery.id))
                    .key(self.due_key(&stored.tenant))
                    .key(&self.tenants)
                    .arg(serde_json::to_string(stored)?)
                    .arg(millis(self.ttl))
                    .arg(&stored.delivery.id)
                    .arg(due)
                    .arg(&stored.tenant),
            )
            .await?;
        Ok(())
    }

    pub(super) async fn get(&self, ids: &[String]) -> Result<Vec<Stored>, StoreError> {
        let mut found = Vec::new();
        for id in ids {
            if let Some(record) = self.redis.get(&self.record_key(id)).await? {
                found.push(serde_json::from_str(&record)?);
            }
        }
        Ok(found)
    }

    pub(super) async fn pending(&self) -> Result<usize, StoreError> {
        // Claimed ones too: their time is their claim's end.
        let counts = self.due_until("+inf", MAX_PENDING_DELIVERIES).await?;
        Ok(counts.iter().map(|(_, count)| count).sum())
    }

    /// The earliest time a pending delivery is due at (a claimed one's is its claim's end).
    pub(super) async fn earliest_due(&self) -> Result<Option<SystemTime>, StoreError> {
        let earliest: Option<String> = self
            .redis
            .run_script(self.earliest.key(&self.tenants).arg(&self.due_prefix))
            .await?;
        Ok(earliest
            .and_then(|ms| ms.parse::<f64>().ok())
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0.0) as u64)))
    }

    /// Moves the deliveries of an earlier version's single due index to their tenants'
    /// (a restart onto this version loses none); nothing to do after the first run.
    pub(super) async fn adopt_single_index(&self) -> Result<(), StoreError> {
        loop {
            let moved: usize = self
                .redis
                .run_script(
                    self.adopt
                        .key(&self.single_index)
                        .key(&self.tenants)
                        .arg(&self.record_prefix)
                        .arg(&self.due_prefix)
                        .arg(ADOPT_BATCH),
                )
                .await?;
            if moved < ADOPT_BATCH {
                return Ok(());
            }
        }
    }
}
