//! `lottie-render submit --template ID --format … [--text …] [--color …] [--wait -o OUT]`:
//! SubmitRender for people; with `--wait` a progress bar follows the job (WatchRenderJob)
//! and `-o` saves the output.

use super::client::{connect, job_exit_code, print_job, run_client, ClientError, ServerAddress};
use super::job::{download, watch};
use super::render::SlotArgs;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::spec::{Fit, Format};
use std::path::PathBuf;
use std::process::ExitCode;
use tonic::Request;

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub server: ServerAddress,
    /// Id of a registered template.
    #[arg(long)]
    pub template: String,
    #[arg(long, value_enum)]
    pub format: Format,
    /// Output frame rate (30 or 60; 0 = 30).
    #[arg(long, default_value_t = 0)]
    pub fps: u32,
    /// Output width in pixels (100..=1920; 0 = 1080).
    #[arg(long, default_value_t = 0)]
    pub width: u32,
    /// Output height in pixels (100..=1920; 0 = 1080).
    #[arg(long, default_value_t = 0)]
    pub height: u32,
    #[command(flatten)]
    pub slots: SlotArgs,
    #[command(flatten)]
    pub timing: super::timing::TimingArgs,
    /// The idempotency key: run the command again with the same key and it answers the same
    /// job instead of rendering twice [default: a new random key].
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Follow the job to its end.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: save the output here.
    #[arg(short = 'o', long = "output", requires = "wait")]
    pub output: Option<PathBuf>,
    /// A theme of the template (a dotLottie's): its slot values apply first, the slot
    /// flags override them.
    #[arg(long, value_name = "NAME")]
    pub theme: Option<String>,
    /// POST the job's terminal events (succeeded, failed, cancelled), signed, to this https
    /// URL (docs/http.md, Webhooks).
    #[arg(long)]
    pub webhook: Option<String>,
    /// With --webhook: send this event too or instead (`started`, `succeeded`, `failed`,
    /// `cancelled`; repeat the flag for several) [default: the three terminal ones].
    #[arg(long = "webhook-event", value_enum, requires = "webhook")]
    pub webhook_events: Vec<WebhookEventArg>,
}

/// An event of `--webhook-event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WebhookEventArg {
    Started,
    Succeeded,
    Failed,
    Cancelled,
}

impl WebhookEventArg {
    fn to_proto(self) -> proto::WebhookEvent {
        match self {
            WebhookEventArg::Started => proto::WebhookEvent::Started,
            WebhookEventArg::Succeeded => proto::WebhookEvent::Succeeded,
            WebhookEventArg::Failed => proto::WebhookEvent::Failed,
            WebhookEventArg::Cancelled => proto::WebhookEvent::Cancelled,
        }
    }
}

/// The `--image` arguments as the request carries them (the files read whole: the server
/// refuses one over 10 MiB).
fn images_to_proto(
    slots: &SlotArgs,
) -> Result<std::collections::HashMap<String, proto::ImageInput>, ClientError> {
    let mut images = std::collections::HashMap::new();
    for image in slots.image_args().map_err(ClientError::Usage)? {
        let data = std::fs::read(&image.file).map_err(|error| {
            ClientError::Usage(format!("--image {}: {error}", image.file.display()))
        })?;
        let fit = match image.fit {
            Fit::Cover => proto::ImageFit::Cover,
            Fit::Contain => proto::ImageFit::Contain,
            Fit::Fill => proto::ImageFit::Fill,
        };
        images.insert(
            image.slot,
            proto::ImageInput {
                source: Some(proto::image_input::Source::Data(data.into())),
                fit: fit as i32,
            },
        );
    }
    Ok(images)
}

pub(crate) fn run(args: SubmitArgs) -> ExitCode {
    run_client(async move {
        let (modifications, background) = args.slots.parse().map_err(ClientError::Usage)?;
        let format = crate::grpc::convert::wire_format(args.format);
        let mut output = proto::OutputSpec {
            format: format as i32,
            fps: args.fps,
            width: args.width,
            height: args.height,
            background: background.map(proto::Color::from),
            ..Default::default()
        };
        args.timing.fill(&mut output);
        let request = proto::RenderRequest {
            template_id: args.template.clone(),
            modifications: Some(proto::Modifications {
                texts: modifications.texts.into_iter().collect(),
                colors: modifications
                    .colors
                    .into_iter()
                    .map(|(id, rgba)| (id, proto::Color::from(rgba)))
                    .collect(),
                images: images_to_proto(&args.slots)?,
                scalars: modifications.scalars.into_iter().collect(),
                vectors: modifications
                    .vectors
                    .into_iter()
                    .map(|(id, values)| (id, proto::Vector { values }))
                    .collect(),
                gradients: modifications
                    .gradients
                    .into_iter()
                    .map(|(id, stops)| {
                        let stops = stops
                            .into_iter()
                            .map(|stop| proto::GradientStop {
                                offset: stop.offset,
                                color: Some(stop.color.into()),
                            })
                            .collect();
                        (id, proto::Gradient { stops })
                    })
                    .collect(),
            }),
            output: Some(output),
            notify: args.webhook.clone().map(|webhook_url| proto::Notify {
                webhook_url,
                events: args
                    .webhook_events
                    .iter()
                    .map(|event| event.to_proto() as i32)
                    .collect(),
            }),
            theme: args.theme.clone().unwrap_or_default(),
        };
        let key = args
            .idempotency_key
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut request = Request::new(request);
        let key_value = key.parse().map_err(|_| {
            ClientError::Usage(format!(
                "--idempotency-key {key:?}: not a valid header value"
            ))
        })?;
        request.metadata_mut().insert("idempotency-key", key_value);
        let mut client = RenderServiceClient::new(connect(&args.server).await?);
        let job = client.submit_render(request).await?.into_inner();
        eprintln!("submitted job {} (idempotency-key {key})", job.job_id);
        if !args.wait {
            print_job(&job);
            return Ok(ExitCode::SUCCESS);
        }
        let job = watch(&mut client, &job.job_id).await?;
        print_job(&job);
        if let (Some(path), Some(_)) = (&args.output, &job.output) {
            download(&mut client, &job, proto::OutputPart::Main, path).await?;
        }
        if let (Some(path), Some(_)) = (&args.timing.poster, &job.output) {
            download(&mut client, &job, proto::OutputPart::Poster, path).await?;
        }
        Ok(job_exit_code(&job))
    })
}
