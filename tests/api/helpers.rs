//! `spawn_app()`: the real server (`lottie_render::server::run`, as `serve` runs it) on
//! 127.0.0.1:0 with its own data directory, real worker processes (this crate's binary) and a
//! metrics endpoint, and clients connected to it; and one helper of each kind the tests
//! share (keyed calls, job states, watches to the end, worker stand-ins, Redis).

mod redis;
pub use redis::*;

use lottie_render::config::ServerSettings;
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use lottie_render::grpc::proto::template_service_client::TemplateServiceClient;
use lottie_render::server::Listeners;
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

/// A job's state.
pub fn state(job: &proto::RenderJob) -> proto::JobState {
    proto::JobState::try_from(job.state).unwrap()
}

/// The ErrorInfo reason of a refusal, empty when it carries none.
pub fn reason(status: &Status) -> String {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_default()
}

/// A CreateTemplate of `lottie_json` named `name`.
pub fn create_request(name: &str, lottie_json: impl Into<Vec<u8>>) -> proto::CreateTemplateRequest {
    proto::CreateTemplateRequest {
        name: name.into(),
        lottie_json: lottie_json.into(),
        fonts: Default::default(),
    }
}

/// An answer and whether it was a replay (`idempotent-replayed: true`).
pub fn with_replayed<T>(response: tonic::Response<T>) -> (T, bool) {
    let replayed = response
        .metadata()
        .get("idempotent-replayed")
        .is_some_and(|value| value == "true");
    (response.into_inner(), replayed)
}

/// SubmitRender through `client` under idempotency key `key`: the job and whether it was a
/// replay.
pub async fn submit_keyed_through(
    mut client: RenderServiceClient<Intercepted>,
    key: &str,
    request: proto::RenderRequest,
) -> Result<(proto::RenderJob, bool), Status> {
    let response = client
        .submit_render(with_idempotency_key(request, key))
        .await?;
    Ok(with_replayed(response))
}

/// Every snapshot WatchRenderJob through `client` sends, to the end of the stream (bounded by
/// `limit`).
pub async fn watch_through(
    client: RenderServiceClient<Intercepted>,
    job_id: &str,
    limit: Duration,
) -> Vec<proto::RenderJob> {
    rest_of(open_watch_through(client, job_id).await, limit).await
}

