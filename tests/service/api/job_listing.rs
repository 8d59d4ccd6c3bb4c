//! ListRenderJobs and GetServiceStatus over a real socket, through both doors: a tenant's
//! jobs newest first in pages without gaps or repeats, each filter, refusals naming every
//! field at fault, tenants apart (neither filters nor tokens reach another tenant's jobs) in
//! memory and on Redis; the status for operators only (PERMISSION_DENIED / 403 for the
//! others) and its refusals of the last hour rising with refused calls.

use crate::helpers::{
    api_keys_file, on_both_stores, reason, small_request, spawn_app_with, state, violated_fields,
    Store, TestApp, WATCH_LIMIT,
};
use lottie_render::auth::AuthMode;
use lottie_render::grpc::proto::{self, JobState, ListRenderJobsRequest};
use reqwest::StatusCode;
use serde_json::Value;
use tonic::Code;

const BALL: &str = "slots-ball-colors-opacity.json";
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";

/// A job's place in the listing order: its creation in milliseconds, then its id.
fn sort_key(job: &proto::RenderJob) -> (i64, String) {
    let created = job.created_at.unwrap_or_default();
    (
        created.seconds * 1000 + i64::from(created.nanos) / 1_000_000,
        job.job_id.clone(),
    )
}

/// The ids of `jobs` newest first, as the service lists them.
fn newest_first(jobs: &[proto::RenderJob]) -> Vec<String> {
    let mut jobs = jobs.to_vec();
    jobs.sort_by_key(|job| std::cmp::Reverse(sort_key(job)));
    jobs.into_iter().map(|job| job.job_id).collect()
}

/// Every job `request` lists with the caller `key` (none: no key), page after page: the ids
/// in order and the pages read.
async fn list_all(
    app: &TestApp,
    key: Option<&str>,
    mut request: ListRenderJobsRequest,
) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    for pages in 1..=1000 {
        let page = app
            .renders_as(key)
            .list_render_jobs(request.clone())
            .await
            .unwrap()
            .into_inner();
        assert!(
            request.page_size == 0 || page.jobs.len() <= request.page_size as usize,
            "{page:?}"
        );
        ids.extend(page.jobs.into_iter().map(|job| job.job_id));
        if page.next_page_token.is_empty() {
            return (ids, pages);
        }
        request.page_token = page.next_page_token;
    }
    panic!("the listing never ended");
}

fn filtered(state: JobState, template_id: &str, reason: &str) -> ListRenderJobsRequest {
    ListRenderJobsRequest {
        state: state as i32,
        template_id: template_id.into(),
        reason: reason.into(),
        ..ListRenderJobsRequest::default()
    }
}

/// Five succeeded jobs of the ball (one render, four reuses of its output) and one failed
/// job of a template that never finishes (its CPU budget, or the wall-clock backstop on a
/// loaded machine): answers the server's templates and jobs as they ended.
async fn jobs_of_two_templates(
    app: &TestApp,
) -> (proto::Template, proto::Template, Vec<proto::RenderJob>) {
    let ball = app.create_template(BALL).await;
    let endless = app.create_template(NEVER_FINISHES).await;
    let mut jobs = vec![
        app.render(small_request(&ball.template_id, proto::Format::Gif))
            .await,
    ];
    for _ in 0..4 {
        let reused = app.submit_small(&ball, proto::Format::Gif).await;
        assert_eq!(state(&reused), JobState::Succeeded, "{reused:?}");
        jobs.push(reused);
    }
    let failing = app.submit_small(&endless, proto::Format::Gif).await;
    let failed = app.watch(&failing.job_id, WATCH_LIMIT).await;
    let failed = failed.last().unwrap().clone();
    assert_eq!(state(&failed), JobState::Failed, "{failed:?}");
    jobs.push(failed);
    (ball, endless, jobs)
}

