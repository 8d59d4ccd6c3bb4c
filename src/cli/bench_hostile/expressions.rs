//! Expressions that burn CPU in the analysis and in renders (issue 21, item 6): a loop of
//! megabyte string searches at CreateTemplate (charged by the bytes it touches: a warning in
//! milliseconds, not the analysis' whole 5 s), the same loop in the root `slots` object
//! rendered twice (the render fails at once, not retryable, and the second request is refused
//! as quarantined), and the loop gated on a colour the caller sets (expressions see the
//! template's colours, so it never runs).

use super::payloads::red_square;
use super::{outcome, Case, Target, ATTACKER_KEY};
use crate::cli::square_output;
use crate::grpc::proto;
use crate::grpc::proto::render_service_client::RenderServiceClient;
use crate::grpc::proto::template_service_client::TemplateServiceClient;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// An expression searching a megabyte string again and again: one native call each time, a
/// gigabyte of work between two of QuickJS's interrupt polls.
const STRING_SEARCH_HOG: &str =
    "var s = 'a'.repeat(1 << 20), n = 0; while (true) { n += s.indexOf('b'); } n";
/// How long the bench follows a render before it reports it as still running.
const RENDER_LIMIT: Duration = Duration::from_secs(60);

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "expression-string-search-hog",
            expected: "OK with a work-budget warning, in well under a second",
            requests: 1,
            attack: |target| {
                Box::pin(async move {
                    let started = Instant::now();
                    let created = create(target, hog_template(Placement::Layer)).await?;
                    Ok(match created {
                        Ok(template) => format!(
                            "OK in {:.0} ms, {} of {} warnings on the work budget",
                            started.elapsed().as_secs_f64() * 1e3,
                            template
                                .warnings
                                .iter()
                                .filter(|warning| warning.contains("work budget"))
                                .count(),
                            template.warnings.len()
                        ),
                        Err(status) => outcome::<()>(&Err(status)),
                    })
                })
            },
        },
        Case {
            name: "expression-hog-in-root-slots-rendered-twice",
            expected: "FAILED EXPRESSIONS_CPU_EXCEEDED (not retryable) at once, then InvalidArgument RENDER_QUARANTINED",
            requests: 3,
            attack: |target| Box::pin(render_twice(target, Placement::RootSlots)),
        },
        Case {
            name: "expression-hog-gated-on-a-callers-colour",
            expected: "SUCCEEDED (expressions see the template's colours: the hog never runs)",
            requests: 2,
            attack: |target| {
                Box::pin(async move {
                    let blue = proto::Color {
                        r: 0.0,
                        g: 0.0,
                        b: 1.0,
                        a: None,
                    };
                    render_once(target, Placement::GatedOnBlue, Some(blue)).await
                })
            },
        },
    ]
}

/// Where the template puts the hog.
#[derive(Clone, Copy)]
enum Placement {
    /// On the layer's position.
    Layer,
    /// In the root `slots` object, which the layer's position names by `sid`.
    RootSlots,
    /// On the layer's position, run only when the layer's fill (colour slot `paint`) is blue.
    GatedOnBlue,
}

/// One red square whose fill is colour slot `paint`, with the hog placed as `placement` says.
fn hog_template(placement: Placement) -> Value {
    let position = match placement {
        Placement::Layer => json!({"a": 0, "k": [50, 50, 0], "x": STRING_SEARCH_HOG}),
        Placement::RootSlots => json!({"a": 0, "k": [50, 50, 0], "sid": "place"}),
        Placement::GatedOnBlue => json!({"a": 0, "k": [50, 50, 0], "x": format!(
            "var c = content('square').content('paint').color;\n\
             if (c[2] > 0.5) {{ {STRING_SEARCH_HOG} }}\n[50, 50]"
        )}),
    };
    let mut template = red_square(position);
    if let Placement::RootSlots = placement {
        template["slots"] =
            json!({"place": {"p": {"a": 0, "k": [50, 50, 0], "x": STRING_SEARCH_HOG}}});
    }
    template
}

/// CreateTemplate of `template` as the attacking tenant.
async fn create(
    target: &Target,
    template: Value,
) -> anyhow::Result<Result<proto::Template, tonic::Status>> {
    let mut client = TemplateServiceClient::new(target.channel().await?);
    let request = target.template_request(
        "hostile expressions",
        serde_json::to_vec(&template)?,
        ATTACKER_KEY,
    )?;
    Ok(client
        .create_template(request)
        .await
        .map(tonic::Response::into_inner))
}

