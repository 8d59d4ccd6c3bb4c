//! The fuzz targets' bodies (`fuzz/src/`, what `./dev fuzz TARGET` runs under libFuzzer on
//! nightly) compiled into this binary on stable and run on seeds: the shared corpus's
//! templates, its hostile `malformed/` files, and requests encoded here. A change of the
//! library that breaks a target's code fails this build; one that breaks a promise a target
//! checks (an `assert!` in `run`) on a seed fails these tests.
//!
//! Seeds are what `fuzz/seed.sh` gives libFuzzer: corpus templates up to its 128 KiB
//! `-max_len`.

#[path = "../../fuzz/src/lib.rs"]
mod targets;

use crate::helpers::corpus;
use lottie_render::grpc::proto;
use prost::Message;
use std::path::PathBuf;

/// `fuzz/seed.sh`'s MAX_SEED_BYTES (libFuzzer's `-max_len` in `./dev fuzz`).
const MAX_SEED_BYTES: u64 = 128 * 1024;

/// The corpus's JSON files that `fuzz/seed.sh` seeds the template targets with, sorted.
fn template_seeds() -> Vec<(PathBuf, Vec<u8>)> {
    let mut paths = Vec::new();
    let mut folders = vec![corpus("")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path
                .extension()
                .is_some_and(|extension| extension == "json")
                && path.metadata().unwrap().len() <= MAX_SEED_BYTES
            {
                paths.push(path);
            }
        }
    }
    paths.sort();
    // The corpus has some 60 such files, both well-formed and hostile ones: a seed set that
    // lost its folder would make these tests pass on nothing.
    assert!(paths.len() >= 40, "only {} seeds", paths.len());
    assert!(paths
        .iter()
        .any(|path| path.starts_with(corpus("malformed"))));
    paths
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

/// Runs `target` on every seed, naming the seed a broken promise came from.
fn run_on(seeds: &[(PathBuf, Vec<u8>)], target: fn(&[u8])) {
    for (path, bytes) in seeds {
        let outcome = std::panic::catch_unwind(|| target(bytes));
        assert!(outcome.is_ok(), "on the seed {}", path.display());
    }
}

/// Images for the `image` target: each format made by its encoder (as `fuzz/seed.sh` has
/// ffmpeg make them), and hostile ones (cut, a lying header, thousands of JPEG scans).
fn image_seeds() -> Vec<(PathBuf, Vec<u8>)> {
    use image::{ImageEncoder, RgbaImage};
    let source = RgbaImage::from_fn(32, 24, |x, y| {
        image::Rgba([x as u8 * 8, y as u8 * 10, 99, 200])
    });
    let encode = |encoder: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = Vec::new();
        encoder(&mut bytes);
        bytes
    };
    let png = encode(&|out| {
        image::codecs::png::PngEncoder::new(out)
            .write_image(source.as_raw(), 32, 24, image::ExtendedColorType::Rgba8)
            .unwrap()
    });
    let jpeg = encode(&|out| {
        let rgb = image::DynamicImage::ImageRgba8(source.clone()).into_rgb8();
        image::codecs::jpeg::JpegEncoder::new(out)
            .write_image(rgb.as_raw(), 32, 24, image::ExtendedColorType::Rgb8)
            .unwrap()
    });
    let webp = encode(&|out| {
        image::codecs::webp::WebPEncoder::new_lossless(out)
            .write_image(source.as_raw(), 32, 24, image::ExtendedColorType::Rgba8)
            .unwrap()
    });
    let mut cut = png.clone();
    cut.truncate(png.len() / 2);
    let mut lying = png.clone();
    lying[16..24].copy_from_slice(&[0, 0, 0x0F, 0xA0, 0, 0, 0x0F, 0xA0]);
    let mut scans = vec![0xFF, 0xD8, 0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0];
    for _ in 0..500 {
        scans.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0, 0, 0x12, 0x34]);
    }
    [
        ("png", png),
        ("jpeg", jpeg),
        ("webp", webp),
        ("cut png", cut),
        ("lying png", lying),
        ("jpeg of 500 scans", scans),
    ]
    .into_iter()
    .map(|(name, bytes)| (PathBuf::from(name), bytes))
    .collect()
}