#[tokio::test]
async fn jobs_are_listed_newest_first_in_pages_and_each_filter_keeps_its_own() {
    let app = spawn_app_with(|settings| settings.jobs.max_job_seconds = 1.0).await;
    let (ball, endless, jobs) = jobs_of_two_templates(&app).await;
    let failed = jobs.last().unwrap().clone();
    let failure = failed.error.clone().unwrap().reason;
    // Pages of two: every job once, newest first, in three pages.
    let all = ListRenderJobsRequest {
        page_size: 2,
        ..ListRenderJobsRequest::default()
    };
    assert_eq!(list_all(&app, None, all).await, (newest_first(&jobs), 3));
    // The default page holds them all.
    let (ids, pages) = list_all(&app, None, ListRenderJobsRequest::default()).await;
    assert_eq!((ids, pages), (newest_first(&jobs), 1));
    let succeeded = newest_first(&jobs[..5]);
    for (request, expected) in [
        (
            filtered(JobState::Failed, "", ""),
            vec![failed.job_id.clone()],
        ),
        (filtered(JobState::Succeeded, "", ""), succeeded.clone()),
        (filtered(JobState::Queued, "", ""), Vec::new()),
        (
            filtered(JobState::Unspecified, &endless.template_id, ""),
            vec![failed.job_id.clone()],
        ),
        (
            filtered(JobState::Unspecified, &ball.template_id, ""),
            succeeded,
        ),
        (
            filtered(JobState::Unspecified, "", &failure),
            vec![failed.job_id.clone()],
        ),
        (filtered(JobState::Failed, "", "QUEUE_FULL"), Vec::new()),
        (
            filtered(JobState::Succeeded, &endless.template_id, ""),
            Vec::new(),
        ),
    ] {
        assert_eq!(
            list_all(&app, None, request.clone()).await.0,
            expected,
            "{request:?}"
        );
    }
    // A listed job is the job GetRenderJob answers (without its webhook deliveries).
    let page = app
        .renders()
        .list_render_jobs(filtered(JobState::Failed, "", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.jobs, vec![app.get_job(&failed.job_id).await]);
    the_http_door_lists_by_state_and_refuses_a_state_it_does_not_know(&app, &failed).await;
    app.stop().await;
}

/// `GET /v1/renders?state=JOB_STATE_FAILED&pageSize=…` answers the failed job; an unknown
/// state is a 422 problem naming the field.
async fn the_http_door_lists_by_state_and_refuses_a_state_it_does_not_know(
    app: &TestApp,
    failed: &proto::RenderJob,
) {
    let client = reqwest::Client::new();
    let url = |query: &str| format!("http://{}/v1/renders?{query}", app.address);
    let answer = client
        .get(url("state=JOB_STATE_FAILED&pageSize=5"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let body: Value = answer.json().await.unwrap();
    let jobs = body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{body}");
    assert_eq!(jobs[0]["jobId"], failed.job_id.as_str());
    assert_eq!(jobs[0]["state"], "JOB_STATE_FAILED");
    assert_eq!(
        jobs[0]["error"]["reason"],
        failed.error.as_ref().unwrap().reason.as_str()
    );
    assert!(
        body.get("nextPageToken").is_none_or(|token| token == ""),
        "{body}"
    );
    let query = format!("templateId={}&page_size=1", failed.template_id);
    let by_template: Value = client
        .get(url(&query))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(by_template["jobs"][0]["jobId"], failed.job_id.as_str());
    for (query, field) in [
        ("state=JOB_STATE_BROKEN", "state"),
        ("reason=NOT_A_REASON", "reason"),
        ("pageToken=forged", "page_token"),
    ] {
        let refused = client.get(url(query)).send().await.unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}"
        );
        let problem: Value = refused.json().await.unwrap();
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
    }
}

#[tokio::test]
async fn bad_pages_and_filters_are_invalid_argument_naming_every_field_at_once() {
    let app = spawn_app_with(|_| {}).await;
    for (request, fields) in [
        (
            ListRenderJobsRequest {
                page_size: 101,
                ..ListRenderJobsRequest::default()
            },
            vec!["page_size"],
        ),
        (
            ListRenderJobsRequest {
                page_token: "v1.garbage".into(),
                ..ListRenderJobsRequest::default()
            },
            vec!["page_token"],
        ),
        (
            filtered(JobState::Unspecified, "not-a-uuid", ""),
            vec!["template_id"],
        ),
        (
            filtered(JobState::Unspecified, "", "render_crashed"),
            vec!["reason"],
        ),
        (
            ListRenderJobsRequest {
                state: 99,
                ..ListRenderJobsRequest::default()
            },
            vec!["state"],
        ),
        (
            ListRenderJobsRequest {
                page_size: 1000,
                page_token: "forged".into(),
                state: -1,
                template_id: "x".into(),
                reason: "NOPE".into(),
            },
            vec!["page_size", "page_token", "state", "template_id", "reason"],
        ),
    ] {
        let status = app
            .renders()
            .list_render_jobs(request.clone())
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{request:?}");
        assert_eq!(reason(&status), "REQUEST_INVALID", "{status:?}");
        assert_eq!(violated_fields(&status), fields, "{status:?}");
    }
    app.stop().await;
}

const ACME_KEY: &str = "acme-key";
const GLOBEX_KEY: &str = "globex-key";
const OPERATOR_KEY: &str = "operator-key";

/// A server on `store` with API keys of two tenants and of an operator (`ops/alice`).
async fn two_tenants_and_an_operator(store: Store, dir: &std::path::Path) -> TestApp {
    let keys = api_keys_file(
        dir,
        &[
            ("acme", "ci", ACME_KEY),
            ("globex", "ci", GLOBEX_KEY),
            ("ops", "alice", OPERATOR_KEY),
        ],
    );
    spawn_app_with(|settings| {
        settings.auth.mode = AuthMode::Required;
        settings.auth.api_keys = Some(keys);
        settings.auth.operators = vec!["ops/alice".parse().unwrap()];
        store.configure(settings);
    })
    .await
}

/// Two tenants with a job each: each lists only its own, whatever filter (another tenant's
/// template) or page token (another tenant's position) it sends.
async fn tenants_see_only_their_own_jobs_whatever_filter_or_token(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let app = two_tenants_and_an_operator(store, dir.path()).await;
    let mut own = Vec::new();
    for key in [ACME_KEY, GLOBEX_KEY] {
        app.use_api_key(Some(key));
        let template = app.create_template(BALL).await;
        let job = app
            .render(small_request(&template.template_id, proto::Format::Gif))
            .await;
        own.push((key, template, job));
    }
    for (key, template, job) in &own {
        let others: Vec<&proto::RenderJob> = own
            .iter()
            .filter(|(k, ..)| k != key)
            .map(|(.., job)| job)
            .collect();
        let other = others[0];
        assert_eq!(
            list_all(&app, Some(key), ListRenderJobsRequest::default())
                .await
                .0,
            vec![job.job_id.clone()],
            "{key}"
        );
        let by_others_template = filtered(JobState::Unspecified, &other.template_id, "");
        assert_eq!(
            list_all(&app, Some(key), by_others_template).await.0,
            Vec::<String>::new()
        );
        // A token at a position just before the other tenant's job (as if issued after it).
        let (millis, _) = sort_key(other);
        let after_the_other = ListRenderJobsRequest {
            page_token: format!("v1.{}.{}", millis + 1, other.job_id),
            ..ListRenderJobsRequest::default()
        };
        let listed = list_all(&app, Some(key), after_the_other).await.0;
        assert!(!listed.contains(&other.job_id), "{key}: {listed:?}");
        assert_eq!(template.template_id, job.template_id);
    }
    app.stop().await;
}

on_both_stores!(tenants_see_only_their_own_jobs_whatever_filter_or_token);

/// The count of `reason` among a status's refusals of the last hour (0 when absent).
fn refusals(status: &proto::ServiceStatus, reason: &str) -> u64 {
    status
        .refusals_last_hour
        .iter()
        .find(|count| count.reason == reason)
        .map_or(0, |count| count.count)
}

async fn status_as(app: &TestApp, key: &str) -> Result<proto::ServiceStatus, tonic::Status> {
    app.renders_as(Some(key))
        .get_service_status(proto::GetServiceStatusRequest {})
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn the_status_is_for_operators_and_counts_the_refusals_of_the_last_hour_by_reason() {
    let dir = tempfile::tempdir().unwrap();
    let app = two_tenants_and_an_operator(Store::Memory, dir.path()).await;
    let before = status_as(&app, OPERATOR_KEY).await.unwrap();
    assert_eq!((before.workers, before.workers_busy), (1, 0), "{before:?}");
    assert_eq!(
        (before.jobs_waiting, before.jobs_rendering),
        (0, 0),
        "{before:?}"
    );
    assert_eq!(before.version, env!("CARGO_PKG_VERSION"));
    assert!(
        uuid::Uuid::try_parse(&before.instance_id).is_ok(),
        "{before:?}"
    );
    let denied = status_as(&app, ACME_KEY).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert_eq!(reason(&denied), "NOT_AN_OPERATOR");
    let pushback = denied.metadata().get("grpc-retry-pushback-ms").unwrap();
    assert_eq!(pushback, "-1");
    // Three refused listings of a tenant.
    for _ in 0..3 {
        let refused = app
            .renders_as(Some(GLOBEX_KEY))
            .list_render_jobs(filtered(JobState::Unspecified, "", "NOPE"))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
    }
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/status", app.address);
    let forbidden = client.get(&url).bearer_auth(ACME_KEY).send().await.unwrap();
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        forbidden.headers()["content-type"],
        "application/problem+json"
    );
    let problem: Value = forbidden.json().await.unwrap();
    assert_eq!(problem["reason"], "NOT_AN_OPERATOR", "{problem}");
    let answer = client
        .get(&url)
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let status: Value = answer.json().await.unwrap();
    assert_eq!(status["workers"], 1, "{status}");
    assert_eq!(
        status["instanceId"],
        before.instance_id.as_str(),
        "{status}"
    );
    let refused: Vec<(String, u64)> = status["refusalsLastHour"]
        .as_array()
        .unwrap()
        .iter()
        .map(|count| {
            let number = count["count"].as_str().unwrap().parse().unwrap();
            (count["reason"].as_str().unwrap().to_owned(), number)
        })
        .collect();
    // Most first: three invalid listings, then the two calls that were no operator's.
    let expected = vec![
        (
            "REQUEST_INVALID".to_owned(),
            refusals(&before, "REQUEST_INVALID") + 3,
        ),
        (
            "NOT_AN_OPERATOR".to_owned(),
            refusals(&before, "NOT_AN_OPERATOR") + 2,
        ),
    ];
    assert_eq!(refused, expected, "{status}");
    let after = status_as(&app, OPERATOR_KEY).await.unwrap();
    assert_eq!(refusals(&after, "NOT_AN_OPERATOR"), 2, "{after:?}");
    app.stop().await;
}

#[tokio::test]
async fn without_authentication_everyone_reads_the_status() {
    let app = spawn_app_with(|_| {}).await;
    let status = app
        .renders()
        .get_service_status(proto::GetServiceStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.workers, 1, "{status:?}");
    assert!(status.refusals_last_hour.is_empty(), "{status:?}");
    app.stop().await;
}
