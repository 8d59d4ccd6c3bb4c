//! Replacement images (image slots): [`images::header`], which the server runs at submit on
//! the caller's bytes, and [`images::fitted`], which the render worker runs on them.
//!
//! Promises checked beyond "no panic": an accepted header is a PNG, JPEG or WebP within the
//! size limits; an image that decodes is fitted to exactly the box asked for, in every fit;
//! whatever the header says, decoding a small input stays within the decoder's allocation
//! limit (an error, never an abort).

use lottie_render::lottie::reading::assets::{MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE};
use lottie_render::lottie::reading::images;
use lottie_render::spec::Fit;

/// The box the fuzzed image is fitted to: small, so a run stays fast, and not square, so
/// cover and contain cut and pad.
const BOX: (u32, u32) = (17, 9);

/// One input of the target: panics (an assertion) on a broken promise.
pub fn run(data: &[u8]) {
    let Ok(header) = images::header(data) else {
        return;
    };
    assert!(matches!(
        header.format,
        image::ImageFormat::Png | image::ImageFormat::Jpeg | image::ImageFormat::WebP
    ));
    let (width, height) = (u64::from(header.width), u64::from(header.height));
    assert!(width >= 1 && height >= 1);
    assert!(width <= MAX_IMAGE_SIDE && height <= MAX_IMAGE_SIDE);
    assert!(width * height <= MAX_IMAGE_PIXELS);
    for fit in [Fit::Cover, Fit::Contain, Fit::Fill] {
        if let Ok(pixels) = images::fitted(data, BOX.0, BOX.1, fit) {
            assert_eq!(pixels.dimensions(), BOX, "{fit:?}");
        }
    }
}