/// SubmitRender of a small GIF of `template_id` as the attacking tenant, under a fresh key.
async fn submit(
    target: &Target,
    renders: &mut RenderServiceClient<tonic::transport::Channel>,
    template_id: &str,
    colour: Option<proto::Color>,
    attempt: u32,
) -> anyhow::Result<Result<proto::RenderJob, tonic::Status>> {
    let mut request = target.as_tenant(
        proto::RenderRequest {
            template_id: template_id.to_owned(),
            modifications: colour.map(|colour| proto::Modifications {
                colors: [("paint".to_owned(), colour)].into(),
                ..Default::default()
            }),
            output: square_output(proto::Format::Gif, 30, 100),
            notify: None,
            theme: String::new(),
        },
        ATTACKER_KEY,
    )?;
    request.metadata_mut().insert(
        "idempotency-key",
        format!(
            "bench-hostile-expressions-{}-{template_id}-{attempt}",
            std::process::id()
        )
        .parse()?,
    );
    Ok(renders
        .submit_render(request)
        .await
        .map(tonic::Response::into_inner))
}

/// "STATE REASON (retryable) in N ms" of the job once it has ended.
async fn follow(
    target: &Target,
    renders: &mut RenderServiceClient<tonic::transport::Channel>,
    job_id: &str,
    started: Instant,
) -> anyhow::Result<String> {
    while started.elapsed() < RENDER_LIMIT {
        let request = target.as_tenant(
            proto::GetRenderJobRequest {
                job_id: job_id.to_owned(),
            },
            ATTACKER_KEY,
        )?;
        let job = renders.get_render_job(request).await?.into_inner();
        let state = proto::JobState::try_from(job.state).unwrap_or(proto::JobState::Unspecified);
        if matches!(
            state,
            proto::JobState::Succeeded | proto::JobState::Failed | proto::JobState::Cancelled
        ) {
            let error = job.error.map_or(String::new(), |error| {
                format!(
                    " {}{}",
                    error.reason,
                    if error.retryable {
                        " (retryable)"
                    } else {
                        " (not retryable)"
                    }
                )
            });
            return Ok(format!(
                "{}{error} in {:.0} ms",
                state.as_str_name().trim_start_matches("JOB_STATE_"),
                started.elapsed().as_secs_f64() * 1e3
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(format!("still running after {RENDER_LIMIT:?}"))
}

/// CreateTemplate, then one render of it with `colour` as `paint`, followed to its end.
async fn render_once(
    target: &Target,
    placement: Placement,
    colour: Option<proto::Color>,
) -> anyhow::Result<String> {
    let template = match create(target, hog_template(placement)).await? {
        Ok(template) => template,
        Err(status) => return Ok(format!("CreateTemplate {}", outcome::<()>(&Err(status)))),
    };
    let mut renders = RenderServiceClient::new(target.channel().await?);
    let started = Instant::now();
    match submit(target, &mut renders, &template.template_id, colour, 0).await? {
        Ok(job) => follow(target, &mut renders, &job.job_id, started).await,
        Err(status) => Ok(format!("SubmitRender {}", outcome::<()>(&Err(status)))),
    }
}

/// [`render_once`] without modifications, then the same request under a new key.
async fn render_twice(target: &Target, placement: Placement) -> anyhow::Result<String> {
    let template = match create(target, hog_template(placement)).await? {
        Ok(template) => template,
        Err(status) => return Ok(format!("CreateTemplate {}", outcome::<()>(&Err(status)))),
    };
    let mut renders = RenderServiceClient::new(target.channel().await?);
    let started = Instant::now();
    let first = match submit(target, &mut renders, &template.template_id, None, 0).await? {
        Ok(job) => follow(target, &mut renders, &job.job_id, started).await?,
        Err(status) => format!("SubmitRender {}", outcome::<()>(&Err(status))),
    };
    let started = Instant::now();
    let second = submit(target, &mut renders, &template.template_id, None, 1).await?;
    Ok(format!(
        "{first}, then {} in {:.0} ms",
        outcome(&second),
        started.elapsed().as_secs_f64() * 1e3
    ))
}
