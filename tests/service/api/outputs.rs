//! The outputs of issue 26 over the wire: a template's markers listed, a still and a segment
//! by marker rendered and downloaded with their content types, and every time or loop the
//! template or the format cannot take refused as INVALID_ARGUMENT naming its field.

use crate::helpers::{moving, reason, sha256_hex, spawn_app, violated_fields};
use lottie_render::grpc::proto;
use tonic::Code;

fn request(template_id: &str, format: proto::Format) -> proto::RenderRequest {
    proto::RenderRequest {
        template_id: template_id.into(),
        modifications: None,
        output: Some(proto::OutputSpec {
            format: format as i32,
            fps: moving::FPS,
            width: moving::SIDE,
            height: moving::SIDE,
            ..Default::default()
        }),
        notify: None,
        theme: String::new(),
    }
}

fn at_marker(name: &str) -> Option<proto::TimePoint> {
    Some(proto::TimePoint {
        point: Some(proto::time_point::Point::Marker(name.into())),
    })
}

fn segment_marker(name: &str) -> Option<proto::Segment> {
    Some(proto::Segment {
        range: Some(proto::segment::Range::Marker(name.into())),
    })
}

#[tokio::test]
async fn markers_are_listed_and_a_still_and_a_segment_by_marker_render_and_download() {
    let app = spawn_app().await;
    let template = app
        .create("moving", moving::template().to_string())
        .await
        .unwrap();
    let markers: Vec<(String, f64, f64)> = template
        .markers
        .iter()
        .map(|m| (m.name.clone(), m.start_seconds, m.duration_seconds))
        .collect();
    assert_eq!(
        markers,
        [
            ("intro".to_owned(), 10.0 / 30.0, 20.0 / 30.0),
            ("beat".to_owned(), 35.0 / 30.0, 0.0)
        ]
    );

    let mut still = request(&template.template_id, proto::Format::Png);
    still.output.as_mut().unwrap().at = at_marker("beat");
    let job = app.render(still).await;
    let output = job.output.unwrap();
    assert_eq!(
        (output.content_type.as_str(), output.frame_count),
        ("image/png", 1)
    );
    let bytes = app.download(&job.job_id).await.unwrap();
    let png = image::load_from_memory_with_format(&bytes, image::ImageFormat::Png)
        .unwrap()
        .to_rgba8();
    // Frame 35 is in the fourth colour hold: yellow, opaque; the corner transparent.
    assert_eq!(png.get_pixel(100, 100).0, [255, 255, 0, 255]);
    assert_eq!(png.get_pixel(2, 2).0[3], 0);

    let mut segment = request(&template.template_id, proto::Format::Apng);
    let spec = segment.output.as_mut().unwrap();
    spec.segment = segment_marker("intro");
    spec.loop_count = Some(2);
    spec.quality = proto::Quality::Small as i32;
    spec.poster = Some(proto::Poster { at: None });
    let segment_job = app.render(segment).await;
    let output = segment_job.output.clone().unwrap();
    assert_eq!(
        (output.content_type.as_str(), output.frame_count),
        ("image/apng", 20)
    );
    assert!((output.duration_seconds - 20.0 / 30.0).abs() < 1e-9);
    // The poster: the middle of the segment's 20 frames, the animation's frame 20, and the
    // very bytes of a PNG still of frame 20 (small quality, as the segment asked).
    let poster = output.poster.unwrap();
    assert_eq!(
        (poster.content_type.as_str(), poster.poster_frame),
        ("image/png", 10)
    );
    let poster_bytes = app
        .download_part(&segment_job.job_id, proto::OutputPart::Poster)
        .await;
    assert_eq!(sha256_hex(&poster_bytes), poster.sha256);
    let mut still = request(&template.template_id, proto::Format::Png);
    let spec = still.output.as_mut().unwrap();
    spec.at = Some(proto::TimePoint {
        point: Some(proto::time_point::Point::Frame(20)),
    });
    spec.quality = proto::Quality::Small as i32;
    let still_job = app.render(still).await;
    assert_eq!(still_job.output.unwrap().sha256, poster.sha256);
    // The main part is the APNG; a job without a poster has none to send.
    let main = app
        .download_part(&segment_job.job_id, proto::OutputPart::Main)
        .await;
    assert_eq!(sha256_hex(&main), output.sha256);
    let missing = app
        .renders()
        .download_render_output(proto::DownloadRenderOutputRequest {
            job_id: still_job.job_id.clone(),
            part: proto::OutputPart::Poster as i32,
            ..Default::default()
        })
        .await
        .expect_err("a still has no poster");
    assert_eq!(
        (missing.code(), reason(&missing).as_str()),
        (Code::NotFound, "OUTPUT_NOT_FOUND")
    );
    app.stop().await;
}

