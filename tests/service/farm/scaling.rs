//! The KEDA ScaledObject shipped in `deploy/` against a running farm instance: the stream,
//! consumer group and list it names are the keys the service really uses (with those Redis
//! types), and what KEDA would measure on them (pending entries, list length) follows the
//! jobs rendering and waiting. So the file cannot drift from the queue's keys unnoticed.

use crate::farm::object_storage::TestBucket;
use crate::farm::shared_queue::{assert_all_succeed, request, start_held_farm};
use crate::helpers::{redis_url, unique_prefix};
use deadpool_redis::redis::{self, aio::MultiplexedConnection, Value};
use std::collections::HashMap;
use std::time::Duration;

const SCALED_OBJECT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/keda-scaledobject.yaml");
/// The prefix the file's key names carry: the server's default `--redis-key-prefix`.
const DEFAULT_PREFIX: &str = "lottie-render:";
/// How long the measured values may take to settle (a submission is queued when answered,
/// but the worker's take and the hold are a process start away on a loaded machine).
const SETTLE: Duration = Duration::from_secs(60);

/// One entry of the ScaledObject's `triggers`: its type, name and metadata.
#[derive(Debug, Default)]
struct Trigger {
    kind: String,
    name: String,
    metadata: HashMap<String, String>,
}

impl Trigger {
    fn field(&self, key: &str) -> &str {
        self.metadata
            .get(key)
            .unwrap_or_else(|| panic!("trigger {} has no `{key}`: {self:?}", self.name))
    }
}

/// A `key: value` line's value, unquoted.
fn value_of(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    Some((key.trim(), value.trim().trim_matches('"')))
}

/// The triggers of the file and its scaling formula, read line by line: the file keeps one
/// field a line below `triggers:` (the last section), which the test holds it to by failing
/// on a trigger without the fields it needs.
fn read_scaled_object(text: &str) -> (Vec<Trigger>, String) {
    let mut triggers: Vec<Trigger> = Vec::new();
    let mut formula = None;
    let mut in_triggers = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(("formula", value)) = value_of(trimmed) {
            formula = Some(value.to_string());
        }
        if trimmed == "triggers:" {
            in_triggers = true;
            continue;
        }
        if !in_triggers {
            continue;
        }
        if let Some(kind) = trimmed.strip_prefix("- type:") {
            triggers.push(Trigger {
                kind: kind.trim().to_string(),
                ..Trigger::default()
            });
            continue;
        }
        let Some(trigger) = triggers.last_mut() else {
            panic!("a line under `triggers:` before the first `- type:`: {line}");
        };
        match value_of(trimmed) {
            Some(("name", name)) => trigger.name = name.to_string(),
            Some(("metadata", "")) | None => {}
            Some((key, value)) => {
                trigger.metadata.insert(key.to_string(), value.to_string());
            }
        }
    }
    (
        triggers,
        formula.expect("the ScaledObject has a scaling formula"),
    )
}

/// A key the file names, moved from the default prefix to the test's own.
fn under_prefix(key: &str, prefix: &str) -> String {
    let bare = key
        .strip_prefix(DEFAULT_PREFIX)
        .unwrap_or_else(|| panic!("{key} does not carry the default prefix {DEFAULT_PREFIX}"));
    format!("{prefix}{bare}")
}

async fn key_type(connection: &mut MultiplexedConnection, key: &str) -> String {
    redis::cmd("TYPE")
        .arg(key)
        .query_async(connection)
        .await
        .unwrap()
}

/// The consumer groups of a stream by name, each with its pending entries (XINFO GROUPS).
async fn groups(connection: &mut MultiplexedConnection, stream: &str) -> HashMap<String, i64> {
    let groups: Vec<HashMap<String, Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(connection)
        .await
        .unwrap();
    groups
        .iter()
        .map(|group| {
            let name = match group.get("name") {
                Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                Some(Value::SimpleString(text)) => text.clone(),
                other => panic!("a group without a name: {other:?}"),
            };
            let pending = match group.get("pending") {
                Some(Value::Int(pending)) => *pending,
                other => panic!("group {name} without a pending count: {other:?}"),
            };
            (name, pending)
        })
        .collect()
}

