//! Templates, fonts and outputs in an S3-compatible bucket (`--storage-url s3://…`), against
//! the real S3 server `./dev test` starts on this machine (moto_server on 127.0.0.1:5077;
//! LOTTIE_RENDER_TEST_S3_ENDPOINT names another). Each test has a bucket of its own; the
//! outage test reaches the server through a TCP forwarder it can stop and start again, so
//! the store's objects survive the outage.

use crate::helpers::{
    corpus, create_request, files_under, refusal_delay, sha256_hex, small_request, spawn_app_with,
    unique_key, unique_prefix, TestApp,
};
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto;
use lottie_render::storage::settings::S3Credentials;
use lottie_render::storage::ObjectStorage;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

const BALL: &str = "slots-ball-colors-opacity.json";
/// A real template on which rlottie never finishes: its job stays RUNNING until cancelled.
const NEVER_FINISHES: &str = "malformed/real-rlottie-repro-infinite-loop.json";
/// Where `./dev test` starts the S3 server.
const DEFAULT_TEST_S3_ENDPOINT: &str = "http://127.0.0.1:5077";
/// The prefix the servers under test keep their objects under, inside each test's bucket.
const PREFIX: &str = "farm";

pub(crate) fn s3_endpoint() -> String {
    std::env::var("LOTTIE_RENDER_TEST_S3_ENDPOINT")
        .unwrap_or_else(|_| DEFAULT_TEST_S3_ENDPOINT.to_owned())
}

static BUCKETS: AtomicU64 = AtomicU64::new(0);

/// A bucket of one test on the test S3 server.
pub(crate) struct TestBucket {
    pub(crate) name: String,
}

impl TestBucket {
    pub(crate) async fn create() -> TestBucket {
        let name = format!(
            "lottie-test-{}-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
            BUCKETS.fetch_add(1, Ordering::SeqCst)
        );
        let endpoint = s3_endpoint();
        // The test server takes an unsigned CreateBucket; the service never creates buckets.
        let response = reqwest::Client::new()
            .put(format!("{endpoint}/{name}"))
            .send()
            .await
            .unwrap_or_else(|error| {
                panic!("no S3 server at {endpoint} ({error}): `./dev test` starts one")
            });
        assert!(
            response.status().is_success(),
            "cannot create bucket {name}: {}",
            response.status()
        );
        TestBucket { name }
    }

    /// Points `settings` at this bucket through `endpoint`, with short bounds so that an
    /// outage is answered within seconds.
    pub(crate) fn configure(&self, settings: &mut ServerSettings, endpoint: &str) {
        let storage = &mut settings.storage;
        storage.storage_url = Some(format!("s3://{}/{PREFIX}", self.name));
        storage.storage_endpoint = Some(endpoint.to_owned());
        storage.storage_region = Some("us-east-1".into());
        storage.storage_allow_http = true;
        storage.s3_credentials = Some(S3Credentials {
            access_key_id: "lottie-test".into(),
            secret_access_key: "lottie-test-secret".into(),
        });
        storage.storage_request_timeout_ms = 5_000;
        storage.storage_connect_timeout_ms = 500;
        storage.storage_max_retries = 1;
        storage.storage_retry_timeout_ms = 1_000;
    }

    /// The bucket under the servers' prefix as the servers open it, with `scratch` as its
    /// local scratch directory.
    fn objects(&self, scratch: &std::path::Path) -> ObjectStorage {
        let mut settings = ServerSettings::new("127.0.0.1:0".parse().unwrap(), "/".into());
        self.configure(&mut settings, &s3_endpoint());
        ObjectStorage::open(
            &settings.storage,
            scratch,
            tokio::runtime::Handle::current(),
        )
        .unwrap()
    }

    /// Every key under the servers' prefix, relative to it, sorted.
    async fn keys(&self) -> Vec<String> {
        let scratch = tempfile::tempdir().unwrap();
        let objects = self.objects(scratch.path());
        let mut keys: Vec<String> = objects
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|object| object.key)
            .collect();
        keys.sort();
        keys
    }

    async fn wait_for_key(&self, key: &str, present: bool) {
        for _ in 0..200 {
            if self.keys().await.iter().any(|k| k == key) == present {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "{key} never became {}: {:?}",
            if present { "present" } else { "absent" },
            self.keys().await
        );
    }
}

