//! DownloadRenderOutput's streaming: at most `--max-downloads` at once on this instance,
//! shared fairly between callers (tenants, or addresses before identity: [`FairShare`], a
//! share that shrinks as more callers download and a reserve for callers downloading
//! nothing, so that no eight callers hold every slot; one more is RESOURCE_EXHAUSTED, reason
//! TOO_MANY_DOWNLOADS, with a retry delay), each
//! read from the store in ranges of one chunk (a bounded request each, with the store's
//! timeouts and retries, whatever the output's size and however slowly the caller reads),
//! read ahead by a few chunks, and ended when its caller reads nothing for
//! `--download-idle-timeout-ms`: the read-ahead and the slot are freed then, and the stream
//! ends with DOWNLOAD_STALLED if it is ever read again. A store that fails mid-way ends the
//! stream with UNAVAILABLE (STORAGE_UNAVAILABLE) and its retry delay.

use super::super::proto;
use crate::error::{ServiceError, ServiceErrorCode};
use crate::fair_share::{CallerKey, FairShare, ShareGuard, ShareRefusal, FIRST_SLOTS};
use crate::reason::Reason;
use crate::storage::{OutputStore, StorageError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::Status;
use uuid::Uuid;

/// Largest OutputChunk, bytes (the contract says at most 1 MiB).
pub const DOWNLOAD_CHUNK_BYTES: usize = 1024 * 1024;
/// Chunks read ahead of a slow downloader; bounds memory per download.
const DOWNLOAD_READ_AHEAD: usize = 4;
/// Retry delay of a download refused for the cap: downloads of honest callers take seconds.
const DOWNLOAD_RETRY_AFTER: Duration = Duration::from_secs(2);

/// DownloadRenderOutput streams at once: each holds an open file and up to 4 MiB read ahead.
pub(crate) const DEFAULT_MAX_DOWNLOADS: u32 = 64;
/// A download whose caller reads nothing for this long is ended and frees its file and
/// buffer: a minute covers any honest pause (a proxy, a GC), not a parked stream.
pub(crate) const DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS: u64 = 60_000;

/// The downloads' flags (turned into [`DownloadLimits`]).
#[derive(Debug, Clone, clap::Args)]
pub struct DownloadSettings {
    /// DownloadRenderOutput streams at once, shared fairly between callers; one more is
    /// answered RESOURCE_EXHAUSTED (TOO_MANY_DOWNLOADS).
    #[arg(long, env = "LOTTIE_RENDER_MAX_DOWNLOADS", default_value_t = DEFAULT_MAX_DOWNLOADS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_downloads: u32,
    /// A download whose caller reads nothing for this long is ended, milliseconds.
    #[arg(long, env = "LOTTIE_RENDER_DOWNLOAD_IDLE_TIMEOUT_MS", default_value_t = DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub download_idle_timeout_ms: u64,
}

impl Default for DownloadSettings {
    fn default() -> DownloadSettings {
        DownloadSettings {
            max_downloads: DEFAULT_MAX_DOWNLOADS,
            download_idle_timeout_ms: DEFAULT_DOWNLOAD_IDLE_TIMEOUT_MS,
        }
    }
}

impl DownloadSettings {
    pub(crate) fn limits(&self) -> DownloadLimits {
        DownloadLimits::new(
            self.max_downloads as usize,
            Duration::from_millis(self.download_idle_timeout_ms),
        )
    }
}

/// How many downloads may run at once and how long one may wait for its caller to read.
#[derive(Debug, Clone)]
pub struct DownloadLimits {
    open: FairShare<CallerKey>,
    idle_timeout: Duration,
}

impl DownloadLimits {
    pub(crate) fn new(max_downloads: usize, idle_timeout: Duration) -> DownloadLimits {
        DownloadLimits {
            open: FairShare::shrinking(max_downloads, FIRST_SLOTS),
            idle_timeout,
        }
    }

    /// A download's place among those running, or TOO_MANY_DOWNLOADS (the caller over its
    /// share, or every slot taken).
    pub(crate) fn slot(&self, key: CallerKey) -> Result<DownloadSlot, ServiceError> {
        self.open.try_acquire(key.clone(), 1).map_err(|refusal| {
            let message = match refusal {
                ShareRefusal::OverShare => format!(
                    "{key} already holds its share ({} of {}, fewer as more callers download) \
                     of the downloads running on this instance; retry after the delay",
                    self.open.share_of(&key),
                    self.open.capacity()
                ),
                ShareRefusal::PoolFull => {
                    "too many downloads are running on this instance; retry after the delay"
                        .to_owned()
                }
            };
            ServiceError::transient(
                ServiceErrorCode::ResourceExhausted,
                Reason::TooManyDownloads,
                message,
                DOWNLOAD_RETRY_AFTER,
            )
        })
    }

    /// Streams the `range` of `output`, holding `slot` while it is read; the first chunk
    /// carries `described` (the whole output).
    pub(crate) fn stream(
        &self,
        output: StoredOutput,
        range: std::ops::Range<u64>,
        described: Option<proto::RenderOutput>,
        slot: DownloadSlot,
    ) -> DownloadStream {
        let (sender, receiver) = mpsc::channel(DOWNLOAD_READ_AHEAD);
        let receiver = Arc::new(std::sync::Mutex::new(Some(receiver)));
        tokio::spawn(read_output(
            output,
            (range, described),
            sender,
            receiver.clone(),
            slot,
            self.idle_timeout,
        ));
        DownloadStream {
            receiver,
            ended: false,
        }
    }
}

/// A running download's slot, given back when dropped.
pub(crate) type DownloadSlot = ShareGuard<CallerKey>;

/// A job's output in the store.
#[derive(Debug, Clone)]
pub struct StoredOutput {
    pub outputs: OutputStore,
    pub job_id: Uuid,
    pub extension: &'static str,
}

/// The bytes of an output of `size` bytes that `request` asks for: `offset` to the end, or
/// `length` bytes from it (cut at the end). An offset at or past the end is the caller's
/// mistake (RANGE_NOT_SATISFIABLE), except 0 of an empty output.
pub(super) fn range(
    request: &proto::DownloadRenderOutputRequest,
    size: u64,
) -> Result<std::ops::Range<u64>, ServiceError> {
    let start = request.offset;
    if start >= size && !(start == 0 && size == 0) {
        let description = format!("offset {start} is not before the output's end ({size} bytes)");
        return Err(ServiceError::invalid_argument(
            Reason::RangeNotSatisfiable,
            description.clone(),
            vec![crate::error::FieldViolation {
                field: "offset".into(),
                description,
            }],
        ));
    }
    let end = match request.length {
        0 => size,
        length => start.saturating_add(length).min(size),
    };
    Ok(start..end)
}

/// One download chunk as the HTTP door needs it, read from its wire bytes (generated types
/// stay in this module): its data, its offset, and the whole file's type, size and sha256
/// on the first chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRead {
    pub data: bytes::Bytes,
    pub offset: u64,
    pub file: Option<FileFacts>,
}

