//! Each tenant's jobs in Redis, for ListRenderJobs across the farm: the sorted set
//! `{prefix}tenant-jobs:{tenant}`, every member at score 0 and named
//! `<created ms, 20 digits>:<job id>`, so that the set's lexicographic order is the listing
//! order (oldest first; read backwards) and a page token's position is a member to read
//! below (`ZREVRANGEBYLEX … (member - LIMIT`).
//!
//! Kept with the records, by the scripts that write them ([`super::INDEX_WRITTEN`]): a job's
//! member is added when its record is written (atomically with it), the index lives the
//! retention past the latest write (as long as the record written last), a job forgotten
//! here ([`SharedJobs::forget`]) leaves it with its record (one transaction), and a member
//! whose record expired is removed by the first listing that reads it. Bounded: a new member
//! makes the index keep only its newest [`MAX_INDEXED_JOBS_PER_TENANT`].
//!
//! What one ListRenderJobs call costs Redis: at most [`MAX_JOBS_EXAMINED_PER_LIST`] members
//! read, in batches of [`LIST_BATCH`], each batch two round trips: one `ZREVRANGEBYLEX`
//! (O(log N + batch), N the tenant's members) and one `MGET` of the batch's records (O(batch);
//! a record is some hundreds of bytes of JSON, so at most a few hundred KB a call); one
//! `EXISTS` per distinct instance owning a listed job that has not ended (is it still alive;
//! one or a few in a running farm, at most one per record read after many restarts), and one
//! `ZREM` of the members whose records are gone. So 10 round trips for the index and the
//! records, whatever the tenant holds and whatever its filters keep (a member this version
//! cannot read counts as examined and moves the cursor on), and every call is charged to the
//! tenant by its request rate.

use super::{unavailable, SharedError, SharedJobs};
use crate::auth::TenantId;
use crate::jobs::listing::{walk, JobPage, JobQuery, ListPosition, MAX_JOBS_EXAMINED_PER_LIST};
use crate::jobs::Job;
use deadpool_redis::redis;
use std::collections::HashMap;
use uuid::Uuid;

/// Members one tenant's index keeps at most (its newest): ten instances' worth of the jobs an
/// instance keeps per tenant by default (`--max-retained-jobs-per-tenant`, 10,000), some
/// 6 MB of Redis per tenant at the most. A tenant over it loses its oldest jobs from the
/// listing only (GetRenderJob still answers them until their records expire).
pub const MAX_INDEXED_JOBS_PER_TENANT: usize = 100_000;
/// Members read per round trip: a page's worth (the largest page is 100).
const LIST_BATCH: usize = 100;

/// The index member of the job at `position`.
pub(crate) fn index_member(position: ListPosition) -> String {
    format!("{:020}:{}", position.created_ms, position.id)
}

/// The position a member names (`None`: not a member this version writes).
fn member_position(member: &str) -> Option<ListPosition> {
    let (millis, id) = member.split_once(':')?;
    Some(ListPosition {
        created_ms: millis.parse().ok()?,
        id: Uuid::try_parse(id).ok()?,
    })
}

/// One batch of the index read: the members below the cursor, newest first, and the
/// records of the first `examined` of them (the one more read tells whether more are left).
struct Batch {
    members: Vec<String>,
    records: Vec<Option<String>>,
}

impl SharedJobs {
    pub(super) fn tenant_index_key(&self, tenant: &TenantId) -> String {
        self.redis.key(&format!("tenant-jobs:{tenant}"))
    }

