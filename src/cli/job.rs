//! `lottie-render job get|watch|cancel|download|list`: following render jobs, and the
//! watching and downloading that `submit --wait -o` shares.

use super::client::{
    connect, job_exit_code, print_job, run_client, state_name, ClientError, Connection,
    ServerAddress,
};
use super::render::Progress;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct JobArgs {
    #[command(flatten)]
    pub server: ServerAddress,
    #[command(subcommand)]
    pub command: JobCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum JobCommand {
    /// Show a job.
    Get { job_id: String },
    /// Follow a job to its end with a progress bar; exits like the job ended.
    Watch { job_id: String },
    /// Cancel a queued or running job.
    Cancel { job_id: String },
    /// Save a succeeded job's output (checked against its sha256).
    Download {
        job_id: String,
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// List the jobs, newest first: one line each (id, state, template, created, error).
    List {
        /// Only jobs in this state: queued, running, succeeded, failed or cancelled.
        #[arg(long, value_parser = parse_state)]
        state: Option<proto::JobState>,
        /// Only jobs of this template.
        #[arg(long = "template", value_name = "TEMPLATE_ID")]
        template_id: Option<String>,
        /// Only jobs whose error has this reason (e.g. RENDER_CRASHED).
        #[arg(long)]
        reason: Option<String>,
    },
}

/// A state as `--state` names it (`failed`, or `JOB_STATE_FAILED`).
fn parse_state(name: &str) -> Result<proto::JobState, String> {
    let upper = name.to_ascii_uppercase();
    let wire = if upper.starts_with("JOB_STATE_") {
        upper
    } else {
        format!("JOB_STATE_{upper}")
    };
    proto::JobState::from_str_name(&wire)
        .filter(|state| *state != proto::JobState::Unspecified)
        .ok_or_else(|| "one of queued, running, succeeded, failed, cancelled".to_owned())
}

/// Prints every job `filters` keeps, page after page.
async fn list(
    client: &mut RenderServiceClient<Connection>,
    filters: proto::ListRenderJobsRequest,
) -> Result<(), ClientError> {
    let mut request = filters;
    loop {
        let page = client.list_render_jobs(request.clone()).await?.into_inner();
        for job in &page.jobs {
            let created = job
                .created_at
                .as_ref()
                .map_or_else(|| "-".to_owned(), ToString::to_string);
            let error = job.error.as_ref().map_or("", |error| error.reason.as_str());
            println!(
                "{}  {:<9}  {}  {}  {}",
                job.job_id,
                state_name(job.state),
                job.template_id,
                created,
                error
            );
        }
        if page.next_page_token.is_empty() {
            return Ok(());
        }
        request.page_token = page.next_page_token;
    }
}

pub(crate) fn run(args: JobArgs) -> ExitCode {
    run_client(async move {
        let mut client = RenderServiceClient::new(connect(&args.server).await?);
        // Get and Cancel print the job they answer; Watch and Download end on their own.
        let answered = match args.command {
            JobCommand::Get { job_id } => {
                client
                    .get_render_job(proto::GetRenderJobRequest { job_id })
                    .await?
            }
            JobCommand::Cancel { job_id } => {
                client
                    .cancel_render_job(proto::CancelRenderJobRequest { job_id })
                    .await?
            }
            JobCommand::Watch { job_id } => {
                let job = watch(&mut client, &job_id).await?;
                print_job(&job);
                return Ok(job_exit_code(&job));
            }
            JobCommand::List {
                state,
                template_id,
                reason,
            } => {
                let filters = proto::ListRenderJobsRequest {
                    state: state.map_or(0, |state| state as i32),
                    template_id: template_id.unwrap_or_default(),
                    reason: reason.unwrap_or_default(),
                    ..proto::ListRenderJobsRequest::default()
                };
                list(&mut client, filters).await?;
                return Ok(ExitCode::SUCCESS);
            }
            JobCommand::Download { job_id, output } => {
                let job = client
                    .get_render_job(proto::GetRenderJobRequest {
                        job_id: job_id.clone(),
                    })
                    .await?
                    .into_inner();
                download(&mut client, &job, proto::OutputPart::Main, &output).await?;
                return Ok(ExitCode::SUCCESS);
            }
        };
        print_job(answered.get_ref());
        Ok(ExitCode::SUCCESS)
    })
}

/// Follows a job with WatchRenderJob to its terminal state, showing progress.
pub(crate) async fn watch(
    client: &mut RenderServiceClient<Connection>,
    job_id: &str,
) -> Result<proto::RenderJob, ClientError> {
    let mut stream = client
        .watch_render_job(proto::WatchRenderJobRequest {
            job_id: job_id.to_owned(),
        })
        .await?
        .into_inner();
    let mut progress: Option<Progress> = None;
    let mut last = None;
    let mut last_state = None;
    while let Some(job) = stream.message().await? {
        if last_state != Some(job.state) {
            if let Some(bar) = &progress {
                bar.finish();
            }
            progress = None;
            eprintln!("job {}: {}", job.job_id, state_name(job.state));
            last_state = Some(job.state);
        }
        if job.state == proto::JobState::Running as i32 {
            progress
                .get_or_insert_with(|| Progress::new(job.frames_total))
                .frames(job.frames_done, job.frames_total);
        }
        last = Some(job);
    }
    if let Some(bar) = &progress {
        bar.finish();
    }
    last.ok_or_else(|| {
        ClientError::Status(tonic::Status::unavailable(
            "the watch ended without a single update",
        ))
    })
}

/// Streams a succeeded job's output into `path` (a temporary file renamed when complete and
/// matching the job's sha256).
pub(crate) async fn download(
    client: &mut RenderServiceClient<Connection>,
    job: &proto::RenderJob,
    part: proto::OutputPart,
    path: &Path,
) -> Result<(), ClientError> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut partial = tempfile::Builder::new()
        .prefix(".lottie-render-download-")
        .tempfile_in(&directory)
        .map_err(|error| {
            ClientError::Io(format!("cannot write in {}: {error}", directory.display()))
        })?;
    let mut stream = client
        .download_render_output(proto::DownloadRenderOutputRequest {
            job_id: job.job_id.clone(),
            part: part as i32,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) = stream.message().await? {
        hasher.update(&chunk.data);
        size += chunk.data.len() as u64;
        partial
            .write_all(&chunk.data)
            .map_err(|error| ClientError::Io(format!("cannot write the output: {error}")))?;
    }
    let digest = crate::lottie::reading::template::lowercase_hex(&hasher.finalize());
    let expected = match part {
        proto::OutputPart::Poster => job
            .output
            .as_ref()
            .and_then(|output| output.poster.as_deref()),
        _ => job.output.as_ref(),
    };
    if let Some(output) = expected {
        if digest != output.sha256 || size != output.size_bytes {
            return Err(ClientError::Io(format!(
                "the download does not match the job's output ({size} bytes, sha256 {digest}; \
                 expected {} bytes, sha256 {})",
                output.size_bytes, output.sha256
            )));
        }
    }
    partial.persist(path).map_err(|error| {
        ClientError::Io(format!("cannot write {}: {}", path.display(), error.error))
    })?;
    eprintln!("wrote {} ({size} bytes, sha256 {digest})", path.display());
    Ok(())
}
