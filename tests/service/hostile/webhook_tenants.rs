//! Webhooks under one tenant's flood (issue 42, finding 4): its deliveries to slow receivers
//! take its share of the sender, not every slot, so another tenant's event goes out at once;
//! its deliveries waiting stop at its own bound, and an event past it shows on its job and is
//! counted, while another tenant's events are still kept.
//!
//! The flood is cheap, as an attacker's would be: the same request under fresh idempotency
//! keys, each SUCCEEDED at once from the stored output, each with a webhook.

use crate::api::webhooks::{secrets_file, Answer, Receiver, BALL, SECRET};
use crate::helpers::{small_request, spawn_app_with_keys, state, Store, TestApp};
use lottie_render::config::ServerSettings;
use lottie_render::fair_share::RESERVE_FIRST_AMOUNTS;
use lottie_render::grpc::proto::{self, JobState, WebhookDeliveryState, WebhookEvent};
use std::time::{Duration, Instant};

const ACME: &str = "acme-secret-key";
const GLOBEX: &str = "globex-secret-key";
/// How long a test waits for a delivery or a job's webhook state before it gives up.
const LIMIT: Duration = Duration::from_secs(60);

/// A server with tenants acme and globex (API keys required), both with a webhook secret,
/// that may call receivers on 127.0.0.1 over plain HTTP.
async fn two_tenant_app(
    dir: &std::path::Path,
    configure: impl FnOnce(&mut ServerSettings) + Send,
) -> TestApp {
    let secrets = secrets_file(dir, &format!("acme {SECRET}\nglobex {SECRET}\n"));
    let keys = [("acme", "billing", ACME), ("globex", "ops", GLOBEX)];
    spawn_app_with_keys(dir, &keys, |settings| {
        settings.webhooks.webhook_secrets = Some(secrets);
        settings.webhooks.webhook_allow_http = true;
        settings.webhooks.webhook_allow_networks =
            Some(lottie_render::webhooks::settings::Networks(vec![
                "127.0.0.0/8".parse().unwrap(),
            ]));
        configure(settings);
    })
    .await
}

/// The calling tenant's ball template rendered once (without a webhook): the request whose
/// copies under fresh keys reuse its output.
async fn rendered_once(app: &TestApp) -> proto::RenderRequest {
    let template = app.create_template(BALL).await.template_id;
    let request = small_request(&template, proto::Format::Gif);
    app.render(request.clone()).await;
    request
}

/// `request` with a webhook to `url` for its succeeded event.
fn with_webhook(request: &proto::RenderRequest, url: &str) -> proto::RenderRequest {
    proto::RenderRequest {
        notify: Some(proto::Notify {
            webhook_url: url.into(),
            events: vec![WebhookEvent::Succeeded as i32],
        }),
        ..request.clone()
    }
}

