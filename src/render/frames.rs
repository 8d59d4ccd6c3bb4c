//! Parallel frame rendering: N threads, each with its own rlottie `Animation` (an
//! `Animation` is not thread-safe) and its own encoder [`FramePreparer`], render frames
//! i ≡ t (mod N), convert them to what the encoder takes and hand them over through their own
//! bounded channel. The consumer reads the channels round-robin, which yields frames in order
//! with no reordering buffer, and at most `N × FRAMES_IN_FLIGHT_PER_THREAD` frames exist at
//! once however long the animation is. Each thread renders into two reused surfaces in turn
//! (so its preparer can compare a frame with the one before without copying it), and the
//! encoder hands frame buffers back for reuse ([`OrderedFrames::recycle`]).

use super::layer_effects::{LayerEffects, PartsRenderer};
use super::RenderError;
use crate::encode::{EncoderInput, Frame, FramePreparer, PreparerFactory};
use rlottie::{Animation, Bgra, Size, Surface};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Frames a render thread may have finished ahead of the encoder. Two keeps each thread
/// busy while the encoder takes the previous one, without holding memory for nothing.
pub(crate) const FRAMES_IN_FLIGHT_PER_THREAD: usize = 2;

/// How much lower render threads run than the encoder (nice steps). The encoder is the
/// critical path whenever it is the slower stage; rendering then uses only idle CPU instead
/// of preempting it. When rendering is the slower stage the encoder waits anyway.
pub(crate) const RENDER_THREAD_NICE: i32 = 5;

/// What the render threads share: the prepared template and the output geometry.
#[derive(Clone)]
pub struct FrameSource {
    /// Retimed, modified template JSON, ready for rlottie.
    pub json: Arc<String>,
    pub width: usize,
    pub height: usize,
    pub frame_count: u32,
    /// The composition in parts, when layers have blurs or shadows drawn on their pixels.
    pub effects: Option<Arc<LayerEffects>>,
}

impl FrameSource {
    /// Loads the template into rlottie; `None` from rlottie means it refused the document.
    pub(crate) fn load(&self) -> Result<Animation, RenderError> {
        Animation::from_data(self.json.as_bytes(), "", super::NO_RESOURCE_DIR)
            .ok_or(RenderError::RendererRefused)
    }

    /// A renderer for one thread: its own `Animation` (one per part when layers are filtered)
    /// and surfaces reused for every frame.
    pub fn renderer(&self) -> Result<Renderer, RenderError> {
        let drawing = match &self.effects {
            Some(effects) => Drawing::Parts {
                current: PartsRenderer::new(Arc::clone(effects))?,
                previous: None,
            },
            None => Drawing::Whole {
                animation: self.load()?,
                surface: Surface::new(Size {
                    width: self.width,
                    height: self.height,
                }),
                previous: None,
            },
        };
        Ok(Renderer {
            drawing,
            has_rendered: false,
        })
    }

