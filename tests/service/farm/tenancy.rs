//! Tenancy over a real socket, each scenario against both stores (in memory and Redis): two
//! API keys of two tenants cannot see, delete, cancel, watch, download, replay or
//! de-duplicate into each other's templates and jobs (another tenant's object is NOT_FOUND
//! exactly as an unknown id), a request quarantined for one tenant is still another's to
//! render, a deleted template's accepted job still renders while new submissions naming it are
//! refused, and a tenant over its own template share is refused while another still creates.

use crate::helpers::{
    api_keys_file, corpus, counting_worker, create_request, download_through, on_both_stores,
    reason, redis_url, small_request, spawn_app_with, submit_keyed_through, unique_key,
    unique_prefix, worker_starts, Store, TestApp,
};
use lottie_render::auth::AuthMode;
use lottie_render::grpc::proto::{self, JobState};
use std::path::Path;
use std::time::Duration;
use tonic::{Code, Status};
use tonic_types::StatusExt;
use uuid::Uuid;

const BALL: &str = "slots-ball-colors-opacity.json";
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
const ACME_KEY: &str = "acme-secret-key";
const GLOBEX_KEY: &str = "globex-secret-key";

/// Settings of a server with required API keys of two tenants, on `store`, its workers
/// counted in `dir/starts`; answers the Redis key prefix (empty in memory).
fn two_tenants(
    store: Store,
    dir: &Path,
) -> (
    String,
    impl FnOnce(&mut lottie_render::config::ServerSettings),
) {
    let keys = api_keys_file(
        dir,
        &[("acme", "billing", ACME_KEY), ("globex", "web", GLOBEX_KEY)],
    );
    let worker = counting_worker(dir, &dir.join("starts"));
    let prefix = match store {
        Store::Memory => String::new(),
        Store::Redis => unique_prefix(),
    };
    let configure = {
        let prefix = prefix.clone();
        move |settings: &mut lottie_render::config::ServerSettings| {
            settings.auth.mode = AuthMode::Required;
            settings.auth.api_keys = Some(keys);
            settings.render_workers.worker_executable = Some(worker);
            if store == Store::Redis {
                settings.redis.redis_url = Some(redis_url());
                settings.redis.redis_key_prefix = prefix;
            }
        }
    };
    (prefix, configure)
}

/// What a caller learns from a refusal, with the id it named taken out: the same for an
/// unknown id and another tenant's.
fn refusal(status: &Status, id: &str) -> (Code, String, String, Option<String>) {
    (
        status.code(),
        reason(status),
        status.message().replace(id, "ID"),
        status
            .metadata()
            .get("grpc-retry-pushback-ms")
            .map(|value| value.to_str().unwrap().to_owned()),
    )
}

async fn create_as(app: &TestApp, key: &str, corpus_name: &str) -> proto::Template {
    app.templates_as(Some(key))
        .create_template(create_request(corpus_name, corpus(corpus_name)))
        .await
        .unwrap()
        .into_inner()
}

