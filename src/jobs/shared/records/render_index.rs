//! The render index in Redis: which job renders (or rendered) each fingerprint, so that
//! identical requests on any instance join one render. Claimed with SET NX, replaced and
//! cleared compare-and-set, so two instances cannot both take a fingerprint over.

use super::{unavailable, RenderClaim, SharedError, SharedJobs};
use crate::jobs::Fingerprint;
use crate::redis_client::millis;
use deadpool_redis::redis::{self, AsyncCommands};
use uuid::Uuid;

impl SharedJobs {
    /// The job the render index names for `fingerprint`, if any (reads only).
    pub(crate) async fn render_of(
        &self,
        fingerprint: &Fingerprint,
    ) -> Result<Option<Uuid>, SharedError> {
        let current = self.redis.get(&self.render_key(fingerprint)).await?;
        current
            .map(|current| {
                Uuid::try_parse(&current).map_err(|error| SharedError::Damaged(error.to_string()))
            })
            .transpose()
    }

    /// Claims `fingerprint` for `job`, or names the job that renders it.
    pub(crate) async fn claim_render(
        &self,
        fingerprint: &Fingerprint,
        job: Uuid,
    ) -> Result<RenderClaim, SharedError> {
        let key = self.render_key(fingerprint);
        let ttl = millis(self.retention);
        self.redis
            .within_deadline(async {
                let mut connection = self.redis.connection().await?;
                for _ in 0..2 {
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(job.to_string())
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl)
                        .query_async(&mut connection)
                        .await
                        .map_err(unavailable)?;
                    if set.is_some() {
                        return Ok(RenderClaim::Leads);
                    }
                    let current: Option<String> =
                        connection.get(&key).await.map_err(unavailable)?;
                    if let Some(current) = current {
                        let leader = Uuid::try_parse(&current)
                            .map_err(|error| SharedError::Damaged(error.to_string()))?;
                        return Ok(RenderClaim::Existing(leader));
                    }
                }
                Err(unavailable("the render index changed under every attempt"))
            })
            .await
    }

    /// Takes `fingerprint` over from `previous` (which failed, was cancelled or is gone).
    pub(crate) async fn replace_render(
        &self,
        fingerprint: &Fingerprint,
        previous: Uuid,
        job: Uuid,
    ) -> Result<bool, SharedError> {
        Ok(self
            .redis
            .compare_and_set(
                &self.render_key(fingerprint),
                &previous.to_string(),
                &job.to_string(),
                self.retention,
            )
            .await?)
    }

    /// Frees `fingerprint` if `job` holds it (its render failed or was cancelled).
    pub(crate) async fn clear_render(
        &self,
        fingerprint: &Fingerprint,
        job: Uuid,
    ) -> Result<(), SharedError> {
        self.redis
            .compare_and_delete(&self.render_key(fingerprint), &job.to_string())
            .await?;
        Ok(())
    }
}
