//! ListRenderJobs against a tenant with many jobs and a filter that keeps none of them: each
//! call examines at most `MAX_JOBS_EXAMINED_PER_LIST` jobs and says where to go on, so a
//! scan for nothing costs every call the same bounded walk (in memory and in Redis), never
//! the tenant's whole history at once.

use crate::helpers::{on_both_stores, small_request, spawn_app_with, Store};
use lottie_render::grpc::proto::{self, JobState, ListRenderJobsRequest};
use lottie_render::jobs::MAX_JOBS_EXAMINED_PER_LIST;

const BALL: &str = "slots-ball-colors-opacity.json";

async fn a_filter_that_keeps_nothing_walks_a_bounded_number_of_jobs_per_call(store: Store) {
    let app = spawn_app_with(|settings| store.configure(settings)).await;
    let template = app.create_template(BALL).await;
    // One render, then its output reused under fresh keys: SUCCEEDED at once, no worker.
    app.render(small_request(&template.template_id, proto::Format::Gif))
        .await;
    let jobs = MAX_JOBS_EXAMINED_PER_LIST + 20;
    for _ in 1..jobs {
        app.submit_small(&template, proto::Format::Gif).await;
    }
    let mut request = ListRenderJobsRequest {
        page_size: 1,
        state: JobState::Failed as i32,
        ..ListRenderJobsRequest::default()
    };
    let first = app
        .renders()
        .list_render_jobs(request.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(first.jobs.is_empty(), "{first:?}");
    assert!(
        !first.next_page_token.is_empty(),
        "the walk stopped at its bound"
    );
    request.page_token = first.next_page_token;
    let second = app
        .renders()
        .list_render_jobs(request)
        .await
        .unwrap()
        .into_inner();
    assert!(second.jobs.is_empty(), "{second:?}");
    assert_eq!(second.next_page_token, "", "the rest fits one walk");
    // Unfiltered, tiny pages still walk every job once, a page a call.
    let newest = app
        .renders()
        .list_render_jobs(ListRenderJobsRequest {
            page_size: 1,
            ..ListRenderJobsRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(newest.jobs.len(), 1);
    assert!(!newest.next_page_token.is_empty());
    app.stop().await;
}

on_both_stores!(a_filter_that_keeps_nothing_walks_a_bounded_number_of_jobs_per_call);
