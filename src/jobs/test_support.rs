//! What the unit tests of the jobs modules build alike: a small GIF output, a queued job of
//! a tenant, and a client of the test machine's Redis (127.0.0.1:6379) under a key prefix
//! of the test's own.

use super::model::Job;
use super::Fingerprint;
use crate::auth::TenantId;
use crate::redis_client::{RedisClient, RedisSettings};
use crate::spec::{Dimension, Format, Fps, Modifications, OutputSpec};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// A 100×100 GIF at the default frame rate.
pub(crate) fn gif_output() -> OutputSpec {
    OutputSpec {
        format: Format::Gif,
        fps: Fps::DEFAULT,
        width: Dimension::try_from(100).unwrap(),
        height: Dimension::try_from(100).unwrap(),
        background: None,
        ..Default::default()
    }
}

/// The fingerprint of `tenant`'s request of template `template_sha256`, unmodified, as
/// [`gif_output`].
pub(crate) fn gif_fingerprint(tenant: &TenantId, template_sha256: &str) -> Fingerprint {
    Fingerprint::of(
        tenant,
        template_sha256,
        &Modifications::default(),
        &gif_output(),
    )
}

/// A new queued job of `tenant` with `fingerprint`, 10 frames of GIF.
pub(crate) fn queued_job(tenant: TenantId, fingerprint: Fingerprint) -> Job {
    Job::queued(
        Uuid::new_v4(),
        tenant,
        Uuid::new_v4(),
        fingerprint,
        Format::Gif,
        10,
    )
}

/// A client of the test machine's Redis whose keys start with `prefix`.
pub(crate) fn test_redis(prefix: &str) -> Arc<RedisClient> {
    let settings = RedisSettings {
        url: "redis://127.0.0.1:6379/0".into(),
        key_prefix: prefix.into(),
        pool_size: 2,
        timeout: Duration::from_secs(2),
    };
    Arc::new(RedisClient::open(&settings).unwrap())
}
