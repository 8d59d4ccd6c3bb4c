//! ListRenderJobs across a farm: two instances on one Redis (one key prefix) and one data
//! directory; a job accepted by either is listed by both, newest first, from the tenant's
//! index kept beside the job records; and the status of either reads the farm's queue.

use crate::helpers::{small_request, spawn_app_with, unique_prefix, Store, TestApp};
use lottie_render::grpc::proto::{self, JobState, ListRenderJobsRequest};

const BALL: &str = "slots-ball-colors-opacity.json";

/// The ids `app` lists on its first page (of the default size).
async fn listed(app: &TestApp, request: ListRenderJobsRequest) -> Vec<String> {
    let page = app
        .renders()
        .list_render_jobs(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.next_page_token, "", "{page:?}");
    page.jobs.into_iter().map(|job| job.job_id).collect()
}

#[tokio::test]
async fn a_job_accepted_by_one_instance_is_listed_by_the_other() {
    let prefix = unique_prefix();
    let first = spawn_app_with(|settings| {
        Store::Redis.configure(settings);
        settings.redis.redis_key_prefix = prefix.clone();
    })
    .await;
    let shared_data = first.data_dir.path().to_path_buf();
    let second = spawn_app_with(|settings| {
        Store::Redis.configure(settings);
        settings.redis.redis_key_prefix = prefix.clone();
        settings.application.data_dir = shared_data;
    })
    .await;
    let ball = first.create_template(BALL).await;
    let on_first = first
        .render(small_request(&ball.template_id, proto::Format::Gif))
        .await;
    // Another request (another fingerprint), accepted by the other instance.
    let mut wider = small_request(&ball.template_id, proto::Format::Gif);
    wider.output.as_mut().unwrap().width = 120;
    let on_second = second.render(wider).await;
    let both = vec![on_second.job_id.clone(), on_first.job_id.clone()];
    for app in [&first, &second] {
        assert_eq!(listed(app, ListRenderJobsRequest::default()).await, both);
        let succeeded = ListRenderJobsRequest {
            state: JobState::Succeeded as i32,
            ..ListRenderJobsRequest::default()
        };
        assert_eq!(listed(app, succeeded).await, both);
        let status = app
            .renders()
            .get_service_status(proto::GetServiceStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (status.jobs_waiting, status.jobs_rendering),
            (0, 0),
            "{status:?}"
        );
    }
    // Each instance is its own in the farm.
    let mut ids = Vec::new();
    for app in [&first, &second] {
        let mut client = app.renders();
        let status = client.get_service_status(proto::GetServiceStatusRequest {});
        ids.push(status.await.unwrap().into_inner().instance_id);
    }
    assert_ne!(ids[0], ids[1]);
    second.stop().await;
    first.stop().await;
}
