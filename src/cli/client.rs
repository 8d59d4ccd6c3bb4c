//! What the client subcommands (`template`, `submit`, `job`) share: the server address, the
//! connection, and how answers and errors are shown to people. These subcommands are gRPC
//! clients, so unlike the rest of the crate they speak the generated wire types directly.
//!
//! Exit codes follow the service's error classes: 65 for a deterministic refusal (fix the
//! request), 75 for a transient one (retry later; the delay is printed), 70 for anything else.

use super::exit;
use crate::grpc::proto;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, clap::Args)]
pub struct ServerAddress {
    /// The lottie-render server.
    #[arg(
        long,
        env = "LOTTIE_RENDER_SERVER",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub server: String,
    /// CA certificates (PEM) that sign the server's certificate; needed with an `https://`
    /// server (this client trusts no system roots).
    #[arg(long, env = "LOTTIE_RENDER_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM) for a server that asks for one (mTLS).
    #[arg(
        long = "tls-cert",
        env = "LOTTIE_RENDER_CLIENT_TLS_CERT",
        global = true,
        requires = "client_tls_key"
    )]
    pub client_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(
        long = "tls-key",
        env = "LOTTIE_RENDER_CLIENT_TLS_KEY",
        global = true,
        requires = "client_tls_cert"
    )]
    pub client_tls_key: Option<PathBuf>,
    /// The name the server's certificate must carry, when it is not `--server`'s host.
    #[arg(long, env = "LOTTIE_RENDER_TLS_DOMAIN", global = true)]
    pub tls_domain: Option<String>,
    /// API key, sent as `authorization: Bearer KEY` on every call.
    #[arg(
        long,
        env = "LOTTIE_RENDER_API_KEY",
        global = true,
        hide_env_values = true
    )]
    pub api_key: Option<String>,
}

/// Adds `authorization: Bearer KEY` to every call when an API key is given.
#[derive(Debug, Clone)]
pub(crate) struct ApiKeyHeader(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for ApiKeyHeader {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A connection to the server, calling with the API key when one is given.
pub(crate) type Connection = InterceptedService<Channel, ApiKeyHeader>;

/// Why a client subcommand stopped.
#[derive(Debug)]
pub(crate) enum ClientError {
    /// The command line or a local file is wrong.
    Usage(String),
    /// The server answered an error.
    Status(Status),
    /// Local I/O failed (writing the output).
    Io(String),
}

impl From<Status> for ClientError {
    fn from(status: Status) -> ClientError {
        ClientError::Status(status)
    }
}

/// Runs `work` on a fresh runtime and turns its outcome into an exit code.
pub(crate) fn run_client<F>(work: F) -> ExitCode
where
    F: std::future::Future<Output = Result<ExitCode, ClientError>>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(exit::CRASHED);
        }
    };
    match runtime.block_on(work) {
        Ok(code) => code,
        Err(ClientError::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(exit::USAGE)
        }
        Err(ClientError::Io(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(exit::TRANSIENT as u8)
        }
        Err(ClientError::Status(status)) => report_status(&status),
    }
}

pub(crate) async fn connect(address: &ServerAddress) -> Result<Connection, ClientError> {
    let mut endpoint = Channel::from_shared(address.server.clone())
        .map_err(|error| ClientError::Usage(format!("--server {}: {error}", address.server)))?
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(tls) = client_tls(address)? {
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|error| ClientError::Usage(format!("TLS settings: {error}")))?;
    }
    let api_key = match &address.api_key {
        Some(key) => {
            let mut value = MetadataValue::try_from(format!("Bearer {key}")).map_err(|_| {
                ClientError::Usage("--api-key: an API key is printable ASCII".into())
            })?;
            value.set_sensitive(true);
            Some(value)
        }
        None => None,
    };
    let channel = endpoint.connect().await.map_err(|error| {
        ClientError::Status(Status::unavailable(format!(
            "cannot connect to {}: {}",
            address.server,
            error_chain(&error)
        )))
    })?;
    Ok(InterceptedService::new(channel, ApiKeyHeader(api_key)))
}