/// A server on `bucket` at the test S3 server, its settings further adjusted by `configure`.
async fn app_on_bucket(
    bucket: &TestBucket,
    configure: impl FnOnce(&mut ServerSettings) + Send,
) -> TestApp {
    spawn_app_with(|settings| {
        bucket.configure(settings, &s3_endpoint());
        configure(settings);
    })
    .await
}

#[tokio::test]
async fn a_template_is_rendered_and_downloaded_through_a_bucket_with_no_file_in_the_data_dir() {
    let bucket = TestBucket::create().await;
    let app = app_on_bucket(&bucket, |_| {}).await;
    let template = app.create_template(BALL).await;
    let job = app
        .render(small_request(&template.template_id, proto::Format::Gif))
        .await;
    let output = job.output.clone().unwrap();
    let bytes = app.download(&job.job_id).await.unwrap();
    assert_eq!(bytes.len() as u64, output.size_bytes);
    assert_eq!(sha256_hex(&bytes), output.sha256);

    let keys = bucket.keys().await;
    let id = &template.template_id;
    for key in [
        format!("templates/{id}/template.json"),
        format!("templates/{id}/record.json"),
        format!("templates/{id}/summary.json"),
        format!("outputs/{}.gif", job.job_id),
    ] {
        assert!(keys.contains(&key), "{key} not in the bucket: {keys:?}");
    }
    assert!(
        keys.iter()
            .any(|key| key.starts_with("templates/.index/") && key.contains(id.as_str())),
        "no index entry: {keys:?}"
    );
    // The job's copy of the template goes when the job has ended.
    bucket
        .wait_for_key(
            &format!("templates/.jobs/{}/template.json", job.job_id),
            false,
        )
        .await;
    assert_eq!(
        files_under(app.data_dir.path()),
        Vec::<std::path::PathBuf>::new(),
        "the data directory holds only empty scratch directories"
    );

    // The signed URL fetches the same bytes with a plain HTTP client, without the service.
    let url = output.download_url.expect("a signed download URL");
    let expires_at = SystemTime::try_from(output.download_url_expires_at.unwrap()).unwrap();
    let left = expires_at.duration_since(SystemTime::now()).unwrap();
    assert!(
        left > Duration::from_secs(3_500) && left <= Duration::from_secs(3_600),
        "expires in {left:?}"
    );
    // The stand-in serves any signature: ours is checked by a verification of our own.
    super::signed_urls::assert_signed(&url);
    let fetched = reqwest::get(&url).await.unwrap();
    assert!(fetched.status().is_success(), "{}", fetched.status());
    assert!(
        fetched.bytes().await.unwrap() == bytes,
        "the URL fetched other bytes"
    );
    // GetRenderJob signs too.
    let again = app.get_job(&job.job_id).await;
    assert!(again.output.unwrap().download_url.is_some());
    app.stop().await;
}

#[tokio::test]
async fn an_uploaded_font_in_the_bucket_is_staged_for_the_worker_and_used() {
    let bucket = TestBucket::create().await;
    let app = app_on_bucket(&bucket, |_| {}).await;
    // The template's text asks for family "Ubuntu"; DejaVu Serif (fonts-dejavu-core, which
    // ./dev installs) is visibly unlike the bundled fallback.
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf").unwrap();
    let mut ids = Vec::new();
    for fonts in [
        [("Ubuntu".to_owned(), font.into())].into(),
        Default::default(),
    ] {
        let created = app
            .templates()
            .create_template(proto::CreateTemplateRequest {
                fonts,
                ..create_request("hello", corpus("slots-text-document-sid.json"))
            })
            .await
            .unwrap()
            .into_inner();
        ids.push(created.template_id);
    }
    let font_key = format!("templates/{}/fonts/0.font", ids[0]);
    assert!(bucket.keys().await.contains(&font_key), "{font_key}");
    let mut outputs = Vec::new();
    for id in &ids {
        let mut request = small_request(id, proto::Format::Gif);
        request.modifications = Some(proto::Modifications {
            texts: [("text_doc".to_owned(), "Uploaded".to_owned())].into(),
            colors: Default::default(),
            ..Default::default()
        });
        let job = app.submit(request).await.unwrap();
        let done = app.finished(&job.job_id).await;
        assert_eq!(done.state, proto::JobState::Succeeded as i32, "{done:?}");
        outputs.push(done.output.unwrap().sha256);
    }
    assert_ne!(outputs[0], outputs[1], "the staged font was not used");
    app.stop().await;
}