async fn list_as(app: &TestApp, key: &str) -> Vec<String> {
    app.templates_as(Some(key))
        .list_templates(proto::ListTemplatesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .templates
        .into_iter()
        .map(|template| template.template_id)
        .collect()
}

/// Every way a caller can name a job, as the caller of `api_key`: the refusal of each (or
/// `None` where the call was answered).
async fn job_calls_as(app: &TestApp, api_key: &str, job_id: &str) -> Vec<(&'static str, Status)> {
    let mut renders = app.renders_as(Some(api_key));
    let mut refused = Vec::new();
    if let Err(status) = renders
        .get_render_job(proto::GetRenderJobRequest {
            job_id: job_id.into(),
        })
        .await
    {
        refused.push(("get", status));
    }
    if let Err(status) = renders
        .watch_render_job(proto::WatchRenderJobRequest {
            job_id: job_id.into(),
        })
        .await
    {
        refused.push(("watch", status));
    }
    if let Err(status) = renders
        .cancel_render_job(proto::CancelRenderJobRequest {
            job_id: job_id.into(),
        })
        .await
    {
        refused.push(("cancel", status));
    }
    if let Err(status) = download_through(app.renders_as(Some(api_key)), job_id).await {
        refused.push(("download", status));
    }
    refused
}

/// Every job call naming `job_id` as the caller of `api_key` is refused exactly as for an
/// unknown id.
async fn assert_job_hidden(app: &TestApp, api_key: &str, job_id: &str) {
    let unknown = Uuid::new_v4().to_string();
    let expected: Vec<_> = job_calls_as(app, api_key, &unknown)
        .await
        .iter()
        .map(|(call, status)| (*call, refusal(status, &unknown)))
        .collect();
    assert_eq!(expected.len(), 4, "every call refuses an unknown id");
    assert!(expected.iter().all(|(_, (code, reason, _, pushback))| {
        *code == Code::NotFound && reason == "JOB_NOT_FOUND" && pushback.as_deref() == Some("-1")
    }));
    let hidden: Vec<_> = job_calls_as(app, api_key, job_id)
        .await
        .iter()
        .map(|(call, status)| (*call, refusal(status, job_id)))
        .collect();
    assert_eq!(hidden, expected);
}

async fn two_tenants_cannot_see_cancel_download_replay_or_share_each_others_work(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (prefix, configure) = two_tenants(store, dir.path());
    let app = spawn_app_with(configure).await;
    let acme_template = create_as(&app, ACME_KEY, BALL).await;
    let globex_template = create_as(&app, GLOBEX_KEY, BALL).await;
    assert_eq!(
        acme_template.sha256, globex_template.sha256,
        "the same JSON"
    );

    // Templates: acme's is globex's unknown id, for every call.
    let unknown = Uuid::new_v4().to_string();
    let mut templates = app.templates_as(Some(GLOBEX_KEY));
    let mut refusals = Vec::new();
    for id in [&unknown, &acme_template.template_id] {
        let get = templates
            .get_template(proto::GetTemplateRequest {
                template_id: id.clone(),
            })
            .await
            .unwrap_err();
        let delete = templates
            .delete_template(proto::DeleteTemplateRequest {
                template_id: id.clone(),
            })
            .await
            .unwrap_err();
        let submit = submit_keyed_through(
            app.renders_as(Some(GLOBEX_KEY)),
            &unique_key(),
            small_request(id, proto::Format::Gif),
        )
        .await
        .unwrap_err();
        refusals.push([
            refusal(&get, id),
            refusal(&delete, id),
            refusal(&submit, id),
        ]);
    }
    assert_eq!(refusals[0][0].0, Code::NotFound);
    assert_eq!(refusals[0][0].1, "TEMPLATE_NOT_FOUND");
    assert_eq!(refusals[0][2].0, Code::InvalidArgument);
    assert_eq!(refusals[0][2].1, "TEMPLATE_NOT_FOUND");
    assert_eq!(
        refusals[1], refusals[0],
        "acme's template is unknown to globex"
    );
    assert_eq!(
        list_as(&app, ACME_KEY).await,
        [acme_template.template_id.as_str()]
    );
    assert_eq!(
        list_as(&app, GLOBEX_KEY).await,
        [globex_template.template_id.as_str()]
    );

    // The same idempotency key and the same render from both tenants: two jobs, two renders.
    let key = unique_key();
    let (acme_job, replayed) = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &key,
        small_request(&acme_template.template_id, proto::Format::Gif),
    )
    .await
    .unwrap();
    assert!(!replayed);
    let (globex_job, replayed) = submit_keyed_through(
        app.renders_as(Some(GLOBEX_KEY)),
        &key,
        small_request(&globex_template.template_id, proto::Format::Gif),
    )
    .await
    .expect("globex's key is its own, never IDEMPOTENCY_KEY_REUSED");
    assert!(!replayed, "never acme's replay");
    assert_ne!(globex_job.job_id, acme_job.job_id);
    let acme_done = app.finished_as(ACME_KEY, &acme_job.job_id).await;
    let globex_done = app.finished_as(GLOBEX_KEY, &globex_job.job_id).await;
    assert_eq!(acme_done.state, JobState::Succeeded as i32, "{acme_done:?}");
    assert_eq!(
        globex_done.state,
        JobState::Succeeded as i32,
        "{globex_done:?}"
    );
    assert_eq!(
        worker_starts(dir.path()),
        2,
        "identical requests of two tenants render twice"
    );
    // Within a tenant, de-duplication goes on: acme's identical request reuses its output.
    let (again, replayed) = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &unique_key(),
        small_request(&acme_template.template_id, proto::Format::Gif),
    )
    .await
    .unwrap();
    assert!(!replayed);
    assert_eq!(again.state, JobState::Succeeded as i32, "{again:?}");
    assert_eq!(worker_starts(dir.path()), 2);
    // And the same key again is acme's replay.
    let (replay, replayed) = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &key,
        small_request(&acme_template.template_id, proto::Format::Gif),
    )
    .await
    .unwrap();
    assert!(replayed);
    assert_eq!(replay.job_id, acme_job.job_id);

    // Jobs: acme's is globex's unknown id, for get, watch, cancel and download.
    assert_job_hidden(&app, GLOBEX_KEY, &acme_job.job_id).await;
    assert_job_hidden(&app, ACME_KEY, &globex_job.job_id).await;
    let acme_bytes = download_through(app.renders_as(Some(ACME_KEY)), &acme_job.job_id)
        .await
        .unwrap();
    let globex_bytes = download_through(app.renders_as(Some(GLOBEX_KEY)), &globex_job.job_id)
        .await
        .unwrap();
    assert_eq!(acme_bytes, globex_bytes, "same request, same output bytes");

    if store == Store::Redis {
        // Another instance on the same Redis and data directory answers from the shared
        // records, scoped the same way.
        let data_dir = app.data_dir.path().to_path_buf();
        let other_dir = tempfile::tempdir().unwrap();
        let (_, configure) = two_tenants(store, other_dir.path());
        let other = spawn_app_with(move |settings| {
            configure(settings);
            settings.redis.redis_key_prefix = prefix;
            settings.application.data_dir = data_dir;
        })
        .await;
        assert_job_hidden(&other, GLOBEX_KEY, &acme_job.job_id).await;
        let shared = other.finished_as(ACME_KEY, &acme_job.job_id).await;
        assert_eq!(shared.state, JobState::Succeeded as i32);
        assert_eq!(
            download_through(other.renders_as(Some(ACME_KEY)), &acme_job.job_id)
                .await
                .unwrap(),
            acme_bytes
        );
        other.stop().await;
    }
    // Globex's attempts changed nothing of acme's.
    assert_eq!(app.finished_as(ACME_KEY, &acme_job.job_id).await, acme_done);
    assert_eq!(
        list_as(&app, ACME_KEY).await,
        [acme_template.template_id.as_str()]
    );
    app.stop().await;
}

