//! Render-engine integration tests: real rlottie, real encoders, real worker processes,
//! outputs probed with ffprobe and decoded with ffmpeg.

mod blur;
mod cli;
mod cli_promises;
mod colours;
mod corpus;
mod effects;
mod embedded_images;

mod expressions;
mod fidelity_classes;
mod fonts;
mod formats;
mod fuzz_findings;
mod fuzz_seeds;
mod helpers;
mod image_slots;
mod kernel_offers;
mod malformed;
mod mattes;
/// The template whose every frame tells its time (tests/common/moving.rs).
#[path = "../common/moving.rs"]
mod moving;
mod pixels;
mod property_slots;
mod sandbox;
mod small_outputs;
mod text;
mod text_animators;