    /// Starts `threads` render threads, each converting with a preparer from `preparers`;
    /// the returned iterator yields every frame in order.
    pub(crate) fn render_in_parallel(
        &self,
        threads: usize,
        preparers: PreparerFactory,
    ) -> OrderedFrames {
        let threads = threads.clamp(1, self.frame_count.max(1) as usize);
        let mut receivers = Vec::with_capacity(threads);
        let mut recyclers = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for thread_index in 0..threads {
            let (sender, receiver) = sync_channel(FRAMES_IN_FLIGHT_PER_THREAD);
            // Room for every frame of this thread, so handing one back never blocks.
            let (recycler, recycled) =
                sync_channel::<EncoderInput>(FRAMES_IN_FLIGHT_PER_THREAD + 2);
            receivers.push(receiver);
            recyclers.push(recycler);
            let source = self.clone();
            let preparers = preparers.clone();
            let handle = std::thread::Builder::new()
                .name(format!("render-{thread_index}"))
                .spawn(move || {
                    crate::os::lower_current_thread_priority(RENDER_THREAD_NICE);
                    let started = source
                        .renderer()
                        .and_then(|renderer| Ok((renderer, preparers()?)));
                    let (mut renderer, mut preparer) = match started {
                        Ok(pair) => pair,
                        Err(error) => {
                            let _ = sender.send(Err(error));
                            return;
                        }
                    };
                    let step = threads as u32;
                    let mut index = thread_index as u32;
                    while index < source.frame_count {
                        let reuse = recycled.try_recv().ok();
                        let frame =
                            render_and_prepare(&mut renderer, preparer.as_mut(), index, reuse);
                        // The consumer hung up (encoder failed or job cancelled): stop.
                        if sender.send(frame).is_err() {
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
            recyclers,
            handles,
            next: 0,
            frame_count: self.frame_count,
            failure: None,
        }
    }
}

fn render_and_prepare(
    renderer: &mut Renderer,
    preparer: &mut dyn FramePreparer,
    index: u32,
    reuse: Option<EncoderInput>,
) -> Result<Frame, RenderError> {
    let (frame, previous) = renderer.render_beside_previous(index);
    let input = preparer.prepare(frame, previous, reuse)?;
    Ok(Frame { index, input })
}

/// Renders frames on one thread.
pub struct Renderer {
    drawing: Drawing,
    has_rendered: bool,
}

/// What a renderer draws with: the whole template in one `Animation`, or its parts.
enum Drawing {
    Whole {
        animation: Animation,
        /// Where the last frame was rendered.
        surface: Surface,
        /// The frame rendered before that one, kept by [`Renderer::render_beside_previous`]
        /// (made on its first use: tests and the bench's render-only figure use one surface).
        previous: Option<Surface>,
    },
    Parts {
        current: PartsRenderer,
        /// The frame before, kept as [`Drawing::Whole`] keeps its surface.
        previous: Option<Vec<Bgra>>,
    },
}

impl Renderer {
    /// Renders frame `index` (relative to the in point): premultiplied BGRA, row-major,
    /// valid until the next call.
    pub fn render(&mut self, index: u32) -> &[Bgra] {
        self.has_rendered = true;
        match &mut self.drawing {
            Drawing::Whole {
                animation, surface, ..
            } => {
                animation.render(index as usize, surface);
                surface.data()
            }
            Drawing::Parts { current, .. } => current.render(index),
        }
    }

    /// Renders frame `index` into the other surface than last time: the frame, and the one
    /// this renderer rendered before it (`None` for its first), both valid until the next call.
    pub(crate) fn render_beside_previous(&mut self, index: u32) -> (&[Bgra], Option<&[Bgra]>) {
        let has_rendered = self.has_rendered;
        self.has_rendered = true;
        match &mut self.drawing {
            Drawing::Whole {
                animation,
                surface,
                previous,
            } => {
                if has_rendered {
                    let free = previous
                        .take()
                        .unwrap_or_else(|| Surface::new(surface.size()));
                    *previous = Some(std::mem::replace(surface, free));
                }
                animation.render(index as usize, surface);
                (surface.data(), previous.as_ref().map(Surface::data))
            }
            Drawing::Parts { current, previous } => {
                if has_rendered {
                    // The frame before is copied: the parts draw into one buffer.
                    let mut kept = previous.take().unwrap_or_default();
                    kept.clear();
                    kept.extend_from_slice(current.last_frame());
                    *previous = Some(kept);
                }
                (current.render(index), previous.as_deref())
            }
        }
    }
}

pub(crate) struct OrderedFrames {
    receivers: Vec<Receiver<Result<Frame, RenderError>>>,
    recyclers: Vec<SyncSender<EncoderInput>>,
    handles: Vec<JoinHandle<()>>,
    next: u32,
    frame_count: u32,
    failure: Option<RenderError>,
}

impl OrderedFrames {
    fn failed(error: RenderError) -> OrderedFrames {
        OrderedFrames {
            receivers: Vec::new(),
            recyclers: Vec::new(),
            handles: Vec::new(),
            next: 0,
            frame_count: 1,
            failure: Some(error),
        }
    }

    /// Hands frame `index`'s buffers, given back by the encoder, to the thread that renders
    /// the frames of its residue class, for reuse.
    pub(crate) fn recycle(&self, index: u32, input: EncoderInput) {
        if let Some(recycler) = self
            .recyclers
            .get(index as usize % self.recyclers.len().max(1))
        {
            // Full or hung up: the buffers are simply freed.
            let _ = recycler.try_send(input);
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
        self.recyclers.clear();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}