/// Entries of the directory of pinned template files (one per job that may still render).
fn pinned(app: &TestApp) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(app.data_dir.path().join("templates/.jobs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect()
}

async fn a_deleted_templates_queued_job_still_renders_and_new_submissions_are_refused(
    store: Store,
) {
    let dir = tempfile::tempdir().unwrap();
    let (_, configure) = two_tenants(store, dir.path());
    // One worker: the first, endless job keeps the second queued.
    let app = spawn_app_with(|settings| {
        configure(settings);
        settings.render_workers.workers = Some(1);
    })
    .await;
    let endless = create_as(&app, ACME_KEY, NEVER_FINISHES).await;
    let ball = create_as(&app, ACME_KEY, BALL).await;
    let request = small_request(&ball.template_id, proto::Format::Gif);
    let (blocker, _) = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &unique_key(),
        small_request(&endless.template_id, proto::Format::Gif),
    )
    .await
    .unwrap();
    let (queued, _) = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &unique_key(),
        request.clone(),
    )
    .await
    .unwrap();
    assert_eq!(queued.state, JobState::Queued as i32);

    app.templates_as(Some(ACME_KEY))
        .delete_template(proto::DeleteTemplateRequest {
            template_id: ball.template_id.clone(),
        })
        .await
        .unwrap();
    let refused = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &unique_key(),
        request.clone(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused)),
        (Code::InvalidArgument, "TEMPLATE_NOT_FOUND".to_owned())
    );
    let gone = app
        .templates_as(Some(ACME_KEY))
        .get_template(proto::GetTemplateRequest {
            template_id: ball.template_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(
        list_as(&app, ACME_KEY).await,
        [endless.template_id.as_str()]
    );
    assert!(
        !app.data_dir
            .path()
            .join("templates")
            .join(&ball.template_id)
            .exists(),
        "the template's own files are gone at once"
    );

    // Globex cannot cancel acme's live job: unknown to it, and left running.
    let refused = app
        .renders_as(Some(GLOBEX_KEY))
        .cancel_render_job(proto::CancelRenderJobRequest {
            job_id: blocker.job_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::NotFound);
    let live = app
        .renders_as(Some(ACME_KEY))
        .get_render_job(proto::GetRenderJobRequest {
            job_id: blocker.job_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!matches!(
        JobState::try_from(live.state).unwrap(),
        JobState::Cancelled | JobState::Failed | JobState::Succeeded
    ));
    app.renders_as(Some(ACME_KEY))
        .cancel_render_job(proto::CancelRenderJobRequest {
            job_id: blocker.job_id.clone(),
        })
        .await
        .unwrap();
    let done = app.finished_as(ACME_KEY, &queued.job_id).await;
    assert_eq!(done.state, JobState::Succeeded as i32, "{done:?}");
    assert!(
        !download_through(app.renders_as(Some(ACME_KEY)), &queued.job_id)
            .await
            .unwrap()
            .is_empty()
    );
    // The last job that needed the deleted template's files has ended: they go too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !pinned(&app).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still pinned: {:?}",
            pinned(&app)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.stop().await;
}

async fn a_request_quarantined_for_one_tenant_is_still_accepted_for_another(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let (_, configure) = two_tenants(store, dir.path());
    let crashing = crate::helpers::crashing_worker(dir.path(), &dir.path().join("starts"));
    let app = spawn_app_with(|settings| {
        configure(settings);
        settings.render_workers.worker_executable = Some(crashing);
    })
    .await;
    let acme_template = create_as(&app, ACME_KEY, BALL).await;
    let globex_template = create_as(&app, GLOBEX_KEY, BALL).await;
    let (crashed, _) = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &unique_key(),
        small_request(&acme_template.template_id, proto::Format::Gif),
    )
    .await
    .unwrap();
    let crashed = app.finished_as(ACME_KEY, &crashed.job_id).await;
    assert_eq!(crashed.error.unwrap().reason, "RENDER_CRASHED");
    let refused = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &unique_key(),
        small_request(&acme_template.template_id, proto::Format::Gif),
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&refused), "RENDER_QUARANTINED");
    // Globex's identical request is its own: accepted, and it renders (and crashes) itself.
    let (accepted, _) = submit_keyed_through(
        app.renders_as(Some(GLOBEX_KEY)),
        &unique_key(),
        small_request(&globex_template.template_id, proto::Format::Gif),
    )
    .await
    .expect("the quarantine is acme's");
    let ended = app.finished_as(GLOBEX_KEY, &accepted.job_id).await;
    assert_eq!(ended.error.unwrap().reason, "RENDER_CRASHED");
    assert_eq!(worker_starts(dir.path()), 4, "two attempts per tenant");
    app.stop().await;
}