/// The TLS settings of an `https://` server; none for `http://`.
fn client_tls(address: &ServerAddress) -> Result<Option<ClientTlsConfig>, ClientError> {
    let https = address.server.starts_with("https://");
    let tls_flags = address.tls_ca.is_some()
        || address.client_tls_cert.is_some()
        || address.tls_domain.is_some();
    if !https {
        return if tls_flags {
            Err(ClientError::Usage(format!(
                "--server {}: TLS flags need an https:// server",
                address.server
            )))
        } else {
            Ok(None)
        };
    }
    let Some(ca) = &address.tls_ca else {
        return Err(ClientError::Usage(
            "an https:// server needs --tls-ca (the CA certificate that signs the server's)".into(),
        ));
    };
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read_pem(ca)?));
    if let (Some(cert), Some(key)) = (&address.client_tls_cert, &address.client_tls_key) {
        tls = tls.identity(Identity::from_pem(read_pem(cert)?, read_pem(key)?));
    }
    if let Some(domain) = &address.tls_domain {
        tls = tls.domain_name(domain.clone());
    }
    Ok(Some(tls))
}

fn read_pem(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path)
        .map_err(|error| ClientError::Usage(format!("cannot read {}: {error}", path.display())))
}

/// An error with its causes (`connect` errors say little at the top: the TLS reason is a
/// few sources down).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Prints a refusal with everything the service said; answers the exit code of its class.
pub(crate) fn report_status(status: &Status) -> ExitCode {
    let details = status.get_error_details();
    let reason = details
        .error_info()
        .map(|info| format!(" [{}]", info.reason))
        .unwrap_or_default();
    eprintln!("error: {:?}{reason}: {}", status.code(), status.message());
    if let Some(bad_request) = details.bad_request() {
        for violation in &bad_request.field_violations {
            eprintln!("  {}: {}", violation.field, violation.description);
        }
    }
    if let Some(delay) = details.retry_info().and_then(|info| info.retry_delay) {
        eprintln!("  retry after {:.1} s", delay.as_secs_f64());
    }
    let code = match status.code() {
        Code::InvalidArgument
        | Code::NotFound
        | Code::FailedPrecondition
        | Code::Unauthenticated
        | Code::PermissionDenied => exit::DETERMINISTIC,
        Code::Unavailable | Code::ResourceExhausted | Code::Aborted | Code::DeadlineExceeded => {
            exit::TRANSIENT
        }
        _ => i32::from(exit::CRASHED),
    };
    ExitCode::from(code as u8)
}

/// RFC 3339, UTC (prost's Timestamp formats itself so).
fn timestamp(value: Option<&prost_types::Timestamp>) -> String {
    value.map_or_else(|| "-".to_owned(), ToString::to_string)
}

pub(crate) fn state_name(state: i32) -> &'static str {
    match proto::JobState::try_from(state) {
        Ok(proto::JobState::Queued) => "QUEUED",
        Ok(proto::JobState::Running) => "RUNNING",
        Ok(proto::JobState::Succeeded) => "SUCCEEDED",
        Ok(proto::JobState::Failed) => "FAILED",
        Ok(proto::JobState::Cancelled) => "CANCELLED",
        _ => "UNSPECIFIED",
    }
}

pub(crate) fn print_job(job: &proto::RenderJob) {
    println!("job        {}", job.job_id);
    println!("template   {}", job.template_id);
    println!("state      {}", state_name(job.state));
    println!("frames     {}/{}", job.frames_done, job.frames_total);
    println!("created    {}", timestamp(job.created_at.as_ref()));
    println!("started    {}", timestamp(job.started_at.as_ref()));
    println!("finished   {}", timestamp(job.finished_at.as_ref()));
    if let Some(output) = &job.output {
        println!(
            "output     {}, {}×{}, {} frames at {} fps ({:.2} s), {} bytes, sha256 {}",
            output.content_type,
            output.width,
            output.height,
            output.frame_count,
            output.fps,
            output.duration_seconds,
            output.size_bytes,
            output.sha256
        );
    }
    if let Some(error) = &job.error {
        let retry = match (&error.retry_after, error.retryable) {
            (Some(delay), true) => format!("retryable after {} s", delay.seconds),
            (None, true) => "retryable".to_owned(),
            _ => "not retryable".to_owned(),
        };
        println!("error      {} ({retry}): {}", error.reason, error.message);
    }
}

