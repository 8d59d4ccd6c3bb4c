//! Image slots over the real gRPC stack: the template lists them, a replacement image sent
//! with SubmitRender reaches the frames at the asset's place (decoded with ffmpeg, checked
//! against the colours and geometry made here), a bad image is refused at the boundary
//! naming its field, and the image is part of what an Idempotency-Key stands for.

use crate::helpers::*;
use base64::Engine;
use image::{ImageEncoder, Rgba, RgbaImage};
use lottie_render::grpc::proto;
use std::process::Command;

const CANVAS: u32 = 200;
const BOX: u32 = 100;
const ORIGIN: u32 = 50;

const RED: Rgba<u8> = Rgba([255, 0, 0, 255]);
const GREEN: Rgba<u8> = Rgba([0, 255, 0, 255]);
const BLUE: Rgba<u8> = Rgba([0, 0, 255, 255]);
const WHITE: Rgba<u8> = Rgba([255, 255, 255, 255]);

pub(crate) fn png(image: &RgbaImage) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut bytes)
        .write_image(
            image.as_raw(),
            image.width(),
            image.height(),
            image::ExtendedColorType::Rgba8,
        )
        .unwrap();
    bytes
}

pub(crate) fn quadrants(width: u32, height: u32) -> RgbaImage {
    RgbaImage::from_fn(width, height, |x, y| {
        match (x < width / 2, y < height / 2) {
            (true, true) => RED,
            (false, true) => GREEN,
            (true, false) => BLUE,
            (false, false) => WHITE,
        }
    })
}

/// A 200² template of one image layer at (50, 50) showing asset "photo" (100², a grey
/// default) by its `sid` "photo", and a second asset "unused" by its id.
pub(crate) fn template_json() -> Vec<u8> {
    let grey = png(&RgbaImage::from_pixel(BOX, BOX, Rgba([128, 128, 128, 255])));
    let uri = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(grey)
    );
    serde_json::json!({
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 5, "w": CANVAS, "h": CANVAS,
        "assets": [
            {"id": "image_0", "sid": "photo", "w": BOX, "h": BOX, "e": 1, "u": "", "p": uri},
            {"id": "unused", "w": 20, "h": 10, "e": 1, "u": "", "p": uri}
        ],
        "layers": [{
            "ddd": 0, "ind": 1, "ty": 2, "nm": "photo layer", "refId": "image_0", "sr": 1,
            "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0},
                "p": {"a": 0, "k": [ORIGIN, ORIGIN, 0]}, "a": {"a": 0, "k": [0, 0, 0]},
                "s": {"a": 0, "k": [100, 100, 100]}},
            "ip": 0, "op": 5, "st": 0, "bm": 0
        }]
    })
    .to_string()
    .into_bytes()
}

pub(crate) fn with_images(
    template_id: &str,
    images: Vec<(&str, Vec<u8>, proto::ImageFit)>,
) -> proto::RenderRequest {
    let mut request = small_request(template_id, proto::Format::Webm);
    if let Some(output) = request.output.as_mut() {
        output.width = CANVAS;
        output.height = CANVAS;
    }
    request.modifications = Some(proto::Modifications {
        images: images
            .into_iter()
            .map(|(slot, data, fit)| {
                (
                    slot.to_owned(),
                    proto::ImageInput {
                        source: Some(proto::image_input::Source::Data(data.into())),
                        fit: fit as i32,
                    },
                )
            })
            .collect(),
        ..Default::default()
    });
    request
}

