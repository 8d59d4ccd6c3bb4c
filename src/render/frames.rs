//! Parallel frame rendering: N threads, each with its own rlottie `Animation` (an
//! `Animation` is not thread-safe), render frames i ≡ t (mod N) and hand them over through
//! their own bounded channel. The consumer reads the channels round-robin, which yields
//! frames in order with no reordering buffer, and at most `N × FRAMES_IN_FLIGHT_PER_THREAD`
//! frames exist at once however long the animation is.

use super::pixels::{convert_in_place, PixelLayout};
use super::RenderError;
use rlottie::{Animation, Bgra, Size, Surface};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Frames a render thread may have finished ahead of the encoder. Two keeps each thread
/// busy while the encoder takes the previous one, without holding memory for nothing.
pub const FRAMES_IN_FLIGHT_PER_THREAD: usize = 2;

/// One rendered frame, already in the encoder's pixel layout.
pub struct Frame {
    pub index: u32,
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<Bgra>,
}

/// What the render threads share: the prepared template and the output geometry.
#[derive(Clone)]
pub struct FrameSource {
    /// Retimed, modified template JSON, ready for rlottie.
    pub json: Arc<String>,
    /// Directory external resources would be resolved against (none are loaded from it).
    pub resource_dir: PathBuf,
    pub width: usize,
    pub height: usize,
    pub frame_count: u32,
    pub layout: PixelLayout,
}

impl FrameSource {
    /// Loads the template into rlottie; `None` from rlottie means it refused the document.
    pub fn load(&self) -> Result<Animation, RenderError> {
        Animation::from_data(self.json.as_bytes(), "", &self.resource_dir)
            .ok_or(RenderError::RendererRefused)
    }

    /// Renders frame `index` (relative to the in point) with `animation`.
    pub fn render(&self, animation: &mut Animation, index: u32) -> Frame {
        let mut surface = Surface::new(Size {
            width: self.width,
            height: self.height,
        });
        animation.render(index as usize, &mut surface);
        let mut pixels = surface.into_data();
        convert_in_place(&mut pixels, self.layout);
        Frame {
            index,
            width: self.width,
            height: self.height,
            pixels,
        }
    }

    /// Starts `threads` render threads; the returned iterator yields every frame in order.
    pub fn render_in_parallel(&self, threads: usize) -> OrderedFrames {
        let threads = threads.clamp(1, self.frame_count.max(1) as usize);
        let mut receivers = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for thread_index in 0..threads {
            let (sender, receiver) = sync_channel(FRAMES_IN_FLIGHT_PER_THREAD);
            receivers.push(receiver);
            let source = self.clone();
            let handle = std::thread::Builder::new()
                .name(format!("render-{thread_index}"))
                .spawn(move || {
                    let mut animation = match source.load() {
                        Ok(animation) => animation,
                        Err(error) => {
                            let _ = sender.send(Err(error));
                            return;
                        }
                    };
                    let step = threads as u32;
                    let mut index = thread_index as u32;
                    while index < source.frame_count {
                        let frame = source.render(&mut animation, index);
                        // The consumer hung up (encoder failed or job cancelled): stop.
                        if sender.send(Ok(frame)).is_err() {
                            return;
                        }
                        index += step;
                    }
                });
            match handle {
                Ok(handle) => handles.push(handle),
                Err(error) => {
                    return OrderedFrames::failed(RenderError::Resources(format!(
                        "cannot start a render thread: {error}"
                    )))
                }
            }
        }
        OrderedFrames {
            receivers,
            handles,
            next: 0,
            frame_count: self.frame_count,
            failure: None,
        }
    }
}

pub struct OrderedFrames {
    receivers: Vec<Receiver<Result<Frame, RenderError>>>,
    handles: Vec<JoinHandle<()>>,
    next: u32,
    frame_count: u32,
    failure: Option<RenderError>,
}

impl OrderedFrames {
    fn failed(error: RenderError) -> OrderedFrames {
        OrderedFrames {
            receivers: Vec::new(),
            handles: Vec::new(),
            next: 0,
            frame_count: 1,
            failure: Some(error),
        }
    }
}

impl Iterator for OrderedFrames {
    type Item = Result<Frame, RenderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.failure.take() {
            self.next = self.frame_count;
            return Some(Err(error));
        }
        if self.next >= self.frame_count {
            return None;
        }
        let receiver = &self.receivers[self.next as usize % self.receivers.len()];
        let item = receiver
            .recv()
            .unwrap_or(Err(RenderError::RenderThreadDied));
        self.next = if item.is_ok() {
            self.next + 1
        } else {
            self.frame_count
        };
        Some(item)
    }
}

impl Drop for OrderedFrames {
    fn drop(&mut self) {
        // Hanging up makes every thread stop at its next send; then they can be joined.
        self.receivers.clear();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}
