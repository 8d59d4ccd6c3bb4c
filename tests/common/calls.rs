//! One call and its answer as the tests make and read them: keyed requests and replays,
//! watches followed to their end, downloads, refusals and their retry delays, raw bytes.

use super::{BearerKey, Intercepted, WATCH_LIMIT};
use lottie_render::grpc::proto;
use lottie_render::grpc::proto::render_service_client::RenderServiceClient;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Request, Status};

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

/// The fields a refusal's `google.rpc.BadRequest` names, in its order (none without one).
pub fn violated_fields(status: &Status) -> Vec<String> {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .bad_request()
        .map(|request| {
            request
                .field_violations
                .iter()
                .map(|violation| violation.field.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Checks that one of a template's `warnings` contains `needle` (`why`: what it shows).
pub fn assert_warns(warnings: &[String], needle: &str, why: &str) {
    assert!(
        warnings.iter().any(|warning| warning.contains(needle)),
        "{why}: no warning with {needle:?} in {warnings:?}"
    );
}

/// A render client on `channel` that sends no API key (for servers the tests start as
/// processes of their own).
pub fn renders_on(channel: Channel) -> RenderServiceClient<Intercepted> {
    RenderServiceClient::with_interceptor(channel, BearerKey(None))
}

/// GetRenderJob of `job_id` through `client`, refusals included.
pub async fn get_job_through(
    mut client: RenderServiceClient<Intercepted>,
    job_id: &str,
) -> Result<proto::RenderJob, Status> {
    let request = proto::GetRenderJobRequest {
        job_id: job_id.into(),
    };
    let answer = client.get_render_job(request).await;
    answer.map(tonic::Response::into_inner)
}

/// A CreateTemplate of `lottie_json` named `name`.
pub fn create_request(name: &str, lottie_json: impl Into<Vec<u8>>) -> proto::CreateTemplateRequest {
    proto::CreateTemplateRequest {
        name: name.into(),
        lottie_json: lottie_json.into().into(),
        fonts: Default::default(),
        animation_id: String::new(),
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
    client: RenderServiceClient<Intercepted>,
    job_id: &str,
) -> Result<Vec<u8>, Status> {
    let chunks = download_chunks_through(client, job_id).await?;
    Ok(chunks.into_iter().flat_map(|chunk| chunk.data).collect())
}

/// The chunks of a succeeded job's output through `client`, as they came, checking sizes
/// (1 byte to 1 MiB) and offsets on the way.
pub async fn download_chunks_through(
    mut client: RenderServiceClient<Intercepted>,
    job_id: &str,
) -> Result<Vec<proto::OutputChunk>, Status> {
    let mut stream = client
        .download_render_output(proto::DownloadRenderOutputRequest {
            job_id: job_id.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut chunks = Vec::new();
    let mut offset = 0;
    while let Some(chunk) = stream.message().await? {
        assert!(
            chunk.data.len() <= 1024 * 1024,
            "chunk of {}",
            chunk.data.len()
        );
        assert!(!chunk.data.is_empty());
        assert_eq!(chunk.offset, offset, "chunks in order");
        offset += chunk.data.len() as u64;
        chunks.push(chunk);
    }
    Ok(chunks)
}

/// `message` as a request carrying idempotency key `key`.
pub fn with_idempotency_key<T>(message: T, key: &str) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("idempotency-key", key.parse().unwrap());
    request
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

/// Sends `call` until it is answered, retrying what the server says is worth retrying as a
/// well-behaved client does: ABORTED (a concurrent call with the key is creating its job)
/// and UNAVAILABLE (the key store or the shared job records did not answer in time on a
/// loaded machine), each after the delay the server asks for, and a call whose connection
/// closed under it (a transport error, not an answer; the key makes sending it again safe)
/// after a second. Any other refusal, or no answer after `attempts`, fails the test.
pub async fn until_answered<T, F, Fut>(attempts: usize, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Status>>,
{
    use std::error::Error as _;
    use tonic::Code;
    use tonic_types::StatusExt;
    for _ in 0..attempts {
        match call().await {
            Ok(answer) => return answer,
            Err(status) if matches!(status.code(), Code::Aborted | Code::Unavailable) => {
                let delay = status
                    .get_error_details()
                    .retry_info()
                    .and_then(|info| info.retry_delay)
                    .unwrap_or_else(|| panic!("a retryable refusal without a delay: {status:?}"));
                tokio::time::sleep(delay).await;
            }
            Err(status) if status.code() == Code::Cancelled && status.source().is_some() => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    panic!("not answered after {attempts} attempts");
}
