//! `./dev fuzz image`: [`lottie_render_fuzz::image::run`] on libFuzzer's inputs. The
//! target's promises are written there, where `./dev test` compiles and runs them on seeds.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lottie_render_fuzz::image::run(data));