/// The first frame of a WebM output, RGBA (libvpx-vp9 decodes its alpha).
fn first_frame(webm: &[u8]) -> RgbaImage {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.webm");
    std::fs::write(&path, webm).unwrap();
    let output = Command::new("ffmpeg")
        .args(["-v", "error", "-c:v", "libvpx-vp9", "-i"])
        .arg(&path)
        .args(["-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgba", "-"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    RgbaImage::from_raw(CANVAS, CANVAS, output.stdout).unwrap()
}

#[track_caller]
fn assert_near(frame: &RgbaImage, (x, y): (u32, u32), expected: Rgba<u8>) {
    let actual = frame.get_pixel(x, y);
    let close = actual
        .0
        .iter()
        .zip(expected.0)
        .all(|(a, e)| a.abs_diff(e) <= 48);
    assert!(close, "({x}, {y}) is {actual:?}, expected {expected:?}");
}

fn in_box(u: f64, v: f64) -> (u32, u32) {
    let at = |f: f64| ORIGIN + (f * f64::from(BOX)) as u32;
    (at(u), at(v))
}

#[tokio::test]
async fn a_replacement_image_is_listed_sent_and_drawn_in_the_assets_box() {
    let app = spawn_app().await;
    let template = app.create("photo", template_json()).await.unwrap();
    let slots: Vec<(String, u32, u32, bool)> = template
        .image_slots
        .iter()
        .map(|slot| (slot.id.clone(), slot.width, slot.height, slot.has_default))
        .collect();
    assert_eq!(
        slots,
        [
            ("photo".to_owned(), BOX, BOX, true),
            ("unused".to_owned(), 20, 10, true)
        ]
    );
    let request = with_images(
        &template.template_id,
        vec![("photo", png(&quadrants(40, 20)), proto::ImageFit::Fill)],
    );
    let done = app.render(request).await;
    let frame = first_frame(&app.download(&done.job_id).await.unwrap());
    assert_near(&frame, in_box(0.2, 0.2), RED);
    assert_near(&frame, in_box(0.8, 0.2), GREEN);
    assert_near(&frame, in_box(0.2, 0.8), BLUE);
    assert_near(&frame, in_box(0.8, 0.8), WHITE);
    assert!(frame.get_pixel(10, 10).0[3] < 32, "outside the box");
    app.stop().await;
}

#[tokio::test]
async fn bad_images_are_refused_at_submit_naming_their_field() {
    let app = spawn_app().await;
    let template = app.create("photo", template_json()).await.unwrap();
    let id = template.template_id.as_str();
    let good = || png(&quadrants(8, 8));
    let gif = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00,".to_vec();
    let huge_header = png(&RgbaImage::new(9000, 1));
    // A progressive JPEG (8×8) of 5,000 scans of a few bytes: each would be a decoding pass.
    let mut many_scans = vec![0xFF, 0xD8, 0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0];
    for _ in 0..5000 {
        many_scans.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0, 0x12, 0x34]);
    }
    many_scans.extend([0xFF, 0xD9]);
    let cases: Vec<(&str, proto::RenderRequest, &str, &str)> = vec![
        (
            "a GIF",
            with_images(id, vec![("photo", gif, proto::ImageFit::Cover)]),
            "modifications.images[\"photo\"].data",
            "REQUEST_INVALID",
        ),
        (
            "past the side limit",
            with_images(id, vec![("photo", huge_header, proto::ImageFit::Cover)]),
            "modifications.images[\"photo\"].data",
            "REQUEST_INVALID",
        ),
        (
            "a JPEG of 5,000 scans",
            with_images(id, vec![("photo", many_scans, proto::ImageFit::Cover)]),
            "modifications.images[\"photo\"].data",
            "REQUEST_INVALID",
        ),
        (
            "an unknown fit",
            {
                let mut request = with_images(id, vec![("photo", good(), proto::ImageFit::Cover)]);
                let modifications = request.modifications.as_mut().unwrap();
                modifications.images.get_mut("photo").unwrap().fit = 9;
                request
            },
            "modifications.images[\"photo\"].fit",
            "REQUEST_INVALID",
        ),
        (
            "no source",
            {
                let mut request = with_images(id, vec![("photo", good(), proto::ImageFit::Cover)]);
                let modifications = request.modifications.as_mut().unwrap();
                modifications.images.get_mut("photo").unwrap().source = None;
                request
            },
            "modifications.images[\"photo\"].data",
            "REQUEST_INVALID",
        ),
        (
            "an unknown slot",
            with_images(id, vec![("logo", good(), proto::ImageFit::Cover)]),
            "modifications.images[\"logo\"]",
            "SLOT_UNKNOWN",
        ),
        (
            "seventeen images",
            with_images(
                id,
                (0..17)
                    .map(|index| {
                        (
                            [
                                "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
                                "n", "o", "p", "q",
                            ][index],
                            good(),
                            proto::ImageFit::Cover,
                        )
                    })
                    .collect(),
            ),
            "modifications.images",
            "REQUEST_INVALID",
        ),
    ];
    for (what, request, field, expected_reason) in cases {
        let status = app.submit(request).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{what}: {status:?}"
        );
        assert_eq!(reason(&status), expected_reason, "{what}: {status:?}");
        assert!(
            violated_fields(&status).iter().any(|f| f == field),
            "{what}: {:?} in {status:?}",
            violated_fields(&status)
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn an_image_over_ten_mebibytes_is_refused_before_it_is_queued() {
    let app = spawn_app().await;
    let template = app.create("photo", template_json()).await.unwrap();
    let mut big = png(&quadrants(8, 8));
    big.resize(10 * 1024 * 1024 + 1, 0);
    let request = with_images(
        &template.template_id,
        vec![("photo", big, proto::ImageFit::Cover)],
    );
    let status = app.submit(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("at most 10485760"), "{status:?}");
    app.stop().await;
}

/// A PNG whose header says `width`×`height` (RGBA) followed by one pixel row's worth of
/// image data: what a check of the header reads, checksums included, with nothing to decode
/// behind it.
pub(crate) fn png_header_of(width: u32, height: u32) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8; 4], data: &[u8]| {
        png.extend((data.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        png.extend(kind);
        png.extend(data);
        png.extend(crc.sum().to_be_bytes());
    };
    let mut header = width.to_be_bytes().to_vec();
    header.extend(height.to_be_bytes());
    header.extend([8, 6, 0, 0, 0]);
    chunk(b"IHDR", &header);
    let mut row = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut row, &vec![0; 1 + 4 * width as usize]).unwrap();
    chunk(b"IDAT", &row.finish().unwrap());
    chunk(b"IEND", &[]);
    png
}

/// The README's 16,777,216 pixels (4096²): an image one column past it, within the side
/// limit, is refused at submit naming its field; one of exactly 4096² passes the boundary
/// (and fails in the worker, where its missing rows are found: deterministic, naming its
/// slot).
#[tokio::test]
async fn an_image_past_sixteen_megapixels_is_refused_at_submit_and_one_of_exactly_4096_squared_is_not(
) {
    let app = spawn_app().await;
    let template = app.create("photo", template_json()).await.unwrap();
    let request = |width: u32| {
        with_images(
            &template.template_id,
            vec![("photo", png_header_of(width, 4096), proto::ImageFit::Cover)],
        )
    };
    let status = app.submit(request(4097)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(&status), "REQUEST_INVALID", "{status:?}");
    assert_eq!(
        violated_fields(&status),
        ["modifications.images[\"photo\"].data"]
    );
    let details = tonic_types::StatusExt::get_error_details(&status);
    let description = &details.bad_request().unwrap().field_violations[0].description;
    assert!(
        description.contains("is 4097×4096 pixels; at most 8192 a side and 16777216 pixels"),
        "{description}"
    );
    let job = app.submit(request(4096)).await.unwrap();
    let ended = app.finished(&job.job_id).await;
    assert_eq!(state(&ended), proto::JobState::Failed, "{ended:?}");
    let error = ended.error.unwrap();
    assert_eq!(
        (error.reason.as_str(), error.retryable),
        ("IMAGE_INVALID", false),
        "{error:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_image_is_part_of_the_request_an_idempotency_key_stands_for() {
    let app = spawn_app().await;
    let template = app.create("photo", template_json()).await.unwrap();
    let id = template.template_id.as_str();
    let first = with_images(
        id,
        vec![("photo", png(&quadrants(8, 8)), proto::ImageFit::Cover)],
    );
    let key = unique_key();
    let job = app.submit_with_key(&key, first.clone()).await.unwrap();
    let (replayed, was_replay) = app.submit_keyed(&key, first).await.unwrap();
    assert!(was_replay);
    assert_eq!(replayed.job_id, job.job_id);
    let other = with_images(
        id,
        vec![("photo", png(&quadrants(8, 6)), proto::ImageFit::Cover)],
    );
    let status = app.submit_with_key(&key, other).await.unwrap_err();
    assert_eq!(reason(&status), "IDEMPOTENCY_KEY_REUSED", "{status:?}");
    // The same image under another fit is another request too.
    let refit = with_images(
        id,
        vec![("photo", png(&quadrants(8, 8)), proto::ImageFit::Fill)],
    );
    let status = app.submit_with_key(&key, refit).await.unwrap_err();
    assert_eq!(reason(&status), "IDEMPOTENCY_KEY_REUSED", "{status:?}");
    assert_eq!(
        state(&app.finished(&job.job_id).await),
        proto::JobState::Succeeded
    );
    app.stop().await;
}

/// The same over the HTTP/JSON door: the image as base64 (the canonical JSON of `bytes`),
/// the fit by name; a GIF is a 422 naming the field.
#[tokio::test]
async fn an_image_slot_over_http_json_is_base64_and_refusals_name_the_field() {
    let app = spawn_app().await;
    let template = app.create("photo", template_json()).await.unwrap();
    let client = reqwest::Client::builder().http1_only().build().unwrap();
    let body = |data: &[u8]| {
        serde_json::json!({
            "templateId": template.template_id,
            "modifications": {"images": {"photo": {
                "data": base64::engine::general_purpose::STANDARD.encode(data),
                "fit": "IMAGE_FIT_FILL"
            }}},
            "output": {"format": "FORMAT_WEBM", "width": CANVAS, "height": CANVAS}
        })
    };
    let url = format!("http://{}/v1/renders", app.address);
    let accepted = client
        .post(&url)
        .header("idempotency-key", unique_key())
        .json(&body(&png(&quadrants(40, 20))))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), reqwest::StatusCode::ACCEPTED);
    let job: serde_json::Value = accepted.json().await.unwrap();
    let done = app.finished(job["jobId"].as_str().unwrap()).await;
    assert_eq!(state(&done), proto::JobState::Succeeded, "{done:?}");
    let frame = first_frame(&app.download(&done.job_id).await.unwrap());
    assert_near(&frame, in_box(0.2, 0.8), BLUE);
    let refused = client
        .post(&url)
        .header("idempotency-key", unique_key())
        .json(&body(b"GIF89a\x01\x00\x01\x00\x80\x00\x00"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    let problem: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(
        problem["errors"][0]["field"], "modifications.images[\"photo\"].data",
        "{problem}"
    );
    app.stop().await;
}

/// UploadImage: an image stored once and named in renders by its id; the same bytes are the
/// same image; another tenant cannot name it; a deleted one is IMAGE_NOT_FOUND while a job
/// accepted before still renders it.
#[tokio::test]
async fn an_uploaded_image_is_named_by_its_id_by_its_tenant_only() {
    const ACME: &str = "acme-images-key";
    const GLOBEX: &str = "globex-images-key";
    let dir = tempfile::tempdir().unwrap();
    let keys = api_keys_file(
        dir.path(),
        &[("acme", "billing", ACME), ("globex", "web", GLOBEX)],
    );
    let app = spawn_app_with(move |settings| {
        settings.auth.mode = lottie_render::auth::AuthMode::Required;
        settings.auth.api_keys = Some(keys);
    })
    .await;
    let mut acme = app.templates_as(Some(ACME));
    let template = acme
        .create_template(create_request("photo", template_json()))
        .await
        .unwrap()
        .into_inner();
    let bytes = png(&quadrants(40, 20));
    let upload = || proto::UploadImageRequest {
        data: bytes.clone().into(),
    };
    let image = acme.upload_image(upload()).await.unwrap().into_inner();
    assert_eq!(image.image_id, sha256_hex(&bytes));
    assert_eq!(
        (image.format.as_str(), image.width, image.height),
        ("png", 40, 20)
    );
    assert_eq!(image.size_bytes, bytes.len() as u64);
    let again = acme.upload_image(upload()).await.unwrap().into_inner();
    assert_eq!(again, image);
    // Named by its id, it is drawn as if it were sent.
    let named = |template_id: &str| {
        let mut request = with_images(template_id, Vec::new());
        request.modifications.as_mut().unwrap().images.insert(
            "photo".into(),
            proto::ImageInput {
                source: Some(proto::image_input::Source::ImageId(image.image_id.clone())),
                fit: proto::ImageFit::Fill as i32,
            },
        );
        request
    };
    let mut renders = app.renders_as(Some(ACME));
    let job = submit_keyed_through(renders.clone(), &unique_key(), named(&template.template_id))
        .await
        .unwrap()
        .0;
    // Deleted once the job is accepted: the job keeps its copy.
    acme.delete_image(proto::DeleteImageRequest {
        image_id: image.image_id.clone(),
    })
    .await
    .unwrap();
    let done = finished_through(renders.clone(), &job.job_id).await;
    assert_eq!(state(&done), proto::JobState::Succeeded, "{done:?}");
    let frame = first_frame(
        &download_through(renders.clone(), &job.job_id)
            .await
            .unwrap(),
    );
    assert_near(&frame, in_box(0.2, 0.2), RED);
    assert_near(&frame, in_box(0.8, 0.8), WHITE);
    // Gone for new renders.
    let status = renders
        .submit_render(keyed(named(&template.template_id)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert_eq!(reason(&status), "IMAGE_NOT_FOUND");
    // Uploaded again by acme, the image is acme's alone: its id means nothing to globex.
    let mut globex = app.templates_as(Some(GLOBEX));
    let theirs = globex
        .create_template(create_request("photo", template_json()))
        .await
        .unwrap()
        .into_inner();
    acme.upload_image(upload()).await.unwrap();
    let status = app
        .renders_as(Some(GLOBEX))
        .submit_render(keyed(named(&theirs.template_id)))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "IMAGE_NOT_FOUND", "{status:?}");
    // Not an image: refused naming the field; a malformed id likewise.
    let status = acme
        .upload_image(proto::UploadImageRequest {
            data: bytes::Bytes::from_static(b"GIF89a"),
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&status), ["data"], "{status:?}");
    let mut bad_id = named(&template.template_id);
    bad_id
        .modifications
        .as_mut()
        .unwrap()
        .images
        .get_mut("photo")
        .unwrap()
        .source = Some(proto::image_input::Source::ImageId("../x".into()));
    let status = renders.submit_render(keyed(bad_id)).await.unwrap_err();
    assert_eq!(
        violated_fields(&status),
        ["modifications.images[\"photo\"].image_id"],
        "{status:?}"
    );
    app.stop().await;
}

/// A request with a fresh idempotency key.
fn keyed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("idempotency-key", unique_key().parse().unwrap());
    request
}

/// Replacement images are work of the job as its frames are (issue 42, finding 7): decoded
/// and fitted in the worker, their pixels count in the job's budget (and its deadline). A
/// 2000×1000 image (a few KiB of PNG, 2 megapixels decoded) takes a 200² render of five
/// frames (0.2 megapixels) past a 1-megapixel budget; the same render with the template's own
/// image is within it. Before, images counted for nothing: 16 solid 4096² WebPs (11 KiB of
/// request) took a 100×100 still 17.8 s of a worker, then failed on its deadline as
/// retryable.
#[tokio::test]
async fn replacement_images_count_in_the_job_budget_by_the_pixels_they_decode_to() {
    let app = spawn_app_with(|settings| settings.jobs.max_job_megapixels = 1).await;
    let template = app.create("photo", template_json()).await.unwrap();
    let plain = with_images(&template.template_id, Vec::new());
    app.submit(plain)
        .await
        .expect("within the budget without images");
    let large = png(&RgbaImage::from_pixel(2000, 1000, RED));
    let request = with_images(
        &template.template_id,
        vec![("photo", large, proto::ImageFit::Cover)],
    );
    let status = app.submit(request).await.unwrap_err();
    assert_eq!(reason(&status), "JOB_TOO_LARGE", "{status:?}");
    assert_eq!(violated_fields(&status), ["output"], "{status:?}");
    assert!(
        status.message().contains("replacement images 2 more"),
        "{}",
        status.message()
    );
    app.stop().await;
}