/// What KEDA reads: the group's pending entries (XPENDING's summary count, as the
/// redis-streams scaler does) and the list's length (LLEN, as the redis scaler does).
async fn measured(
    connection: &mut MultiplexedConnection,
    stream: &str,
    group: &str,
    list: &str,
) -> (i64, i64) {
    let summary: Vec<Value> = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(connection)
        .await
        .unwrap();
    let rendering = match summary.first() {
        Some(Value::Int(count)) => *count,
        other => panic!("an XPENDING summary without a count: {other:?}"),
    };
    let waiting: i64 = redis::cmd("LLEN")
        .arg(list)
        .query_async(connection)
        .await
        .unwrap();
    (waiting, rendering)
}

/// Polls the measured (waiting, rendering) until it is `expected`, for at most `SETTLE`.
async fn settles_at(
    connection: &mut MultiplexedConnection,
    (stream, group, list): (&str, &str, &str),
    expected: (i64, i64),
) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut seen = measured(connection, stream, group, list).await;
    while seen != expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = measured(connection, stream, group, list).await;
    }
    assert_eq!(
        seen, expected,
        "(waiting, rendering) as KEDA would read them"
    );
}

#[tokio::test]
async fn the_scaled_object_names_the_farms_stream_group_and_wake_list_and_measures_jobs_waiting_plus_rendering(
) {
    let text = std::fs::read_to_string(SCALED_OBJECT).unwrap();
    let (triggers, formula) = read_scaled_object(&text);
    let streams = triggers
        .iter()
        .find(|trigger| trigger.kind == "redis-streams")
        .expect("a redis-streams trigger");
    let lists = triggers
        .iter()
        .find(|trigger| trigger.kind == "redis")
        .expect("a redis (list) trigger");
    // The pending-entries mode, not the lag or the stream's length.
    streams.field("pendingEntriesCount");
    lists.field("listLength");
    // The formula adds the two triggers: jobs waiting plus jobs rendering.
    let mut terms: Vec<&str> = formula.split('+').map(str::trim).collect();
    terms.sort_unstable();
    let mut names = vec![streams.name.as_str(), lists.name.as_str()];
    names.sort_unstable();
    assert_eq!(terms, names, "formula {formula:?}");

    let bucket = TestBucket::create().await;
    let (redis_address, prefix) = (redis_url(), unique_prefix());
    let stream = under_prefix(streams.field("stream"), &prefix);
    let group = streams.field("consumerGroup");
    let list = under_prefix(lists.field("listName"), &prefix);
    let keys = (stream.as_str(), group, list.as_str());
    let mut connection = redis::Client::open(redis_address.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    // One instance with one worker, its renders held until released.
    let (_hold_dirs, holds, farm, template) =
        start_held_farm(1, &redis_address, &prefix, &bucket, &[]).await;
    let mut ids = vec![farm[0].submit(request(&template, 0)).await.job_id];
    holds[0].wait_for_held(1).await;
    settles_at(&mut connection, keys, (0, 1)).await;
    assert_eq!(key_type(&mut connection, &stream).await, "stream");
    let groups = groups(&mut connection, &stream).await;
    assert_eq!(
        groups.get(group),
        Some(&1),
        "the groups of {stream}: {groups:?}"
    );

    // Two more wait behind the held render: the backlog rises by two.
    for variant in 1..3 {
        ids.push(farm[0].submit(request(&template, variant)).await.job_id);
    }
    settles_at(&mut connection, keys, (2, 1)).await;
    assert_eq!(key_type(&mut connection, &list).await, "list");

    // Released, every job ends and both measures fall back to nothing.
    holds[0].let_go();
    assert_all_succeed(&farm[0], &ids).await;
    settles_at(&mut connection, keys, (0, 0)).await;
}
