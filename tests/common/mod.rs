//! `spawn_app()`: the real server (`lottie_render::app::run`, as `serve` runs it) on
//! 127.0.0.1:0 with its own data directory, real worker processes (this crate's binary) and a
//! metrics endpoint, and clients connected to it; and one helper of each kind the tests
//! share (keyed calls, job states, watches to the end, worker stand-ins, Redis).

mod calls;
mod metrics;
pub mod moving;
mod processes;
mod raw_h2;
mod redis;
mod server_process;

pub use calls::*;
pub use metrics::*;
pub use processes::*;
pub use raw_h2::*;
pub use redis::*;
pub use server_process::*;

use lottie_render::app::Listeners;
use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

pub struct TestApp {
    pub channel: Channel,
    pub address: SocketAddr,
    pub metrics_address: SocketAddr,
    pub data_dir: tempfile::TempDir,
    /// The API key the helper clients send (`authorization: Bearer KEY`); none by default.
    api_key: std::sync::Mutex<Option<String>>,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// A server whose settings `configure` adjusts (workers, queue, limits, worker executable).
pub async fn spawn_app_with(configure: impl FnOnce(&mut ServerSettings) + Send) -> TestApp {
    spawn_configured_app(Box::new(configure)).await
}

/// Not generic: the server task and the client connection compile once for this binary, not
/// once for each test's closure.
async fn spawn_configured_app(
    configure: Box<dyn FnOnce(&mut ServerSettings) + Send + '_>,
) -> TestApp {
    let data_dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics_address = metrics.local_addr().unwrap();
    let mut settings = ServerSettings::new(address, data_dir.path().to_path_buf());
    settings.render_workers.worker_executable =
        Some(PathBuf::from(env!("CARGO_BIN_EXE_lottie-render")));
    // This test binary cannot run `analyze`; the real one can.
    settings.analysis.analysis_executable =
        Some(PathBuf::from(env!("CARGO_BIN_EXE_lottie-render")));
    settings.render_workers.workers = Some(1);
    // Tests count the worker processes their jobs start; the spare-worker tests turn it on.
    settings.render_workers.spare_workers = 0;
    configure(&mut settings);
    let tls = settings.tls.files().is_some();
    let (shutdown, stop) = oneshot::channel::<()>();
    let listeners = Listeners {
        grpc: listener,
        metrics: Some(metrics),
    };
    let server = tokio::spawn(async move {
        lottie_render::app::run(listeners, settings, async {
            let _ = stop.await;
        })
        .await
        .unwrap();
    });
    // The listener is bound already, so connecting cannot race the server's start. A TLS
    // server's tests connect with clients of their own (tests/service/api/tls.rs).
    let endpoint = Channel::from_shared(format!("http://{address}")).unwrap();
    let channel = if tls {
        endpoint.connect_lazy()
    } else {
        endpoint.connect().await.unwrap()
    };
    TestApp {
        channel,
        address,
        metrics_address,
        data_dir,
        api_key: std::sync::Mutex::new(None),
        shutdown: Some(shutdown),
        server: Some(server),
    }
}

/// A server that requires API keys, those of `keys` (`(tenant, caller, key)`, in a file in
/// `dir`), its settings further adjusted by `configure`.
pub async fn spawn_app_with_keys(
    dir: &std::path::Path,
    keys: &[(&str, &str, &str)],
    configure: impl FnOnce(&mut ServerSettings) + Send,
) -> TestApp {
    let keys = api_keys_file(dir, keys);
    spawn_app_with(|settings| {
        settings.auth.mode = lottie_render::auth::AuthMode::Required;
        settings.auth.api_keys = Some(keys);
        configure(settings);
    })
    .await
}

/// How long a test follows a job before it gives up.
pub const WATCH_LIMIT: Duration = Duration::from_secs(120);

static KEYS: AtomicU64 = AtomicU64::new(0);

/// A fresh idempotency key.
pub fn unique_key() -> String {
    format!(
        "test-{}-{}",
        std::process::id(),
        KEYS.fetch_add(1, Ordering::SeqCst)
    )
}

/// Adds `authorization: Bearer KEY` to every call when it has a key.
#[derive(Clone)]
pub struct BearerKey(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl BearerKey {
    /// Calls with `key` (none: no authorization header).
    pub fn of(key: Option<&str>) -> BearerKey {
        BearerKey(key.map(|key| format!("Bearer {key}").parse().unwrap()))
    }
}

impl tonic::service::Interceptor for BearerKey {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

pub type Intercepted = InterceptedService<Channel, BearerKey>;

/// A `--api-keys` file in `dir` with lines `TENANT CALLER sha256(KEY)`.
pub fn api_keys_file(dir: &std::path::Path, keys: &[(&str, &str, &str)]) -> PathBuf {
    let path = dir.join("api-keys");
    let text: String = keys
        .iter()
        .map(|(tenant, caller, key)| {
            format!(
                "{tenant} {caller} {}\n",
                lottie_render::auth::api_keys::sha256_hex(key)
            )
        })
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

impl TestApp {
    /// Makes the helper clients (and every helper method) call with this API key.
    pub fn use_api_key(&self, key: Option<&str>) {
        *self.api_key.lock().unwrap() = key.map(str::to_string);
    }

    fn bearer(&self, key: Option<&str>) -> BearerKey {
        BearerKey::of(key)
    }

    pub fn templates(&self) -> TemplateServiceClient<Intercepted> {
        let key = self.api_key.lock().unwrap().clone();
        self.templates_as(key.as_deref())
    }

    pub fn renders(&self) -> RenderServiceClient<Intercepted> {
        let key = self.api_key.lock().unwrap().clone();
        self.renders_as(key.as_deref())
    }

    /// A template client calling with `key` (none: no authorization header).
    pub fn templates_as(&self, key: Option<&str>) -> TemplateServiceClient<Intercepted> {
        TemplateServiceClient::with_interceptor(self.channel.clone(), self.bearer(key))
    }

    /// A render client calling with `key` (none: no authorization header).
    pub fn renders_as(&self, key: Option<&str>) -> RenderServiceClient<Intercepted> {
        RenderServiceClient::with_interceptor(self.channel.clone(), self.bearer(key))
    }

    /// CreateTemplate of `lottie_json` named `name`.
    pub async fn create(
        &self,
        name: &str,
        lottie_json: impl Into<Vec<u8>>,
    ) -> Result<proto::Template, Status> {
        self.templates()
            .create_template(create_request(name, lottie_json))
            .await
            .map(tonic::Response::into_inner)
    }

    /// Registers a corpus file; answers the template.
    pub async fn create_template(&self, corpus_name: &str) -> proto::Template {
        self.templates()
            .create_template(proto::CreateTemplateRequest {
                name: corpus_name.into(),
                lottie_json: corpus(corpus_name).into(),
                fonts: Default::default(),
                animation_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// One page of ListTemplates (`page_size` 0: the server's default).
    pub async fn list_templates_page(
        &self,
        page_size: u32,
        page_token: String,
    ) -> proto::ListTemplatesResponse {
        self.templates()
            .list_templates(proto::ListTemplatesRequest {
                page_size,
                page_token,
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// The first page of ListTemplates, of the server's default size.
    pub async fn list_templates(&self) -> proto::ListTemplatesResponse {
        self.list_templates_page(0, String::new()).await
    }

    pub async fn get_template(&self, template_id: &str) -> Result<proto::Template, Status> {
        self.templates()
            .get_template(proto::GetTemplateRequest {
                template_id: template_id.into(),
            })
            .await
            .map(tonic::Response::into_inner)
    }

    /// SubmitRender with a fresh idempotency key.
    pub async fn submit(&self, request: proto::RenderRequest) -> Result<proto::RenderJob, Status> {
        self.submit_with_key(&unique_key(), request).await
    }

    /// Submits `request` (a fresh idempotency key) and waits until its job runs.
    pub async fn start_running(&self, request: proto::RenderRequest) -> proto::RenderJob {
        let job = self.submit(request).await.unwrap();
        self.wait_for_state(&job.job_id, proto::JobState::Running)
            .await
    }

    /// SubmitRender of [`small_request`] (a fresh idempotency key), accepted.
    pub async fn submit_small(
        &self,
        template: &proto::Template,
        format: proto::Format,
    ) -> proto::RenderJob {
        self.submit(small_request(&template.template_id, format))
            .await
            .unwrap_or_else(|status| panic!("the submission was refused: {status:?}"))
    }

    /// Renders `request` (a fresh idempotency key): the job's last snapshot, checked
    /// SUCCEEDED.
    pub async fn render(&self, request: proto::RenderRequest) -> proto::RenderJob {
        let job = self.submit(request).await.unwrap();
        let done = self.finished(&job.job_id).await;
        assert_eq!(state(&done), proto::JobState::Succeeded, "{done:?}");
        done
    }

    /// SubmitRender under idempotency key `key`.
    pub async fn submit_with_key(
        &self,
        key: &str,
        request: proto::RenderRequest,
    ) -> Result<proto::RenderJob, Status> {
        Ok(self.submit_keyed(key, request).await?.0)
    }

    /// SubmitRender under idempotency key `key`: the job and whether it was a replay.
    pub async fn submit_keyed(
        &self,
        key: &str,
        request: proto::RenderRequest,
    ) -> Result<(proto::RenderJob, bool), Status> {
        submit_keyed_through(self.renders(), key, request).await
    }

    pub async fn get_job(&self, job_id: &str) -> proto::RenderJob {
        self.try_get_job(job_id).await.unwrap()
    }

    /// GetRenderJob, refusals included.
    pub async fn try_get_job(&self, job_id: &str) -> Result<proto::RenderJob, Status> {
        get_job_through(self.renders(), job_id).await
    }

    pub async fn cancel(&self, job_id: &str) -> proto::RenderJob {
        let request = proto::CancelRenderJobRequest {
            job_id: job_id.into(),
        };
        let answer = self.renders().cancel_render_job(request).await;
        answer.unwrap().into_inner()
    }

    /// Every snapshot WatchRenderJob sends, to the end of the stream (bounded by `limit`).
    pub async fn watch(&self, job_id: &str, limit: Duration) -> Vec<proto::RenderJob> {
        watch_through(self.renders(), job_id, limit).await
    }

    /// The last snapshot of the job's watch, at its end (within [`WATCH_LIMIT`]).
    pub async fn finished(&self, job_id: &str) -> proto::RenderJob {
        finished_through(self.renders(), job_id).await
    }

    /// The state the job ended in (its watch followed to the end).
    pub async fn finished_state(&self, job_id: &str) -> proto::JobState {
        state(&self.finished(job_id).await)
    }

    /// A WatchRenderJob stream of the job, opened.
    pub async fn open_watch(&self, job_id: &str) -> tonic::Streaming<proto::RenderJob> {
        open_watch_through(self.renders(), job_id).await
    }

    /// [`TestApp::finished`] as the caller of `api_key`.
    pub async fn finished_as(&self, api_key: &str, job_id: &str) -> proto::RenderJob {
        finished_through(self.renders_as(Some(api_key)), job_id).await
    }

    /// Polls until the job is in `state` (for states a watch would pass through).
    pub async fn wait_for_state(&self, job_id: &str, state: proto::JobState) -> proto::RenderJob {
        for _ in 0..600 {
            let job = self.get_job(job_id).await;
            if job.state == state as i32 {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("job {job_id} never reached {state:?}");
    }

    /// The output of a succeeded job, checking chunk sizes and offsets on the way.
    pub async fn download(&self, job_id: &str) -> Result<Vec<u8>, Status> {
        download_through(self.renders(), job_id).await
    }

    /// Every byte of one part of a job's output (the output itself, or its poster).
    pub async fn download_part(&self, job_id: &str, part: proto::OutputPart) -> Vec<u8> {
        let mut stream = self
            .renders()
            .download_render_output(proto::DownloadRenderOutputRequest {
                job_id: job_id.into(),
                part: part as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await.unwrap() {
            bytes.extend_from_slice(&chunk.data);
        }
        bytes
    }

    /// The Prometheus text of the metrics endpoint.
    pub async fn metrics_text(&self) -> String {
        metrics_text(self.metrics_address).await
    }

    /// The value of one sample (`name{labels}` exactly as exposed). Panics, naming the
    /// sample and showing the exposition, when the sample is absent: a misspelt name must
    /// fail, not read as 0.
    pub async fn metric(&self, sample: &str) -> f64 {
        let text = self.metrics_text().await;
        sample_value(&text, sample)
            .unwrap_or_else(|| panic!("no sample {sample} in the metrics:\n{text}"))
    }

    /// The value of a labelled sample, 0 while it is absent: a family's label set is only
    /// exposed once first counted (prometheus-client writes no line, not even `# TYPE`, for
    /// an empty family). Only for waiting until a sample reaches a positive value, where a
    /// misspelt name never does and the wait fails; never for a check that it is 0.
    pub async fn metric_or_zero(&self, sample: &str) -> f64 {
        sample_value(&self.metrics_text().await, sample).unwrap_or(0.0)
    }

    /// One unary call at `path` whose request body is `request`'s bytes as they are (what a
    /// client other than prost may send: unknown fields, fields and map entries in any
    /// order, bytes that do not decode), answering the response's bytes.
    pub async fn raw_unary(
        &self,
        path: &'static str,
        request: Request<Vec<u8>>,
    ) -> Result<tonic::Response<Vec<u8>>, Status> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_encoding_message_size(usize::MAX)
            .max_decoding_message_size(usize::MAX);
        grpc.ready().await.unwrap();
        grpc.unary(
            request,
            http::uri::PathAndQuery::from_static(path),
            RawCodec,
        )
        .await
    }

    /// Asks the server to shut down without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(mut self) {
        self.begin_shutdown();
        if let Some(server) = self.server.take() {
            server.await.unwrap();
        }
    }
}

/// Every file (not directory) under `dir`, at any depth.
pub fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

pub fn corpus_path(name: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus")
        .join(name)
}

pub fn corpus(name: &str) -> Vec<u8> {
    std::fs::read(corpus_path(name)).unwrap()
}

/// A render request of `template_id` as `format`, small and quick (100×100, 30 fps).
pub fn small_request(template_id: &str, format: proto::Format) -> proto::RenderRequest {
    proto::RenderRequest {
        template_id: template_id.into(),
        modifications: None,
        output: Some(proto::OutputSpec {
            format: format as i32,
            fps: 30,
            width: 100,
            height: 100,
            background: None,
            ..Default::default()
        }),
        notify: None,
        theme: String::new(),
    }
}

pub fn color(r: f64, g: f64, b: f64) -> proto::Color {
    proto::Color { r, g, b, a: None }
}

/// Lowercase hex sha256 of `bytes`, as the service reports digests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