/// What the first chunk says of the whole output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    pub content_type: String,
    pub size_bytes: u64,
    pub sha256: String,
}

/// Reads an OutputChunk's wire bytes.
pub fn read_chunk(bytes: bytes::Bytes) -> Result<ChunkRead, String> {
    let chunk = <proto::OutputChunk as prost::Message>::decode(bytes).map_err(|e| e.to_string())?;
    Ok(ChunkRead {
        data: chunk.data,
        offset: chunk.offset,
        file: chunk.output.map(|output| FileFacts {
            content_type: output.content_type,
            size_bytes: output.size_bytes,
            sha256: output.sha256,
        }),
    })
}

/// The error a failed read of `job_id`'s output ends its download with.
pub(super) fn read_failure(job_id: Uuid, error: StorageError) -> Status {
    match error {
        StorageError::ObjectMissing(_) => ServiceError::not_found(
            Reason::OutputNotFound,
            format!("the output of job {job_id} is gone (expired or removed)"),
        )
        .into(),
        other => ServiceError::from(other).into(),
    }
}

type ChunkReceiver = mpsc::Receiver<Result<proto::OutputChunk, Status>>;
type SharedChunkReceiver = Arc<std::sync::Mutex<Option<ChunkReceiver>>>;

/// The chunks read ahead for one download are only a mutex's hold on an `Option`: when the
/// caller stalls, the reader takes them away (freeing them) without the response stream,
/// which nobody polls then, having to wake up.
fn take_receiver(receiver: &SharedChunkReceiver) -> Option<ChunkReceiver> {
    // The guarded value is an Option replaced in one step: usable after any panic.
    receiver
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take()
}