/// A replacement image goes into the job's pin in the bucket, is staged for the worker from
/// there (its pixels reach the output) and goes with the pin when the job ends.
#[tokio::test]
async fn a_replacement_image_is_pinned_in_the_bucket_staged_for_the_worker_and_removed_after() {
    use crate::api::image_slots::{png, quadrants, template_json, with_images};
    let bucket = TestBucket::create().await;
    let app = app_on_bucket(&bucket, |_| {}).await;
    let template = app.create("photo", template_json()).await.unwrap();
    let image = png(&quadrants(16, 16));
    let request = with_images(
        &template.template_id,
        vec![("photo", image.clone(), proto::ImageFit::Fill)],
    );
    let job = app.submit(request).await.unwrap();
    let key = format!(
        "templates/.jobs/{}/images/{}",
        job.job_id,
        sha256_hex(&image)
    );
    let done = app.finished(&job.job_id).await;
    assert_eq!(done.state, proto::JobState::Succeeded as i32, "{done:?}");
    bucket.wait_for_key(&key, false).await;
    let plain = app
        .render(with_images(&template.template_id, Vec::new()))
        .await;
    assert_ne!(
        done.output.unwrap().sha256,
        plain.output.unwrap().sha256,
        "the staged image was not drawn"
    );
    app.stop().await;
}