/// Every snapshot a watch opened earlier sends, to the end of its stream (bounded by
/// `limit`).
pub async fn rest_of(
    mut stream: tonic::Streaming<proto::RenderJob>,
    limit: Duration,
) -> Vec<proto::RenderJob> {
    let mut seen = Vec::new();
    tokio::time::timeout(limit, async {
        while let Some(job) = stream.message().await.unwrap() {
            seen.push(job);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the watch did not end within {limit:?}: {seen:?}"));
    seen
}

/// A WatchRenderJob stream of the job through `client`, opened.
pub async fn open_watch_through(
    mut client: RenderServiceClient<Intercepted>,
    job_id: &str,
) -> tonic::Streaming<proto::RenderJob> {
    client
        .watch_render_job(proto::WatchRenderJobRequest {
            job_id: job_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// The last snapshot of the job's watch through `client`, at its end (within
/// [`WATCH_LIMIT`]).
pub async fn finished_through(
    client: RenderServiceClient<Intercepted>,
    job_id: &str,
) -> proto::RenderJob {
    let mut seen = watch_through(client, job_id, WATCH_LIMIT).await;
    seen.pop()
        .unwrap_or_else(|| panic!("the watch of {job_id} sent nothing"))
}

/// The output of a succeeded job through `client`, checking chunk sizes and offsets on the
/// way.
pub async fn download_through(
    mut client: RenderServiceClient<Intercepted>,
    job_id: &str,
) -> Result<Vec<u8>, Status> {
    let mut stream = client
        .download_render_output(proto::DownloadRenderOutputRequest {
            job_id: job_id.into(),
        })
        .await?
        .into_inner();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.message().await? {
        assert!(
            chunk.data.len() <= 1024 * 1024,
            "chunk of {}",
            chunk.data.len()
        );
        assert!(!chunk.data.is_empty());
        assert_eq!(chunk.offset, bytes.len() as u64, "chunks in order");
        bytes.extend_from_slice(&chunk.data);
    }
    Ok(bytes)
}

/// `message` as a request carrying idempotency key `key`.
pub fn with_idempotency_key<T>(message: T, key: &str) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("idempotency-key", key.parse().unwrap());
    request
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// A server whose settings `configure` adjusts (workers, queue, limits, worker executable).
pub async fn spawn_app_with(configure: impl FnOnce(&mut ServerSettings)) -> TestApp {
    let data_dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics_address = metrics.local_addr().unwrap();
    let mut settings = ServerSettings::new(address, data_dir.path().to_path_buf());
    settings.worker_executable = Some(PathBuf::from(env!("CARGO_BIN_EXE_lottie-render")));
    // This test binary cannot run `analyze`; the real one can.
    settings.analysis_executable = Some(PathBuf::from(env!("CARGO_BIN_EXE_lottie-render")));
    settings.workers = Some(1);
    // Tests count the worker processes their jobs start; the spare-worker tests turn it on.
    settings.spare_workers = 0;
    configure(&mut settings);
    let tls = settings.tls.files().is_some();
    let (shutdown, stop) = oneshot::channel::<()>();
    let listeners = Listeners {
        grpc: listener,
        metrics: Some(metrics),
    };
    let server = tokio::spawn(async move {
        lottie_render::server::run(listeners, settings, async {
            let _ = stop.await;
        })
        .await
        .unwrap();
    });
    // The listener is bound already, so connecting cannot race the server's start. A TLS
    // server's tests connect with clients of their own (tests/api/tls.rs).
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
    configure: impl FnOnce(&mut ServerSettings),
) -> TestApp {
    let keys = api_keys_file(dir, keys);
    spawn_app_with(|settings| {
        settings.auth = lottie_render::auth::AuthMode::Required;
        settings.api_keys = Some(keys);
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
        BearerKey(key.map(|key| format!("Bearer {key}").parse().unwrap()))
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
                lottie_json: corpus(corpus_name),
                fonts: Default::default(),
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
        let request = proto::GetRenderJobRequest {
            job_id: job_id.into(),
        };
        let answer = self.renders().get_render_job(request).await;
        answer.map(tonic::Response::into_inner)
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

/// Sends raw bytes as a message and hands the answer's bytes back undecoded.
#[derive(Debug, Clone, Default)]
pub struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Status> {
        prost::bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        use prost::bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// The Prometheus text served at `address` (`GET /metrics`).
pub async fn metrics_text(address: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The status the health service of the server at `channel` answers for `service` (`""`:
/// the whole server).
pub async fn health_status(channel: &Channel, service: &str) -> i32 {
    tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

/// The `grpc-retry-pushback-ms` of a refusal (it must be a delay, not "do not retry").
pub fn pushback_ms(status: &Status) -> u64 {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .expect("a pushback")
        .to_str()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("a delay, not 'do not retry': {status:?}"))
}

/// The value of `sample` (`name{labels}` exactly as exposed) in the exposition `text`.
pub fn sample_value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(sample)?.strip_prefix(' ')?;
        Some(
            value
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{sample} has no number: {line}")),
        )
    })
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
        }),
    }
}

pub fn color(r: f64, g: f64, b: f64) -> proto::Color {
    proto::Color { r, g, b, a: None }
}

/// Worker processes started from `executable`, anywhere on the machine: children of this
/// process and orphans adopted by init alike (tests run side by side in this process, so
/// each test that counts workers gives its server an executable path of its own).
pub fn worker_processes(executable: &std::path::Path) -> Vec<(u32, String)> {
    let prefix = format!("{} worker", executable.display());
    live_processes(|cmdline| cmdline.starts_with(&prefix))
        .into_iter()
        .filter(|(pid, cmdline)| !is_zygote(*pid, cmdline))
        .collect()
}

/// The worker zygotes of `executable` alive now (the process spares are forked from), a
/// zygote still loading its libraries included.
pub fn zygote_processes(executable: &std::path::Path) -> Vec<(u32, String)> {
    let prefix = format!("{} worker", executable.display());
    live_processes(|cmdline| cmdline.starts_with(&prefix))
        .into_iter()
        .filter(|(pid, cmdline)| is_zygote(*pid, cmdline))
        .collect()
}

/// A zygote's forks share its command line (`worker --zygote`) but take the worker's process
/// name before the zygote hands them out; the zygote itself never has that name.
fn is_zygote(pid: u32, cmdline: &str) -> bool {
    let worker = lottie_render::sandbox::zygote::WORKER_PROCESS_NAME.to_string_lossy();
    cmdline.contains(" worker --zygote")
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(&format!("({worker})")))
}

/// Live (not zombie) processes anywhere on the machine whose command line (arguments joined
/// by spaces) `matches`.
pub fn live_processes(matches: impl Fn(&str) -> bool) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // A zombie is already dead (its parent reaps it).
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        if !zombie && matches(&cmdline) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Waits (up to 10 s) until `count` workers of `executable` run: a job is RUNNING a moment
/// before its process exists.
pub async fn wait_for_workers(executable: &std::path::Path, count: usize) {
    for _ in 0..1000 {
        if worker_processes(executable).len() == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "expected {count} workers, found {:?}",
        worker_processes(executable)
    );
}

/// A path of its own for the real worker binary (a symlink in `dir`), so that a test can
/// tell its server's workers from those of the tests running beside it.
pub fn own_worker_executable(dir: &std::path::Path) -> PathBuf {
    let link = dir.join("lottie-render-under-test");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_lottie-render"), &link).unwrap();
    link
}

/// A worker stand-in that logs its start to `count_file`, then runs the real worker.
pub fn counting_worker(dir: &std::path::Path, count_file: &std::path::Path) -> PathBuf {
    stand_in(
        &dir.join("counting-worker"),
        &format!(
            "echo started >> '{}'\nexec '{}' \"$@\"",
            count_file.display(),
            env!("CARGO_BIN_EXE_lottie-render")
        ),
    )
}

/// The starts `counting_worker(dir, dir/starts)` logged.
pub fn worker_starts(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("starts"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// An executable shell script at `path` running `body`.
pub fn stand_in(path: &std::path::Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// [`own_worker_executable`] in a temporary directory of its own, which must outlive it.
pub fn own_worker() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let executable = own_worker_executable(dir.path());
    (dir, executable)
}

/// A stand-in worker that crashes (SIGSEGV) and appends a line to `count_file` per start.
pub fn crashing_worker(dir: &std::path::Path, count_file: &std::path::Path) -> PathBuf {
    stand_in(
        &dir.join("crashing-worker"),
        &format!(
            "echo started >> '{}'\ncat > /dev/null\nkill -SEGV $$",
            count_file.display()
        ),
    )
}

#[test]
fn a_missing_sample_is_not_zero() {
    let text = "# HELP lottie_render_jobs_finished Jobs that reached a terminal state.\n\
                # TYPE lottie_render_jobs_finished counter\n\
                lottie_render_jobs_finished_total{outcome=\"failed\"} 2\n\
                # TYPE lottie_render_queue_depth gauge\n\
                lottie_render_queue_depth 0\n\
                # EOF\n";
    assert_eq!(
        sample_value(
            text,
            "lottie_render_jobs_finished_total{outcome=\"failed\"}"
        ),
        Some(2.0)
    );
    assert_eq!(sample_value(text, "lottie_render_queue_depth"), Some(0.0));
    // A prefix of an exposed name is not that sample.
    assert_eq!(sample_value(text, "lottie_render_queue_dept"), None);
    assert_eq!(sample_value(text, "lottie_render_queue_depth_total"), None);
    assert_eq!(
        sample_value(
            text,
            "lottie_render_jobs_finished_total{outcome=\"succeeded\"}"
        ),
        None
    );
}

/// Lowercase hex sha256 of `bytes`, as the service reports digests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A stand-in for this crate's binary (as worker or analysis executable) that, while engaged,
/// stops itself (SIGSTOP) before it runs the real binary: a test holds a render or an analysis
/// at its very start for as long as it needs, deterministically, where stopping a fast
/// process from outside would race it. Disengaged, it runs the real binary at once.
pub struct Hold {
    pub script: PathBuf,
    flag: PathBuf,
}

impl Hold {
    /// The stand-in script in `dir`, disengaged.
    pub fn new(dir: &std::path::Path) -> Hold {
        let flag = dir.join("hold");
        // Shell builtins only: the sandbox clears the environment (no PATH needed).
        let script = stand_in(
            &dir.join("holding-lottie-render"),
            &format!(
                "if [ -e '{}' ]; then kill -STOP $$; fi\nexec '{}' \"$@\"",
                flag.display(),
                env!("CARGO_BIN_EXE_lottie-render")
            ),
        );
        Hold { script, flag }
    }

    /// Processes started from now on stop at the hold.
    pub fn engage(&self) {
        std::fs::write(&self.flag, b"").unwrap();
    }

    /// Processes started from now on run at once (those held stay held).
    pub fn disengage(&self) {
        let _ = std::fs::remove_file(&self.flag);
    }

    /// Processes stopped at the hold now.
    pub fn held(&self) -> Vec<u32> {
        let script = self.script.display().to_string();
        live_processes(|cmdline| cmdline.contains(&script))
            .into_iter()
            .map(|(pid, _)| pid)
            .filter(|pid| process_state(*pid) == Some('T'))
            .collect()
    }

    /// Waits (up to a minute) until `count` processes are held; their ids.
    pub async fn wait_for_held(&self, count: usize) -> Vec<u32> {
        for _ in 0..6000 {
            let held = self.held();
            if held.len() == count {
                return held;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {count} held processes, found {:?}", self.held());
    }

    /// Disengages the hold and lets every process held at it go on.
    pub fn let_go(&self) {
        self.disengage();
        for pid in self.held() {
            self.release(pid);
        }
    }

    /// Lets a held process go on (SIGCONT).
    pub fn release(&self, pid: u32) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &pid.to_string()])
            .status();
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // A failed test must not leave stopped processes behind.
        self.disengage();
        for pid in self.held() {
            self.release(pid);
        }
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `Z` zombie…), `None` if gone.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Checks that `status` is `code` with ErrorInfo `reason` and answers the retry delay it
/// carries, after checking that its three forms agree: RetryInfo, `grpc-retry-pushback-ms`
/// (the same milliseconds) and `retry-after` (whole seconds rounded up, at least 1). A
/// deterministic refusal answers `None` after checking `grpc-retry-pushback-ms: -1` and that
/// it carries neither RetryInfo nor `retry-after`.
pub fn refusal_delay(status: &Status, code: tonic::Code, reason: &str) -> Option<Duration> {
    use tonic_types::StatusExt;
    assert_eq!(status.code(), code, "{status:?}");
    let details = status.get_error_details();
    assert_eq!(
        details.error_info().map(|info| info.reason.as_str()),
        Some(reason),
        "{status:?}"
    );
    let header = |name: &str| {
        status
            .metadata()
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    match details.retry_info().and_then(|info| info.retry_delay) {
        Some(delay) => {
            assert_eq!(
                header("grpc-retry-pushback-ms"),
                Some(delay.as_millis().to_string()),
                "{status:?}"
            );
            let seconds = (delay.as_secs() + u64::from(delay.subsec_nanos() > 0)).max(1);
            assert_eq!(
                header("retry-after"),
                Some(seconds.to_string()),
                "{status:?}"
            );
            Some(delay)
        }
        None => {
            assert_eq!(
                header("grpc-retry-pushback-ms").as_deref(),
                Some("-1"),
                "{status:?}"
            );
            assert_eq!(header("retry-after"), None, "{status:?}");
            None
        }
    }
}