/// Reads `output` into `sender` chunk by chunk, holding the download's `slot`, until the
/// end, an error, the caller going away, or the caller reading nothing for `idle_timeout`
/// (the read-ahead is then dropped and the stream ends with DOWNLOAD_STALLED when next
/// polled). At the end the slot is held until the caller has read what was read ahead for
/// it, so a download that nobody reads holds its slot for what it holds, not for the time
/// the store took.
async fn read_output(
    output: StoredOutput,
    (range, described): (std::ops::Range<u64>, Option<proto::RenderOutput>),
    sender: mpsc::Sender<Result<proto::OutputChunk, Status>>,
    receiver: SharedChunkReceiver,
    slot: DownloadSlot,
    idle_timeout: Duration,
) {
    let (job_id, end) = (output.job_id, range.end);
    let read = send_chunks(&output, (range, described), &sender, idle_timeout).await;
    let read = match read {
        ReadAll::Read => drained(&sender, idle_timeout, end).await,
        other => other,
    };
    if let ReadAll::Stalled(offset) = read {
        tracing::info!(
            %job_id,
            offset,
            idle_seconds = idle_timeout.as_secs_f64(),
            "a download's caller stopped reading; ending it"
        );
        drop(take_receiver(&receiver));
    }
    drop(slot);
}

/// How sending a download's chunks ended.
enum ReadAll {
    /// Every chunk is sent (an error ends it too, sent as the last).
    Read,
    /// The caller went away, or an error was sent.
    Ended,
    /// The caller read nothing for the idle timeout; the offset reached.
    Stalled(u64),
}

/// Sends the `range` of `output` into `sender` chunk by chunk, the first carrying
/// `described`.
async fn send_chunks(
    output: &StoredOutput,
    (range, mut described): (std::ops::Range<u64>, Option<proto::RenderOutput>),
    sender: &mpsc::Sender<Result<proto::OutputChunk, Status>>,
    idle_timeout: Duration,
) -> ReadAll {
    let job_id = output.job_id;
    let (mut offset, size) = (range.start, range.end);
    while offset < size {
        let end = size.min(offset + DOWNLOAD_CHUNK_BYTES as u64);
        let read = output
            .outputs
            .read(job_id, output.extension, offset..end)
            .await;
        let chunk = match read {
            // A shorter object than its size said (replaced meanwhile): the end.
            Ok(data) if data.is_empty() => break,
            Ok(data) => {
                let read = data.len() as u64;
                let chunk = proto::OutputChunk {
                    data,
                    offset,
                    output: described.take(),
                };
                offset += read;
                Ok(chunk)
            }
            Err(error) => {
                tracing::warn!(%job_id, offset, %error, "reading an output failed");
                Err(read_failure(job_id, error))
            }
        };
        let failed = chunk.is_err();
        match tokio::time::timeout(idle_timeout, sender.send(chunk)).await {
            Ok(Ok(())) if !failed => {}
            // Sent the error, or the caller went away.
            Ok(_) => return ReadAll::Ended,
            Err(_) => return ReadAll::Stalled(offset),
        }
    }
    ReadAll::Read
}

/// Waits until the caller has taken every chunk read ahead for it (it read one within each
/// `idle_timeout`), or went away; all was read up to `end`.
async fn drained(
    sender: &mpsc::Sender<Result<proto::OutputChunk, Status>>,
    idle_timeout: Duration,
    end: u64,
) -> ReadAll {
    // Each permit is a chunk the caller took; all of them back, nothing is left to take.
    let mut taken = Vec::with_capacity(DOWNLOAD_READ_AHEAD);
    while taken.len() < sender.max_capacity() {
        match tokio::time::timeout(idle_timeout, sender.reserve()).await {
            Ok(Ok(permit)) => taken.push(permit),
            Ok(Err(_)) => return ReadAll::Ended,
            Err(_) => return ReadAll::Stalled(end),
        }
    }
    ReadAll::Read
}

impl Default for DownloadLimits {
    fn default() -> DownloadLimits {
        DownloadSettings::default().limits()
    }
}

/// DownloadRenderOutput's answer: the chunks read ahead, then DOWNLOAD_STALLED if the reader
/// gave up on a caller that stopped reading.
pub struct DownloadStream {
    receiver: SharedChunkReceiver,
    ended: bool,
}

impl futures_util::Stream for DownloadStream {
    type Item = Result<proto::OutputChunk, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.ended {
            return std::task::Poll::Ready(None);
        }
        let polled = self
            .receiver
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_mut()
            .map(|receiver| receiver.poll_recv(cx));
        match polled {
            Some(polled) => polled,
            None => {
                self.ended = true;
                std::task::Poll::Ready(Some(Err(ServiceError::transient(
                    ServiceErrorCode::Unavailable,
                    Reason::DownloadStalled,
                    "the download was ended: nothing was read for too long",
                    DOWNLOAD_RETRY_AFTER,
                )
                .into())))
            }
        }
    }
}