    /// Removes the record of `tenant`'s job at `position` and its member of the tenant's
    /// index, together (a job this instance evicted to make room: every instance answers
    /// for it as gone, and its idempotency key is freed).
    pub(crate) async fn forget(
        &self,
        tenant: &TenantId,
        position: ListPosition,
    ) -> Result<(), SharedError> {
        let record = self.job_key(position.id);
        let index = self.tenant_index_key(tenant);
        self.redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::pipe()
                    .atomic()
                    .del(&record)
                    .ignore()
                    .zrem(&index, index_member(position))
                    .ignore()
                    .query_async::<()>(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await
    }

    /// One page of `tenant`'s jobs across the farm, as `query` asks. Each record read is
    /// handed to `current`, which answers the job as the caller is to see it (this
    /// instance's newer snapshot) or `None` (not to be shown: evicted here).
    pub(crate) async fn list(
        &self,
        tenant: &TenantId,
        query: &JobQuery,
        current: impl Fn(Job) -> Option<Job>,
    ) -> Result<JobPage, SharedError> {
        let index = self.tenant_index_key(tenant);
        let mut read: Vec<(ListPosition, Option<Job>)> = Vec::new();
        let mut gone = Vec::new();
        let mut alive = HashMap::new();
        // The member to read below, raw, so that a member this version cannot read still
        // moves it on (and counts as examined: the bound holds whatever the index holds).
        let mut below = query.after.map_or_else(
            || "+".to_owned(),
            |after| format!("({}", index_member(after)),
        );
        let mut unreadable = 0;
        let mut kept = 0;
        // Whether members are left past the last one read.
        let mut more = false;
        while kept < query.limit && read.len() + unreadable < MAX_JOBS_EXAMINED_PER_LIST {
            let examined = LIST_BATCH.min(MAX_JOBS_EXAMINED_PER_LIST - read.len() - unreadable);
            let batch = self.read_batch(&index, &below, examined).await?;
            more = batch.members.len() > examined;
            for (at, (member, record)) in batch.members.iter().zip(batch.records).enumerate() {
                below = format!("({member}");
                let Some(position) = member_position(member) else {
                    gone.push(member.clone());
                    unreadable += 1;
                    continue;
                };
                let job = match record.map(|json| serde_json::from_str::<Job>(&json)) {
                    None => {
                        gone.push(member.clone());
                        None
                    }
                    Some(Err(error)) => {
                        tracing::warn!(job_id = %position.id, %error, "a damaged job record is not listed");
                        None
                    }
                    Some(Ok(job)) if job.tenant == *tenant && job.id == position.id => {
                        current(self.as_read(job, &mut alive).await?)
                    }
                    Some(Ok(_)) => None,
                };
                kept += usize::from(job.as_ref().is_some_and(|job| query.filter.keeps(job)));
                read.push((position, job));
                if kept >= query.limit {
                    more = batch.members.len() > at + 1;
                    break;
                }
            }
            if !more {
                break;
            }
        }
        self.remove_gone(&index, &gone).await;
        // The walk stops at the limit or the bound, where this loop stopped, and only peeks
        // past it: one more item, never examined, says that more are left.
        let past_the_last = more.then(|| (ListPosition::default(), None));
        Ok(walk(query, read.into_iter().chain(past_the_last)))
    }

    /// The members of `index` below `below` (a `ZREVRANGEBYLEX` bound: `+` for the newest,
    /// `(member` below one), `examined` of them with their records and one more when there
    /// is one.
    async fn read_batch(
        &self,
        index: &str,
        below: &str,
        examined: usize,
    ) -> Result<Batch, SharedError> {
        self.redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                let members: Vec<String> = redis::cmd("ZREVRANGEBYLEX")
                    .arg(index)
                    .arg(below)
                    .arg("-")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(examined + 1)
                    .query_async(&mut connection)
                    .await
                    .map_err(unavailable)?;
                let keys: Vec<String> = members
                    .iter()
                    .take(examined)
                    .map(|member| {
                        member_position(member).map_or_else(String::new, |p| self.job_key(p.id))
                    })
                    .collect();
                let records: Vec<Option<String>> = if keys.is_empty() {
                    Vec::new()
                } else {
                    redis::cmd("MGET")
                        .arg(&keys)
                        .query_async(&mut connection)
                        .await
                        .map_err(unavailable)?
                };
                Ok(Batch { members, records })
            })
            .await
    }

    /// Removes from `index` the members whose records are gone (expired, or not members of
    /// ours); a failure only leaves them for the next listing.
    async fn remove_gone(&self, index: &str, gone: &[String]) {
        if gone.is_empty() {
            return;
        }
        let removed = self
            .redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                redis::cmd("ZREM")
                    .arg(index)
                    .arg(gone)
                    .query_async::<()>(&mut connection)
                    .await
                    .map_err(unavailable)
            })
            .await;
        if let Err(error) = removed {
            tracing::debug!(%error, "cannot remove listed jobs whose records are gone");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::listing::JobFilter;
    use crate::jobs::test_support::{gif_fingerprint, queued_job, test_redis};
    use std::time::{Duration, UNIX_EPOCH};

    /// Three jobs of `tenant`, created a millisecond apart, oldest first.
    fn three_jobs(tenant: &TenantId) -> Vec<Job> {
        (0..3)
            .map(|i| {
                let mut job = queued_job(tenant.clone(), gif_fingerprint(tenant, &i.to_string()));
                job.created_at = UNIX_EPOCH + Duration::from_millis(1_000 + i);
                job.version = 1;
                job
            })
            .collect()
    }

    #[tokio::test]
    async fn the_index_follows_the_records_written_forgotten_and_expired() {
        let prefix = format!("test-tenant-index-{}:", Uuid::new_v4());
        let records = SharedJobs::new(test_redis(&prefix), Duration::from_secs(60));
        let (acme, globex) = (
            TenantId::parse("acme").unwrap(),
            TenantId::parse("globex").unwrap(),
        );
        let jobs = three_jobs(&acme);
        for job in &jobs {
            records.publish(job).await.unwrap();
            // A later snapshot of the same job is the same member.
            let mut running = job.clone();
            running.version = 2;
            records.publish(&running).await.unwrap();
        }
        let query = JobQuery {
            after: None,
            filter: JobFilter::default(),
            limit: 10,
        };
        let listed = |page: JobPage| page.jobs.iter().map(|job| job.id).collect::<Vec<_>>();
        let page = records.list(&acme, &query, Some).await.unwrap();
        assert_eq!(listed(page), [jobs[2].id, jobs[1].id, jobs[0].id]);
        assert_eq!(
            records.list(&globex, &query, Some).await.unwrap(),
            JobPage::default()
        );
        // Forgotten: its record and its member go together.
        records
            .forget(&acme, ListPosition::of(&jobs[1]))
            .await
            .unwrap();
        // Expired (its record gone by itself): its member goes with the listing that finds it.
        let index = records.tenant_index_key(&acme);
        let mut connection = records.redis().connection().await.unwrap();
        let expired: () = redis::cmd("DEL")
            .arg(records.job_key(jobs[0].id))
            .query_async(&mut connection)
            .await
            .unwrap();
        let page = records.list(&acme, &query, Some).await.unwrap();
        assert_eq!((listed(page), expired), (vec![jobs[2].id], ()));
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(&index)
            .arg(0)
            .arg(-1)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(members, [index_member(ListPosition::of(&jobs[2]))]);
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&index)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(
            ttl > 0 && ttl <= 60_000,
            "the index lives as long as its records: {ttl}"
        );
    }

    #[tokio::test]
    async fn members_this_version_cannot_read_are_examined_passed_and_removed() {
        let prefix = format!("test-tenant-index-{}:", Uuid::new_v4());
        let records = SharedJobs::new(test_redis(&prefix), Duration::from_secs(60));
        let acme = TenantId::parse("acme").unwrap();
        let jobs = three_jobs(&acme);
        for job in &jobs {
            records.publish(job).await.unwrap();
        }
        // More unreadable members than a batch, all sorting above the jobs (`~` > digits):
        // the cursor must move past them, or the same batch would be read forever.
        let index = records.tenant_index_key(&acme);
        let mut connection = records.redis().connection().await.unwrap();
        for n in 0..LIST_BATCH + 50 {
            let added: i64 = redis::cmd("ZADD")
                .arg(&index)
                .arg(0)
                .arg(format!("~written by another version {n:04}"))
                .query_async(&mut connection)
                .await
                .unwrap();
            assert_eq!(added, 1);
        }
        let query = JobQuery {
            after: None,
            filter: JobFilter::default(),
            limit: 10,
        };
        let page = tokio::time::timeout(Duration::from_secs(30), records.list(&acme, &query, Some))
            .await
            .expect("the listing ends")
            .unwrap();
        let listed: Vec<Uuid> = page.jobs.iter().map(|job| job.id).collect();
        assert_eq!(listed, [jobs[2].id, jobs[1].id, jobs[0].id]);
        let left: i64 = redis::cmd("ZCARD")
            .arg(&index)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(left, 3, "the unreadable members were removed");
    }

    #[test]
    fn members_sort_as_the_listing_order_and_read_back_as_their_positions() {
        let older = ListPosition {
            created_ms: 9_999,
            id: Uuid::max(),
        };
        let newer = ListPosition {
            created_ms: 10_000,
            id: Uuid::nil(),
        };
        assert!(index_member(older) < index_member(newer));
        assert!(older < newer);
        for position in [older, newer] {
            assert_eq!(member_position(&index_member(position)), Some(position));
        }
        assert_eq!(member_position("10000"), None);
        assert_eq!(member_position("x:y"), None);
    }
}