pub(crate) fn print_template(template: &proto::Template) {
    // Destructured so that a new field (a new kind of slot) is a compile error here until it
    // is printed or said not to be.
    let proto::Template {
        template_id,
        name,
        width,
        height,
        frame_rate,
        in_frame,
        out_frame,
        duration_seconds,
        sha256,
        text_slots,
        color_slots,
        image_slots,
        scalar_slots,
        vector_slots,
        gradient_slots,
        themes,
        animations,
        animation_id,
        warnings,
        created_at: _,
        markers: _,
        slots_truncated: _,
        warnings_truncated: _,
    } = template;
    println!("template   {template_id}");
    println!("name       {name}");
    println!(
        "canvas     {width}×{height}, {frame_rate} fps, frames {in_frame}..{out_frame} \
         ({duration_seconds:.2} s)"
    );
    println!("sha256     {sha256}");
    print_slots(text_slots);
    print_slots(color_slots);
    print_slots(image_slots);
    print_slots(scalar_slots);
    print_slots(vector_slots);
    print_slots(gradient_slots);
    if !themes.is_empty() {
        println!("themes     {}", themes.join(", "));
    }
    if !animations.is_empty() {
        let chosen = if animation_id.is_empty() {
            "the archive's own choice"
        } else {
            animation_id
        };
        println!(
            "animations {} (this template: {chosen})",
            animations.join(", ")
        );
    }
    for warning in warnings {
        println!("warning    {warning}");
    }
}

/// A line per slot, for the ones that have something to show.
fn print_slots(slots: &[impl SlotLine]) {
    for line in slots.iter().filter_map(SlotLine::line) {
        println!("{line}");
    }
}

/// How `template` prints a slot of a kind.
trait SlotLine {
    fn line(&self) -> Option<String>;
}

impl SlotLine for proto::TextSlot {
    fn line(&self) -> Option<String> {
        let (id, text, font) = (&self.id, &self.default_text, &self.font_family);
        Some(format!("text slot  {id} = {text:?} (font {font})"))
    }
}

impl SlotLine for proto::ColorSlot {
    fn line(&self) -> Option<String> {
        let c = self.default_color.as_ref()?;
        let alpha = c.a.map(|a| format!(" a {a:.3}")).unwrap_or_default();
        Some(format!(
            "color slot {} = r {:.3} g {:.3} b {:.3}{alpha}",
            self.id, c.r, c.g, c.b
        ))
    }
}

impl SlotLine for proto::ImageSlot {
    fn line(&self) -> Option<String> {
        let default = if self.has_default {
            ""
        } else {
            ", no default image"
        };
        Some(format!(
            "image slot {} = {}×{} box{default}",
            self.id, self.width, self.height
        ))
    }
}

impl SlotLine for proto::ScalarSlot {
    fn line(&self) -> Option<String> {
        Some(format!(
            "scalar slot {} = {} ({}, {}..={})",
            self.id, self.default_value, self.property, self.min, self.max
        ))
    }
}

impl SlotLine for proto::VectorSlot {
    fn line(&self) -> Option<String> {
        Some(format!(
            "vector slot {} = {:?} ({})",
            self.id, self.default_value, self.property
        ))
    }
}

impl SlotLine for proto::GradientSlot {
    fn line(&self) -> Option<String> {
        let stops = self.default_stops.len();
        Some(format!("gradient slot {} = {stops} stops", self.id))
    }
}

/// The exit code for a job that reached a terminal state.
pub(crate) fn job_exit_code(job: &proto::RenderJob) -> ExitCode {
    match (proto::JobState::try_from(job.state), &job.error) {
        (Ok(proto::JobState::Succeeded), _) => ExitCode::SUCCESS,
        (_, Some(error)) if error.retryable => ExitCode::from(exit::TRANSIENT as u8),
        (Ok(proto::JobState::Cancelled), None) => ExitCode::from(exit::TRANSIENT as u8),
        _ => ExitCode::from(exit::DETERMINISTIC as u8),
    }
}