#[tokio::test]
async fn a_tenant_over_its_template_share_is_refused_while_another_still_creates() {
    let dir = tempfile::tempdir().unwrap();
    let (_, configure) = two_tenants(Store::Memory, dir.path());
    let app = spawn_app_with(|settings| {
        configure(settings);
        settings.storage.max_templates_per_tenant = 1;
    })
    .await;
    create_as(&app, ACME_KEY, BALL).await;
    let refused = app
        .templates_as(Some(ACME_KEY))
        .create_template(create_request("second", corpus(BALL)))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused)),
        (
            Code::ResourceExhausted,
            "TEMPLATE_QUOTA_EXCEEDED".to_owned()
        )
    );
    assert!(refused.get_error_details().retry_info().is_some());
    create_as(&app, GLOBEX_KEY, BALL).await;
    app.stop().await;
}

/// With shared jobs, an id's lookup ends in Redis when this instance has no job of the
/// caller's tenant by that id. Another tenant's job on this instance must take that same path:
/// answered from the board at once, it would be NOT_FOUND while an unknown id is UNAVAILABLE
/// (Redis down), and faster by a Redis round trip (Redis up).
#[tokio::test]
async fn another_tenants_job_on_this_instance_is_answered_as_an_unknown_id_while_redis_is_down() {
    let redis = crate::helpers::OwnRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let (_, configure) = two_tenants(Store::Redis, dir.path());
    let url = redis.url();
    let app = spawn_app_with(|settings| {
        configure(settings);
        settings.redis.redis_url = Some(url);
    })
    .await;
    let template = create_as(&app, ACME_KEY, BALL).await;
    let (job, _) = submit_keyed_through(
        app.renders_as(Some(ACME_KEY)),
        &unique_key(),
        small_request(&template.template_id, proto::Format::Gif),
    )
    .await
    .unwrap();
    app.finished_as(ACME_KEY, &job.job_id).await;
    drop(redis);

    let unknown = Uuid::new_v4().to_string();
    let answers = |job_id: String| {
        let app = &app;
        async move {
            let refusals: Vec<_> = job_calls_as(app, GLOBEX_KEY, &job_id)
                .await
                .iter()
                .map(|(call, status)| (*call, status.code(), reason(status)))
                .collect();
            refusals
        }
    };
    let expected = answers(unknown).await;
    assert_eq!(
        expected,
        ["get", "watch", "cancel", "download"]
            .map(|call| (call, Code::Unavailable, "JOB_STORE_UNAVAILABLE".to_owned()))
            .to_vec(),
        "an unknown id needs Redis"
    );
    assert_eq!(answers(job.job_id.clone()).await, expected);
    // Its own tenant still sees it from this instance.
    let own = app
        .renders_as(Some(ACME_KEY))
        .get_render_job(proto::GetRenderJobRequest {
            job_id: job.job_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(own.state, JobState::Succeeded as i32);
    app.stop().await;
}

on_both_stores!(
    two_tenants_cannot_see_cancel_download_replay_or_share_each_others_work,
    a_deleted_templates_queued_job_still_renders_and_new_submissions_are_refused,
    a_request_quarantined_for_one_tenant_is_still_accepted_for_another,
);
