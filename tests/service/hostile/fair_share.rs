//! Fair share over a real socket, two tenants by API key: a tenant at its job limit is
//! refused RESOURCE_EXHAUSTED with a delay while the other's jobs are accepted and run; one
//! job of a tenant runs before another tenant's backlog; a tenant over its request rate is
//! told the wait while the other is served.
//!
//! Renders of tenant acme wait at a gate (a stand-in worker that holds the job until a file
//! exists, then runs the real worker), so what runs and what waits is decided by the test, not
//! by timing. The worker tells acme's jobs by their output width: acme asks for 100 to 109 px,
//! globex for 120 (the job a worker reads names no tenant, and a pinned copy of the template).

use crate::helpers::{
    api_keys_file, pushback_ms, reason, small_request, spawn_app_with, state, unique_key, TestApp,
};
use lottie_render::auth::AuthMode;
use lottie_render::grpc::proto::{self, JobState};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const BALL: &str = "slots-ball-colors-opacity.json";
const ACME: &str = "acme-secret-key";
const GLOBEX: &str = "globex-secret-key";
/// How long a test waits for a job to reach a state.
const STATE_LIMIT: Duration = Duration::from_secs(120);

/// A worker that, for a job 100 to 109 px wide, waits until `gate` exists, then runs the real
/// worker on the job.
fn gated_worker(dir: &Path, gate: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("gated-worker");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\njob=$(cat)\ncase \"$job\" in\n  \
             *'\"width\":10'[0-9][,}}]*) while [ ! -e '{gate}' ]; do sleep 0.02; done ;;\n\
             esac\nprintf '%s' \"$job\" | exec '{real}' \"$@\"\n",
            gate = gate.display(),
            real = env!("CARGO_BIN_EXE_lottie-render"),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A server with tenants acme and globex (auth required), acme's renders held at the gate
/// until [`Tenants::open_gate`].
struct Tenants {
    app: TestApp,
    dir: tempfile::TempDir,
    acme_template: String,
    globex_template: String,
}

impl Tenants {
    async fn start(
        configure: impl FnOnce(&mut lottie_render::config::ServerSettings) + Send,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let keys = api_keys_file(
            dir.path(),
            &[("acme", "billing", ACME), ("globex", "ops", GLOBEX)],
        );
        let worker = gated_worker(dir.path(), &dir.path().join("gate"));
        let app = spawn_app_with(|settings| {
            settings.auth.mode = AuthMode::Required;
            settings.auth.api_keys = Some(keys);
            settings.render_workers.worker_executable = Some(worker);
            settings.application.shutdown_grace_seconds = 0.1;
            configure(settings);
        })
        .await;
        app.use_api_key(Some(ACME));
        let acme_template = app.create_template(BALL).await.template_id;
        app.use_api_key(Some(GLOBEX));
        let globex_template = app.create_template(BALL).await.template_id;
        app.use_api_key(None);
        Tenants {
            app,
            dir,
            acme_template,
            globex_template,
        }
    }

    fn open_gate(&self) {
        std::fs::write(self.dir.path().join("gate"), "open").unwrap();
    }

    /// SubmitRender as the tenant of `key`, of its own template at `width` (each width is
    /// another render: identical requests would share one; 100 to 109 are held at the gate).
    async fn submit(&self, key: &str, width: u32) -> Result<proto::RenderJob, Status> {
        let template = if key == ACME {
            &self.acme_template
        } else {
            &self.globex_template
        };
        let mut request = small_request(template, proto::Format::Gif);
        if let Some(output) = request.output.as_mut() {
            output.width = width;
        }
        let mut request = Request::new(request);
        request
            .metadata_mut()
            .insert("idempotency-key", unique_key().parse().unwrap());
        self.app
            .renders_as(Some(key))
            .submit_render(request)
            .await
            .map(|response| response.into_inner())
    }

    async fn job(&self, key: &str, job_id: &str) -> proto::RenderJob {
        self.app
            .renders_as(Some(key))
            .get_render_job(proto::GetRenderJobRequest {
                job_id: job_id.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// Polls until the job is in one of `states`.
    async fn wait_for(&self, key: &str, job_id: &str, states: &[JobState]) -> proto::RenderJob {
        let deadline = tokio::time::Instant::now() + STATE_LIMIT;
        loop {
            let job = self.job(key, job_id).await;
            if states.iter().any(|state| *state as i32 == job.state) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {job_id} never reached {states:?}: {job:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn started_at(job: &proto::RenderJob) -> (i64, i32) {
    let started = job.started_at.as_ref().expect("the job started");
    (started.seconds, started.nanos)
}

#[tokio::test]
async fn a_tenant_at_its_job_limit_waits_with_a_delay_while_another_tenants_jobs_run() {
    let tenants = Tenants::start(|settings| {
        settings.jobs.tenant_max_jobs = Some(2);
        settings.render_workers.workers = Some(3);
    })
    .await;
    let first = tenants.submit(ACME, 100).await.unwrap();
    let second = tenants.submit(ACME, 101).await.unwrap();
    for job in [&first, &second] {
        tenants
            .wait_for(ACME, &job.job_id, &[JobState::Running])
            .await;
    }

    let refused = tenants.submit(ACME, 102).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "TENANT_JOB_LIMIT");
    let delay = refused
        .get_error_details()
        .retry_info()
        .and_then(|info| info.retry_delay)
        .expect("RetryInfo with a delay");
    assert!(delay >= Duration::from_secs(1), "{delay:?}");
    assert_eq!(pushback_ms(&refused), delay.as_millis() as u64);
    assert!(refused.metadata().get("retry-after").is_some());

    // The other tenant is accepted and its job runs to the end meanwhile.
    let other = tenants.submit(GLOBEX, 120).await.unwrap();
    let other = tenants
        .wait_for(
            GLOBEX,
            &other.job_id,
            &[JobState::Succeeded, JobState::Failed, JobState::Cancelled],
        )
        .await;
    assert_eq!(state(&other), JobState::Succeeded, "{other:?}");
    assert_eq!(
        state(&tenants.job(ACME, &first.job_id).await),
        JobState::Running
    );
    assert_eq!(
        tenants
            .app
            .metric(
                r#"lottie_render_tenant_refusals_total{tenant="acme",reason="TENANT_JOB_LIMIT"}"#
            )
            .await,
        1.0
    );

    // As soon as one of its jobs is seen to end, the tenant has a slot again.
    tenants.open_gate();
    tenants
        .wait_for(ACME, &first.job_id, &[JobState::Succeeded])
        .await;
    let accepted = tenants.submit(ACME, 102).await.unwrap();
    assert!(matches!(
        state(&accepted),
        JobState::Queued | JobState::Running
    ));
    tenants.app.stop().await;
}

#[tokio::test]
async fn with_one_worker_another_tenants_job_runs_before_a_tenants_queued_backlog() {
    let tenants = Tenants::start(|settings| settings.render_workers.workers = Some(1)).await;
    let running = tenants.submit(ACME, 100).await.unwrap();
    tenants
        .wait_for(ACME, &running.job_id, &[JobState::Running])
        .await;
    let mut backlog = Vec::new();
    for width in 101..105 {
        let job = tenants.submit(ACME, width).await.unwrap();
        assert_eq!(state(&job), JobState::Queued);
        backlog.push(job);
    }
    let other = tenants.submit(GLOBEX, 120).await.unwrap();
    assert_eq!(state(&other), JobState::Queued);

    tenants.open_gate();
    let other = tenants
        .wait_for(GLOBEX, &other.job_id, &[JobState::Succeeded])
        .await;
    let mut backlog_started = Vec::new();
    for job in &backlog {
        let job = tenants
            .wait_for(ACME, &job.job_id, &[JobState::Succeeded])
            .await;
        backlog_started.push(started_at(&job));
    }
    // The worker took globex's job next, then acme's backlog in its own order.
    assert!(
        backlog_started
            .iter()
            .all(|started| started_at(&other) < *started),
        "globex started at {:?}, acme's backlog at {backlog_started:?}",
        started_at(&other)
    );
    assert!(backlog_started.is_sorted(), "{backlog_started:?}");
    tenants.app.stop().await;
}

#[tokio::test]
async fn a_tenant_over_its_request_rate_is_told_the_wait_while_another_is_served() {
    let tenants = Tenants::start(|settings| {
        settings.limits.tenant_requests_per_second = Some(1);
        settings.limits.tenant_burst = Some(3);
    })
    .await;
    let list = |key: &'static str| {
        let mut client = tenants.app.templates_as(Some(key));
        async move {
            client
                .list_templates(proto::ListTemplatesRequest::default())
                .await
        }
    };
    // Creating the templates spent some of the burst; within a few more calls it is gone.
    let mut refused = None;
    for _ in 0..6 {
        if let Err(status) = list(ACME).await {
            refused = Some(status);
            break;
        }
    }
    let refused = refused.expect("acme is refused within its burst and a few more calls");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "TENANT_RATE_LIMITED");
    let wait = pushback_ms(&refused);
    assert!(
        (1..=1000).contains(&wait),
        "{wait} ms for 1 call per second"
    );
    let delay = refused
        .get_error_details()
        .retry_info()
        .and_then(|info| info.retry_delay)
        .expect("RetryInfo with the wait");
    assert_eq!(delay.as_millis() as u64, wait);

    // The other tenant has its own allowance, and health checks are never limited.
    list(GLOBEX).await.unwrap();
    let mut health =
        tonic_health::pb::health_client::HealthClient::new(tenants.app.channel.clone());
    for _ in 0..5 {
        health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap();
    }
    assert_eq!(
        tenants
            .app
            .metric(
                r#"lottie_render_tenant_refusals_total{tenant="acme",reason="TENANT_RATE_LIMITED"}"#
            )
            .await,
        1.0
    );
    tenants.app.stop().await;
}
