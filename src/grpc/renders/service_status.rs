//! GetServiceStatus: what the instance (and, with shared jobs, the farm's queue) is doing,
//! for operators only: it shows every tenant's load and refusals, which no tenant sees of
//! another otherwise. The figures come from where they are kept already: the scheduler
//! (queue, workers), the metrics (refusals of the last hour, webhook deliveries pending).

use crate::auth::{Caller, Operators};
use crate::error::{ServiceError, ServiceErrorCode};
use crate::grpc::proto;
use crate::jobs::Scheduler;
use crate::reason::Reason;

/// The server's version, as its package says.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The status `caller` asked for, or PERMISSION_DENIED (NOT_AN_OPERATOR) when it is no
/// operator; UNAVAILABLE when the shared queue cannot be read.
pub(super) async fn service_status(
    scheduler: &Scheduler,
    operators: &Operators,
    caller: &Caller,
) -> Result<proto::ServiceStatus, ServiceError> {
    if !operators.includes(caller) {
        return Err(ServiceError::deterministic(
            ServiceErrorCode::PermissionDenied,
            Reason::NotAnOperator,
            format!(
                "the service's status is for its operators (--operators); {}/{} is not one",
                caller.tenant, caller.name
            ),
        ));
    }
    let activity = scheduler.activity().await?;
    let metrics = scheduler.metrics();
    let refusals_last_hour = metrics
        .refusals_last_hour
        .last_hour()
        .into_iter()
        .map(|(reason, count)| proto::RefusalCount {
            reason: reason.into(),
            count,
        })
        .collect();
    let count = |value: usize| u32::try_from(value).unwrap_or(u32::MAX);
    let pending = metrics.webhook_deliveries_pending.get();
    Ok(proto::ServiceStatus {
        jobs_waiting: count(activity.waiting),
        jobs_rendering: count(activity.rendering),
        workers: count(activity.workers),
        workers_busy: count(activity.workers_busy),
        refusals_last_hour,
        webhooks_pending: u32::try_from(pending.max(0)).unwrap_or(u32::MAX),
        instance_id: scheduler.instance().to_string(),
        version: VERSION.into(),
    })
}
