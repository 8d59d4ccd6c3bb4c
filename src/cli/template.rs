//! `lottie-render template create|get|list|delete`: TemplateService for people.

use super::client::{connect, print_template, run_client, ClientError, ServerAddress};
use crate::grpc::proto;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct TemplateArgs {
    #[command(flatten)]
    pub server: ServerAddress,
    #[command(subcommand)]
    pub command: TemplateCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TemplateCommand {
    /// Register a Lottie JSON file as a template; prints its id and slots.
    Create {
        /// The Lottie (Bodymovin) JSON file.
        file: PathBuf,
        /// Template name [default: the file name].
        #[arg(long)]
        name: Option<String>,
        /// A font for text slots, `FAMILY=FILE.ttf` (TrueType or OpenType). Repeatable.
        #[arg(long = "font", value_name = "FAMILY=FILE")]
        fonts: Vec<String>,
        /// The animation of a dotLottie archive to register, by its manifest id (default:
        /// the archive's own choice; register each of several once).
        #[arg(long, value_name = "ID")]
        animation: Option<String>,
    },
    /// Show a template.
    Get { template_id: String },
    /// List templates, newest first.
    List,
    /// Delete a template.
    Delete { template_id: String },
}

pub(crate) fn run(args: TemplateArgs) -> ExitCode {
    run_client(async move {
        let channel = connect(&args.server).await?;
        let mut client = TemplateServiceClient::new(channel)
            .max_encoding_message_size(crate::middleware::request_body::MAX_REQUEST_BYTES);
        match args.command {
            TemplateCommand::Create {
                file,
                name,
                fonts,
                animation,
            } => {
                let lottie_json = std::fs::read(&file).map_err(|error| {
                    ClientError::Usage(format!("cannot read {}: {error}", file.display()))
                })?;
                let name = name.unwrap_or_else(|| {
                    file.file_stem()
                        .map_or_else(|| "template".into(), |s| s.to_string_lossy().into_owned())
                });
                let mut font_bytes = HashMap::new();
                for pair in fonts {
                    let (family, path) = pair.split_once('=').ok_or_else(|| {
                        ClientError::Usage(format!("--font {pair}: expected FAMILY=FILE"))
                    })?;
                    let bytes = std::fs::read(path).map_err(|error| {
                        ClientError::Usage(format!("cannot read font {path}: {error}"))
                    })?;
                    font_bytes.insert(family.to_owned(), bytes.into());
                }
                let template = client
                    .create_template(proto::CreateTemplateRequest {
                        name,
                        lottie_json: lottie_json.into(),
                        fonts: font_bytes,
                        animation_id: animation.unwrap_or_default(),
                    })
                    .await?
                    .into_inner();
                print_template(&template);
            }
            TemplateCommand::Get { template_id } => {
                let template = client
                    .get_template(proto::GetTemplateRequest { template_id })
                    .await?
                    .into_inner();
                print_template(&template);
            }
            TemplateCommand::List => {
                let mut page_token = String::new();
                loop {
                    let page = client
                        .list_templates(proto::ListTemplatesRequest {
                            page_size: 0,
                            page_token,
                        })
                        .await?
                        .into_inner();
                    for template in &page.templates {
                        println!(
                            "{}  {}×{}  {:.2} s  {}",
                            template.template_id,
                            template.width,
                            template.height,
                            template.duration_seconds,
                            template.name
                        );
                    }
                    if page.next_page_token.is_empty() {
                        break;
                    }
                    page_token = page.next_page_token;
                }
            }
            TemplateCommand::Delete { template_id } => {
                client
                    .delete_template(proto::DeleteTemplateRequest {
                        template_id: template_id.clone(),
                    })
                    .await?;
                println!("deleted {template_id}");
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