#[tokio::test]
async fn one_tenants_flood_to_slow_receivers_does_not_hold_up_another_tenants_delivery() {
    const FLOOD: usize = 100;
    const CONCURRENCY: u32 = 8;
    let dir = tempfile::tempdir().unwrap();
    let app = two_tenant_app(dir.path(), |settings| {
        settings.webhooks.webhook_concurrency = CONCURRENCY;
    })
    .await;
    // Slow receivers, answering 200 after two seconds: never a failure (no breaker opens),
    // each delivery holds a slot two seconds. Four of them, so that the flood is not held
    // back by the slots of one destination but only by the sender's.
    let mut slow = Vec::new();
    for _ in 0..4 {
        slow.push(Receiver::start(|_, _| Answer::Late(Duration::from_secs(2))).await);
    }
    let prompt = Receiver::start(|_, _| Answer::Status(204)).await;
    app.use_api_key(Some(GLOBEX));
    let victims_request = rendered_once(&app).await;
    app.use_api_key(Some(ACME));
    let floods_request = rendered_once(&app).await;
    for index in 0..FLOOD {
        let url = slow[index % slow.len()].url("/flood");
        let job = app
            .submit(with_webhook(&floods_request, &url))
            .await
            .unwrap();
        assert_eq!(state(&job), JobState::Succeeded, "reused at once");
    }
    let flood_seen = || {
        slow.iter()
            .map(|receiver| receiver.seen().len())
            .sum::<usize>()
    };
    // Alone, the flood takes what the reserve for tenants holding none leaves: half of 8.
    let reserve = RESERVE_FIRST_AMOUNTS.min(CONCURRENCY as usize / 2);
    let start = Instant::now();
    while flood_seen() < CONCURRENCY as usize - reserve {
        assert!(start.elapsed() < LIMIT, "the flood never took its slots");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Globex's event, while acme's backlog holds the sender.
    app.use_api_key(Some(GLOBEX));
    let sent = Instant::now();
    let victim = app
        .submit(with_webhook(&victims_request, &prompt.url("/victim")))
        .await
        .unwrap();
    assert_eq!(state(&victim), JobState::Succeeded);
    prompt
        .wait_until("the other tenant's event", |seen| !seen.is_empty())
        .await;
    let waited = sent.elapsed();
    let flood_sent_before = flood_seen();
    eprintln!(
        "flood of {FLOOD} deliveries to receivers answering in 2 s, {CONCURRENCY} slots: the \
         other tenant's delivery waited {waited:?}, {flood_sent_before} of the flood's had \
         been sent"
    );
    // Earliest first, every one of the flood's deliveries would have gone before it (a
    // wait of FLOOD / slots × 2 s, 25 s here): it went while most still waited.
    assert!(
        flood_sent_before < FLOOD / 2,
        "the other tenant's delivery waited for {flood_sent_before} of the flood's ({waited:?})"
    );
}

/// Acme may have three deliveries waiting; its fourth event is not kept, and says so.
async fn an_event_past_its_tenants_bound_shows_on_its_job_and_another_tenant_is_kept(store: Store) {
    const BOUND: u32 = 3;
    let dir = tempfile::tempdir().unwrap();
    let app = two_tenant_app(dir.path(), |settings| {
        store.configure(settings);
        settings.webhooks.webhook_max_pending_per_tenant = BOUND;
    })
    .await;
    // Down: 503 with Retry-After 1, so acme's deliveries stay waiting.
    let down = Receiver::start(|_, _| Answer::Unavailable).await;
    let up = Receiver::start(|_, _| Answer::Status(200)).await;
    app.use_api_key(Some(ACME));
    let request = rendered_once(&app).await;
    let mut jobs = Vec::new();
    for _ in 0..=BOUND {
        let job = app
            .submit(with_webhook(&request, &down.url("/")))
            .await
            .unwrap();
        jobs.push(job.job_id);
    }
    let past = delivery_of(&app, &jobs[BOUND as usize], |d| {
        d.state != WebhookDeliveryState::Pending as i32
    })
    .await;
    assert_eq!(past.state, WebhookDeliveryState::Refused as i32, "{past:?}");
    assert_eq!((past.attempts, past.last_status), (0, 0), "never tried");
    assert!(past.webhook_id.starts_with("msg_"), "{past:?}");
    assert_eq!(
        app.metric("lottie_render_webhook_attempts_total{outcome=\"not_kept\"}")
            .await,
        1.0
    );
    for kept in &jobs[..BOUND as usize] {
        let delivery = delivery_of(&app, kept, |_| true).await;
        assert_eq!(delivery.state, WebhookDeliveryState::Pending as i32);
    }
    // Globex's event is kept and delivered: acme's bound is acme's.
    app.use_api_key(Some(GLOBEX));
    let request = rendered_once(&app).await;
    let job = app
        .submit(with_webhook(&request, &up.url("/")))
        .await
        .unwrap();
    let delivered = delivery_of(&app, &job.job_id, |d| {
        d.state == WebhookDeliveryState::Delivered as i32
    })
    .await;
    assert_eq!(delivered.attempts, 1);
    assert!(down.seen().iter().all(|seen| seen.id() != past.webhook_id));
}

crate::helpers::on_both_stores!(
    an_event_past_its_tenants_bound_shows_on_its_job_and_another_tenant_is_kept
);

/// The job's delivery of its succeeded event once `done` holds for it.
async fn delivery_of(
    app: &TestApp,
    job_id: &str,
    done: impl Fn(&proto::WebhookDelivery) -> bool,
) -> proto::WebhookDelivery {
    let start = Instant::now();
    loop {
        let job = app.get_job(job_id).await;
        let delivery = job
            .webhooks
            .iter()
            .find(|d| d.event == WebhookEvent::Succeeded as i32);
        if let Some(delivery) = delivery.filter(|d| done(d)) {
            return delivery.clone();
        }
        assert!(start.elapsed() < LIMIT, "{job:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