#[tokio::test]
async fn retention_deletes_an_output_from_the_bucket() {
    let bucket = TestBucket::create().await;
    let app = app_on_bucket(&bucket, |settings| {
        settings.jobs.retention_seconds = 1;
    })
    .await;
    let template = app.create_template(BALL).await;
    let job = app.submit_small(&template, proto::Format::Gif).await;
    let key = format!("outputs/{}.gif", job.job_id);
    let done = app.finished(&job.job_id).await;
    assert_eq!(done.state, proto::JobState::Succeeded as i32, "{done:?}");
    bucket.wait_for_key(&key, false).await;
    assert!(
        bucket
            .keys()
            .await
            .iter()
            .any(|key| key.ends_with("/record.json")),
        "retention is for outputs, not templates"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_template_deleted_while_its_job_is_queued_still_renders_from_the_bucket() {
    let bucket = TestBucket::create().await;
    let app = app_on_bucket(&bucket, |settings| {
        settings.render_workers.workers = Some(1);
    })
    .await;
    let blocker_template = app.create_template(NEVER_FINISHES).await;
    let blocker = app
        .start_running(small_request(
            &blocker_template.template_id,
            proto::Format::Gif,
        ))
        .await;
    let template = app.create_template(BALL).await;
    let job = app.submit_small(&template, proto::Format::Gif).await;
    assert_eq!(job.state, proto::JobState::Queued as i32);
    app.templates()
        .delete_template(proto::DeleteTemplateRequest {
            template_id: template.template_id.clone(),
        })
        .await
        .unwrap();
    let id = &template.template_id;
    assert!(
        !bucket
            .keys()
            .await
            .iter()
            .any(|key| key.starts_with(&format!("templates/{id}/"))),
        "the template's own objects are gone"
    );
    app.cancel(&blocker.job_id).await;
    let done = app.finished(&job.job_id).await;
    assert_eq!(done.state, proto::JobState::Succeeded as i32, "{done:?}");
    assert!(!app.download(&job.job_id).await.unwrap().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_file_over_a_part_is_uploaded_in_parts_read_in_ranges_signed_and_deleted_in_the_bucket() {
    use lottie_render::storage::objects::UPLOAD_PART_BYTES;
    let bucket = TestBucket::create().await;
    let scratch = tempfile::tempdir().unwrap();
    let objects = bucket.objects(scratch.path());
    // Two whole parts and a short last one: a real multipart upload (S3 refuses parts under
    // 5 MiB but the last).
    let bytes: Vec<u8> = (0..2 * UPLOAD_PART_BYTES + 12_345)
        .map(|i| (i % 251) as u8)
        .collect();
    let file = scratch.path().join("big.bin");
    std::fs::write(&file, &bytes).unwrap();
    let key = "outputs/big.bin";
    assert_eq!(
        objects.upload_file(key, &file).await.unwrap(),
        bytes.len() as u64
    );
    assert_eq!(objects.size(key).await.unwrap(), bytes.len() as u64);
    // A range across the first part's end.
    let start = UPLOAD_PART_BYTES as u64 - 10;
    let range = objects.get_range(key, start..start + 20).await.unwrap();
    assert_eq!(&range[..], &bytes[start as usize..start as usize + 20]);
    let url = objects
        .signed_download_url(key, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("S3 signs URLs");
    super::signed_urls::assert_signed(&url);
    let fetched = reqwest::get(&url).await.unwrap().bytes().await.unwrap();
    assert!(fetched == bytes, "the signed URL fetched other bytes");
    objects.delete(key).await.unwrap();
    assert!(matches!(
        objects.size(key).await,
        Err(lottie_render::storage::StorageError::ObjectMissing(_))
    ));
    assert_eq!(bucket.keys().await, Vec::<String>::new());
}

/// Ports the forwarder listens on: below Linux's ephemeral range (32768 and up by default), so
/// that while it is stopped no outgoing connection or port-0 listener of the tests running
/// beside it can be given its port before it binds the port again (seen once: AddrInUse).
const FORWARDER_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A listener on 127.0.0.1 at a free port of [`FORWARDER_PORTS`], tried from a place that
/// differs per process and call.
async fn bind_below_ephemeral_ports() -> tokio::net::TcpListener {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let span = u32::from(FORWARDER_PORTS.end - FORWARDER_PORTS.start);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let first = (std::process::id().wrapping_mul(7919) + call.wrapping_mul(104_729)) % span;
    for offset in 0..span {
        let port = FORWARDER_PORTS.start + ((first + offset) % span) as u16;
        if let Ok(listener) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            return listener;
        }
    }
    panic!("no free port in {FORWARDER_PORTS:?}");
}

/// A TCP forwarder to the S3 server that a test stops (new connections refused, open ones
/// cut) and starts again on the same port: the server, and the objects, outlive the outage.
struct StoreForwarder {
    address: SocketAddr,
    target: SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Connections are accepted and never answered (a store that hangs).
    hanging: bool,
}

impl StoreForwarder {
    async fn start() -> StoreForwarder {
        let target: SocketAddr = s3_endpoint()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("the test S3 endpoint is http://IP:PORT");
        let listener = bind_below_ephemeral_ports().await;
        let address = listener.local_addr().unwrap();
        let mut forwarder = StoreForwarder {
            address,
            target,
            task: None,
            hanging: false,
        };
        forwarder.serve(listener);
        forwarder
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (target, hanging) = (self.target, self.hanging);
        self.task = Some(tokio::spawn(async move {
            // Dropped with the task: every open connection is cut when the forwarder stops.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                connections.spawn(async move {
                    if hanging {
                        // Held open, never answered, until the forwarder stops.
                        std::future::pending::<()>().await;
                    }
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }

    async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Starts again, forwarding (`hanging` false) or holding every connection unanswered.
    async fn restart_as(&mut self, hanging: bool) {
        self.hanging = hanging;
        self.restart().await;
    }

    async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.address).await.unwrap();
        self.serve(listener);
    }
}

#[tokio::test]
async fn a_store_that_stops_mid_way_is_unavailable_with_a_delay_and_the_job_completes_once_it_is_back(
) {
    let bucket = TestBucket::create().await;
    let mut forwarder = StoreForwarder::start().await;
    let app = spawn_app_with(|settings| bucket.configure(settings, &forwarder.endpoint())).await;
    let template = app.create_template(BALL).await;
    let request = small_request(&template.template_id, proto::Format::Webm);
    let key = unique_key();
    let job = app.submit_with_key(&key, request.clone()).await.unwrap();
    // Accepted (its template copied), then the store goes before its output is stored.
    forwarder.stop().await;
    let failed = app.finished(&job.job_id).await;
    assert_eq!(failed.state, proto::JobState::Failed as i32, "{failed:?}");
    let error = failed.error.unwrap();
    assert_eq!(error.reason, "STORAGE_UNAVAILABLE", "{error:?}");
    assert!(error.retryable, "a lost upload is retryable: {error:?}");
    assert!(error.retry_after.is_some(), "{error:?}");

    // While it is down, what needs the store is UNAVAILABLE with a delay.
    let refused = app
        .submit_with_key(&unique_key(), request.clone())
        .await
        .unwrap_err();
    let delay = refusal_delay(&refused, tonic::Code::Unavailable, "STORAGE_UNAVAILABLE");
    assert!(delay.is_some_and(|delay| delay > Duration::ZERO));
    let refused = app
        .templates()
        .get_template(proto::GetTemplateRequest {
            template_id: template.template_id.clone(),
        })
        .await
        .unwrap_err();
    refusal_delay(&refused, tonic::Code::Unavailable, "STORAGE_UNAVAILABLE")
        .expect("a retry delay");

    // Back: the same request under the same key renders (the failed job freed its key).
    forwarder.restart().await;
    let again = app.submit_with_key(&key, request).await.unwrap();
    assert_ne!(again.job_id, job.job_id, "a new job, not the failed one");
    let done = app.finished(&again.job_id).await;
    assert_eq!(done.state, proto::JobState::Succeeded as i32, "{done:?}");
    let bytes = app.download(&again.job_id).await.unwrap();
    assert_eq!(sha256_hex(&bytes), done.output.unwrap().sha256);
    app.stop().await;
}

#[tokio::test]
async fn a_store_that_hangs_is_unavailable_within_its_timeouts_and_served_again_when_it_answers() {
    let bucket = TestBucket::create().await;
    let mut forwarder = StoreForwarder::start().await;
    let app = spawn_app_with(|settings| {
        bucket.configure(settings, &forwarder.endpoint());
        settings.storage.storage_request_timeout_ms = 1_000;
    })
    .await;
    let template = app.create_template(BALL).await;
    let get = || {
        let mut templates = app.templates();
        let request = proto::GetTemplateRequest {
            template_id: template.template_id.clone(),
        };
        async move { templates.get_template(request).await }
    };
    forwarder.stop().await;
    forwarder.restart_as(true).await;
    let began = std::time::Instant::now();
    let refused = get().await.unwrap_err();
    // At least one request timeout (the store hung, it did not refuse), at most a retry
    // within the 1 s retry budget and its own timeout.
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
    refusal_delay(&refused, tonic::Code::Unavailable, "STORAGE_UNAVAILABLE")
        .expect("a retry delay");
    forwarder.stop().await;
    forwarder.restart_as(false).await;
    assert_eq!(get().await.unwrap().into_inner().name, BALL);
    app.stop().await;
}

#[tokio::test]
async fn two_instances_on_one_bucket_and_one_redis_share_templates_and_outputs_without_a_shared_directory(
) {
    let bucket = TestBucket::create().await;
    let prefix = unique_prefix();
    let configure = |settings: &mut ServerSettings| {
        bucket.configure(settings, &s3_endpoint());
        settings.redis.redis_url = Some(crate::helpers::redis_url());
        settings.redis.redis_key_prefix = prefix.clone();
    };
    let first = spawn_app_with(configure).await;
    let second = spawn_app_with(configure).await;
    let template = first.create_template(BALL).await;
    let job = second
        .render(small_request(&template.template_id, proto::Format::Mp4))
        .await;
    let from_second = second.download(&job.job_id).await.unwrap();
    let from_first = first.download(&job.job_id).await.unwrap();
    assert_eq!(sha256_hex(&from_second), job.output.unwrap().sha256);
    assert!(
        from_first == from_second,
        "the two instances answer other bytes"
    );
    for app in [&first, &second] {
        assert_eq!(
            files_under(app.data_dir.path()),
            Vec::<std::path::PathBuf>::new()
        );
    }
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn a_poster_is_uploaded_signed_copied_for_a_reuse_and_downloaded_by_part_through_a_bucket() {
    let bucket = TestBucket::create().await;
    let app = app_on_bucket(&bucket, |_| {}).await;
    let template = app.create_template(BALL).await;
    let mut request = small_request(&template.template_id, proto::Format::Webm);
    request.output.as_mut().unwrap().poster = Some(proto::Poster { at: None });
    let job = app.render(request.clone()).await;
    let poster = job.output.clone().unwrap().poster.expect("a poster");
    let key = format!("outputs/{}.poster.png", job.job_id);
    assert!(
        bucket.keys().await.contains(&key),
        "{key} not in the bucket"
    );
    // Its signed URL fetches the PNG the job describes.
    let url = poster.download_url.clone().expect("a signed poster URL");
    super::signed_urls::assert_signed(&url);
    let fetched = reqwest::get(&url).await.unwrap().bytes().await.unwrap();
    assert_eq!(sha256_hex(&fetched), poster.sha256);
    assert!(fetched.starts_with(b"\x89PNG\r\n\x1a\n"));
    // The same request again (a new key) reuses the output: its poster is copied with it.
    let reuse = app.render(request).await;
    assert_ne!(reuse.job_id, job.job_id);
    let copied = format!("outputs/{}.poster.png", reuse.job_id);
    assert!(
        bucket.keys().await.contains(&copied),
        "{copied} not in the bucket"
    );
    let bytes = app
        .download_part(&reuse.job_id, proto::OutputPart::Poster)
        .await;
    assert!(bytes == fetched, "the reused job's poster differs");
    app.stop().await;
}
