//! The Lua scripts of the shared queue, each one atomic in Redis: what its KEYS and ARGV are
//! and what it answers. The keys they name are described in the module above.

/// Adds a job to its tenant's waiting list if the queue and the tenant's share have room, and
/// writes its record, atomically.
/// KEYS: queue length, tenant counts, job record, job events channel, turns, served,
/// sequence, wake, the tenant's waiting list.
/// ARGV: capacity, tenant, tenant limit (0: none), job id, work JSON, record JSON, record
/// expiry (ms), jobs the tenant holds on this instance outside the queue (followers).
/// Answers {'queued', waiting}, {'full', waiting} or {'tenant', held}.
pub(super) const ENQUEUE: &str = r"
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') + tonumber(ARGV[8])
local limit = tonumber(ARGV[3])
if limit > 0 and held >= limit then
  return {'tenant', held}
end
local waiting = tonumber(redis.call('GET', KEYS[1]) or '0')
if waiting >= tonumber(ARGV[1]) then
  return {'full', waiting}
end
redis.call('RPUSH', KEYS[9], ARGV[4] .. '\n' .. ARGV[5])
redis.call('INCR', KEYS[1])
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
if not redis.call('ZSCORE', KEYS[5], ARGV[2]) then
  local sequence = redis.call('INCR', KEYS[7])
  -- A tenant served since it last held nothing keeps its last turn; one that was not goes
  -- before every served tenant, in order of arrival.
  -- 1e15 is below every turn number (the sequence counts arrivals and turns: far fewer).
  local served = redis.call('HGET', KEYS[6], ARGV[2])
  redis.call('ZADD', KEYS[5], served or (sequence - 1e15), ARGV[2])
end
redis.call('RPUSH', KEYS[8], ARGV[4])
redis.call('LTRIM', KEYS[8], -tonumber(ARGV[1]), -1)
redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7])
redis.call('PUBLISH', KEYS[4], ARGV[6])
return {'queued', waiting + 1}";

/// Takes the next job of the tenant whose turn it is into the stream, delivered to consumer
/// ARGV[2] (its lease starts); answers the XREADGROUP reply, or nil when no job waits.
/// KEYS: turns, served, sequence, queue length, wake, stream, tenant counts.
/// ARGV: group, consumer, waiting list key prefix, '1' when the caller already holds a wake
/// token (it was woken by one).
pub(super) const TAKE: &str = r"
pcall(redis.call, 'XGROUP', 'CREATE', KEYS[6], ARGV[1], '$', 'MKSTREAM')
while true do
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #first == 0 then
    -- Nothing waits: the length and the wake tokens start again from nothing.
    redis.call('DEL', KEYS[4], KEYS[5])
    return false
  end
  local tenant = first[1]
  local list = ARGV[3] .. tenant
  local item = redis.call('LPOP', list)
  if not item then
    redis.call('ZREM', KEYS[1], tenant)
  else
    local sequence = redis.call('INCR', KEYS[3])
    redis.call('HSET', KEYS[2], tenant, sequence)
    if redis.call('LLEN', list) == 0 then
      redis.call('ZREM', KEYS[1], tenant)
    else
      redis.call('ZADD', KEYS[1], sequence, tenant)
    end
    redis.call('DECR', KEYS[4])
    if ARGV[4] ~= '1' then
      redis.call('LPOP', KEYS[5])
    end
    local split = string.find(item, '\n', 1, true)
    if split then
      redis.call('XADD', KEYS[6], '*', 'job', string.sub(item, 1, split - 1),
        'tenant', tenant, 'work', string.sub(item, split + 1))
      return redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1,
        'STREAMS', KEYS[6], '>')
    end
    -- Not an item this version wrote: nobody could render it; its tenant's count goes.
    if redis.call('HINCRBY', KEYS[7], tenant, -1) <= 0 then
      redis.call('HDEL', KEYS[7], tenant)
    end
  end
end";

/// Resets the idle time of entry ARGV[2] if consumer ARGV[3] still holds it (answers 1),
/// else answers 0: it was reclaimed by another instance, or acknowledged.
/// KEYS: stream. ARGV: group, entry id, consumer.
pub(super) const RENEW: &str = r"
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 or pending[1][2] ~= ARGV[3] then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1";

/// Acknowledges and deletes entry ARGV[2]; the first deletion gives the tenant's count back
/// (and a tenant that holds nothing any more loses its last turn).
/// KEYS: stream, tenant counts, served. ARGV: group, entry id, tenant.
pub(super) const ACK: &str = r"
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if redis.call('XDEL', KEYS[1], ARGV[2]) == 1 then
  if redis.call('HINCRBY', KEYS[2], ARGV[3], -1) <= 0 then
    redis.call('HDEL', KEYS[2], ARGV[3])
    redis.call('HDEL', KEYS[3], ARGV[3])
  end
end
return 1";

/// Puts entry ARGV[2] back at the front of its tenant's waiting list if consumer ARGV[3]
/// still holds it (answers 1, else 0), and its tenant's turn before every other's, so that the
/// farm's next free worker takes it; the tenant keeps its count.
/// KEYS: stream, turns, served, queue length, wake, the tenant's waiting list.
/// ARGV: group, entry id, consumer, tenant, job id, work JSON.
pub(super) const HAND_BACK: &str = r"
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 or pending[1][2] ~= ARGV[3] then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('LPUSH', KEYS[6], ARGV[5] .. '\n' .. ARGV[6])
redis.call('INCR', KEYS[4])
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local turn = 0
if #first > 0 then
  turn = tonumber(first[2]) - 1
end
redis.call('ZADD', KEYS[2], turn, ARGV[4])
redis.call('RPUSH', KEYS[5], ARGV[5])
return 1";

/// Announces instance ARGV[1] with ARGV[2] workers for ARGV[3] ms (ARGV[2] = 0: leaves),
/// forgets instances whose announcement ran out, and answers the workers of every live
/// instance and the jobs waiting.
/// KEYS: instances, instance workers, queue length.
pub(super) const ANNOUNCE: &str = r"
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[3]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)) do
  redis.call('ZREM', KEYS[1], gone)
  redis.call('HDEL', KEYS[2], gone)
end
local workers = 0
for _, count in ipairs(redis.call('HVALS', KEYS[2])) do
  workers = workers + tonumber(count)
end
return {workers, tonumber(redis.call('GET', KEYS[3]) or '0')}";