#[test]
fn the_image_target_keeps_its_promises_on_its_seeds() {
    run_on(&image_seeds(), targets::image::run);
}

#[test]
fn the_template_target_keeps_its_promises_on_the_corpus() {
    run_on(&template_seeds(), targets::template::run);
}

/// Packed templates, as `fuzz/seed.sh` adds them for the template target: a gzipped
/// (`.tgs`) and a zipped dotLottie of a small corpus file, and cut copies of both.
#[test]
fn the_template_target_keeps_its_promises_on_packed_templates() {
    use std::io::Write;
    let json = std::fs::read(corpus("tiny-solid-layer.json")).unwrap();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&json).unwrap();
    let tgs = gzip.finish().unwrap();
    let mut lottie = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    lottie.start_file("manifest.json", options).unwrap();
    lottie
        .write_all(br#"{"version":"1","animations":[{"id":"tiny"}]}"#)
        .unwrap();
    lottie.start_file("animations/tiny.json", options).unwrap();
    lottie.write_all(&json).unwrap();
    let lottie = lottie.finish().unwrap().into_inner();
    let seeds: Vec<(PathBuf, Vec<u8>)> = [
        ("tiny.tgs", tgs.clone()),
        ("tiny.lottie", lottie.clone()),
        ("cut.tgs", tgs[..tgs.len() / 2].to_vec()),
        ("cut.lottie", lottie[..lottie.len() / 2].to_vec()),
    ]
    .into_iter()
    .map(|(name, bytes)| (PathBuf::from(name), bytes))
    .collect();
    // The packed seeds parse (the cut ones are refused, not crashed on).
    assert!(lottie_render::lottie::Template::parse(&seeds[0].1).is_ok());
    assert!(lottie_render::lottie::Template::parse(&seeds[1].1).is_ok());
    run_on(&seeds, targets::template::run);
    run_on(&seeds, targets::slots::run);
}

#[test]
fn the_slots_target_keeps_its_promises_on_the_corpus() {
    run_on(&template_seeds(), targets::slots::run);
}

#[test]
fn the_prepare_target_keeps_its_promises_on_the_corpus_with_and_without_requests() {
    let mut seeds = template_seeds();
    seeds.push(every_slot_kind_seed());
    // As seeded: the template alone (its default request), then with a tail of bytes that
    // `arbitrary` turns into an upload and a request.
    run_on(&seeds, targets::prepare::run);
    let tail: Vec<u8> = (0u8..=255).rev().cycle().take(512).collect();
    let with_requests: Vec<_> = seeds
        .into_iter()
        .map(|(path, mut bytes)| {
            bytes.extend_from_slice(&tail);
            (path, bytes)
        })
        .collect();
    run_on(&with_requests, targets::prepare::run);
}

