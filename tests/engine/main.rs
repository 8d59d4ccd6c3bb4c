//! Render-engine integration tests: real rlottie, real encoders, real worker processes,
//! outputs probed with ffprobe and decoded with ffmpeg.

mod cli;
mod corpus;
mod effects;
mod embedded_images;
mod fuzz_findings;
mod helpers;
mod malformed;
mod pixels;
mod sandbox;
mod text;