#[tokio::test]
async fn times_and_loops_the_template_or_format_cannot_take_are_invalid_argument_naming_them() {
    let app = spawn_app().await;
    let template = app
        .create("moving", moving::template().to_string())
        .await
        .unwrap();
    let id = &template.template_id;
    // The same rectangle moving for 20 s: 600 frames, 700 megapixels at 1080².
    let mut twenty_seconds = moving::template();
    twenty_seconds["op"] = 600.into();
    twenty_seconds["layers"][0]["op"] = 600.into();
    let long = app
        .create("long", twenty_seconds.to_string())
        .await
        .unwrap();
    let with = |format: proto::Format, edit: &dyn Fn(&mut proto::OutputSpec)| {
        let mut request = request(id, format);
        edit(request.output.as_mut().unwrap());
        request
    };
    let past_end = Some(proto::Segment {
        range: Some(proto::segment::Range::Seconds(proto::SecondsRange {
            from: 1.0,
            to: 5.0,
        })),
    });
    let cases: Vec<(&str, proto::RenderRequest, &str, &str)> = vec![
        (
            "a PNG without its time",
            with(proto::Format::Png, &|_| {}),
            "output.at",
            "REQUEST_INVALID",
        ),
        (
            "an unknown marker",
            with(proto::Format::Png, &|o| o.at = at_marker("outro")),
            "output.at",
            "REQUEST_INVALID",
        ),
        (
            "a time for an MP4",
            with(proto::Format::Mp4, &|o| o.at = at_marker("beat")),
            "output.at",
            "REQUEST_INVALID",
        ),
        (
            "a segment of a point marker",
            with(proto::Format::Webm, &|o| o.segment = segment_marker("beat")),
            "output.segment",
            "REQUEST_INVALID",
        ),
        (
            "a segment past the end",
            with(proto::Format::Gif, &|o| o.segment = past_end.clone()),
            "output.segment",
            "REQUEST_INVALID",
        ),
        (
            "a loop of an MP4",
            with(proto::Format::Mp4, &|o| o.loop_count = Some(3)),
            "output.loop_count",
            "REQUEST_INVALID",
        ),
        (
            "a loop past 16 bits",
            with(proto::Format::Gif, &|o| o.loop_count = Some(70_000)),
            "output.loop_count",
            "REQUEST_INVALID",
        ),
        (
            "a marker name of 201 characters",
            with(proto::Format::Png, &|o| o.at = at_marker(&"m".repeat(201))),
            "output.at",
            "REQUEST_INVALID",
        ),
        (
            "a time with nothing set",
            with(proto::Format::Png, &|o| {
                o.at = Some(proto::TimePoint { point: None })
            }),
            "output.at",
            "REQUEST_INVALID",
        ),
        (
            "an unknown quality",
            with(proto::Format::Mp4, &|o| o.quality = 99),
            "output.quality",
            "REQUEST_INVALID",
        ),
        (
            "an unknown format",
            with(proto::Format::Mp4, &|o| o.format = 99),
            "output.format",
            "REQUEST_INVALID",
        ),
        (
            "an animated WebP of 20 s at 1080²",
            {
                let mut request = request(&long.template_id, proto::Format::Webp);
                let spec = request.output.as_mut().unwrap();
                (spec.width, spec.height) = (1080, 1080);
                request
            },
            "output.format",
            "OUTPUT_TOO_LONG",
        ),
        (
            "a poster of a still",
            with(proto::Format::Png, &|o| {
                o.at = at_marker("beat");
                o.poster = Some(proto::Poster { at: None });
            }),
            "output.poster",
            "REQUEST_INVALID",
        ),
        (
            "a poster outside the segment",
            with(proto::Format::Webm, &|o| {
                o.segment = segment_marker("intro");
                o.poster = Some(proto::Poster {
                    at: at_marker("beat"),
                });
            }),
            "output.poster.at",
            "REQUEST_INVALID",
        ),
    ];
    for (case, request, field, expected_reason) in cases {
        let status = app.submit(request).await.expect_err(case);
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
        assert_eq!(reason(&status), expected_reason, "{case}: {status:?}");
        assert_eq!(violated_fields(&status), [field], "{case}: {status:?}");
    }
    app.stop().await;
}