/// `fuzz/seeds/every-slot-kind.json`, which `fuzz/seed.sh` adds to the corpus seeds: a
/// template with a slot of every kind and two markers.
fn every_slot_kind_seed() -> (PathBuf, Vec<u8>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/every-slot-kind.json");
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// Inputs of generated tails the test below may try before every part of the pipeline has
/// been reached: it stops as soon as all have (some hundreds of inputs).
const MAX_GENERATED_INPUTS: usize = 4000;

/// The target generates every kind of modification (`modification_kinds` names each field of
/// `Modifications`, without `..`, so a new kind fails to compile there and then here until
/// it is generated), a theme, a still, a segment and a dotLottie animation chosen at
/// CreateTemplate, and each reaches a prepared render through admission: the target cannot
/// drift from the pipeline again by leaving a part out.
#[test]
fn the_prepare_target_brings_every_kind_of_modification_a_theme_a_still_and_a_segment_to_a_render()
{
    use targets::prepare::{run_reporting, Reached, MODIFICATION_KINDS};
    let (path, template) = every_slot_kind_seed();
    // xorshift64: the same tails on every run.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut reached = Reached::default();
    let mut inputs = 0;
    let everything = |reached: &Reached| {
        reached.kinds.iter().all(|kind| *kind)
            && reached.theme
            && reached.still
            && reached.segment
            && reached.chosen_animation
    };
    while !everything(&reached) && inputs < MAX_GENERATED_INPUTS {
        let length = 32 + (next() % 480) as usize;
        let mut input = template.clone();
        input.extend((0..length).map(|_| next() as u8));
        let outcome = std::panic::catch_unwind(|| run_reporting(&input));
        let this = outcome
            .unwrap_or_else(|_| panic!("on {} with generated tail {inputs}", path.display()));
        reached = reached.or(this);
        inputs += 1;
    }
    println!("every part reached after {inputs} generated inputs");
    let kinds: Vec<&str> = MODIFICATION_KINDS
        .iter()
        .zip(reached.kinds)
        .filter(|(_, reached)| !reached)
        .map(|(kind, _)| *kind)
        .collect();
    assert!(kinds.is_empty(), "never prepared: {kinds:?}");
    assert!(everything(&reached), "never prepared: {reached:?}");
}

#[test]
fn the_request_target_keeps_its_promises_on_encoded_requests_and_garbage() {
    let tiny = std::fs::read(corpus("tiny-solid-layer.json")).unwrap();
    let render = proto::RenderRequest {
        template_id: "0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11".into(),
        modifications: Some(proto::Modifications {
            texts: [("title".to_string(), "Hello\nWorld".to_string())].into(),
            colors: [(
                "primary_bg".to_string(),
                proto::Color {
                    r: 0.0,
                    g: 1.0,
                    b: f64::NAN,
                    a: Some(1.0),
                },
            )]
            .into(),
            ..Default::default()
        }),
        output: Some(proto::OutputSpec {
            format: proto::Format::Webm.into(),
            fps: 60,
            width: 1920,
            height: 100,
            background: None,
            ..Default::default()
        }),
        notify: None,
        theme: String::new(),
    };
    let create = proto::CreateTemplateRequest {
        name: "tiny".into(),
        lottie_json: tiny.clone().into(),
        ..Default::default()
    };
    let mut seeds = vec![
        (PathBuf::from("RenderRequest"), render.encode_to_vec()),
        (
            PathBuf::from("CreateTemplateRequest"),
            create.encode_to_vec(),
        ),
        (PathBuf::from("a template as a request"), tiny),
        (PathBuf::from("empty"), Vec::new()),
        // The door's JSON: within bounds, past them, a member twice, a long key, cut short.
        (
            PathBuf::from("RenderRequest JSON"),
            br#"{"templateId":"0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11","modifications":{"texts":{"t":"Hi"},"gradients":{"g":{"stops":[{"offset":0},{"offset":1}]}},"vectors":{"v":{"values":[1,2]}}},"output":{"format":"FORMAT_GIF"},"notify":{"webhookUrl":"https://example.com/","events":["WEBHOOK_EVENT_FAILED"]}}"#.to_vec(),
        ),
        (
            PathBuf::from("RenderRequest JSON, 65 stops"),
            format!(
                r#"{{"modifications":{{"gradients":{{"g":{{"stops":[{}]}}}}}}}}"#,
                vec!["{}"; 65].join(",")
            )
            .into_bytes(),
        ),
        (
            PathBuf::from("RenderRequest JSON, a member twice"),
            br#"{"theme":"a","theme":"b"}"#.to_vec(),
        ),
        (
            PathBuf::from("RenderRequest JSON, a long key"),
            format!(r#"{{"modifications":{{"texts":{{"{}":"x"}}}}}}"#, "k".repeat(5000))
                .into_bytes(),
        ),
        (
            PathBuf::from("RenderRequest JSON, a text four times its bound"),
            format!(r#"{{"modifications":{{"texts":{{"t":"{}"}}}}}}"#, "y".repeat(800))
                .into_bytes(),
        ),
    ];
    // Every prefix of an encoded request: truncated fields, lengths past the end.
    let encoded = seeds[0].1.clone();
    seeds.extend((1..encoded.len()).map(|length| {
        (
            PathBuf::from(format!("RenderRequest cut at {length}")),
            encoded[..length].to_vec(),
        )
    }));
    run_on(&seeds, targets::request::run);
}
