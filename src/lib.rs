//! lottie-render: renders Lottie templates (Bodymovin JSON, Telegram `.tgs`, dotLottie) with
//! typed modifications to video (MP4 as H.264, HEVC or AV1; WebM; ProRes 4444 MOV), animated
//! images (GIF, WebP, APNG) and stills (PNG, JPEG), as a gRPC service with an HTTP/JSON door.
//! Every module, one bullet each (a test of `./dev structure` holds this map to the `mod` list
//! below):
//!
//! - [`lottie`]: templates, in rooms: reading (parsing, the fence in front of rlottie, image
//!   assets, dotLottie archives, replacement images), slots and modifications, lowering what
//!   rlottie cannot draw (`lottie::lower`); retiming and the inspect report.
//! - [`spec`]: what a render asks for, as valid-by-construction domain types; each output
//!   format's facts and limits.
//! - [`render`]: a render's steps in the worker (`prepare`), rlottie frames rendered in
//!   parallel (blurred and shadowed root layers drawn in parts and filtered on pixels,
//!   `render::layer_effects`), the frame pipeline to the encoder.
//! - [`encode`]: the encoder interface; GIF (gifski), MP4 (H.264, HEVC, AV1), WebM (VP9,
//!   alpha), animated WebP and APNG, ProRes 4444, PNG and JPEG stills.
//! - [`sandbox`]: one render in a sandboxed `worker` child process (allow-listed
//!   environment, rlimits, Landlock, seccomp), with a deadline, classified outcomes and a
//!   self-test; the worker protocol.
//! - [`auth`]: who is calling — the caller and its tenant, resolved once per request.
//! - [`analysis`]: a new template's report built in an `analyze` child process under CPU,
//!   memory and wall-clock budgets, from a small pool of its own; the analysis protocol.
//! - [`os`]: the unsafe calls into libc: rlimits, process groups, resource usage, descriptor
//!   passing (with the AVX2 colour kernel, the only modules allowed `unsafe_code`).
//! - [`grpc`]: the gRPC boundary; the generated contract stays in `grpc::proto`, its bounds
//!   (protovalidate rules, scanned before anything is built) in `grpc::bounds`, every RPC
//!   and what the layers do with it in one table, `grpc::methods`. Its handlers convert and
//!   call one use case each: [`jobs::intake`] (SubmitRender) and `templates`
//!   (CreateTemplate), which take domain types, never tonic's.
//! - `templates`: CreateTemplate as one call on domain types, whatever door it came through:
//!   the server's checks, the analysis, the store, the Idempotency-Key.
//! - [`idempotency`]: the Idempotency-Key (validated key, tower layer, the steps every keyed
//!   use case takes in `idempotency::once`, memory and Redis stores).
//! - [`jobs`]: render jobs — the SubmitRender use case (`jobs::intake`), the pure admission,
//!   model, fingerprint, job table, bounded queue, quarantine, the Redis mode, and the
//!   scheduler that runs them in worker processes.
//! - [`http_json`]: the HTTP/JSON door, a transcoder in front of the same gRPC stack.
//! - `console`: the web console's files (HTML, ES modules, CSS compiled in), served by the
//!   door at `/console/` with their security headers; the page's only API is the door.
//! - [`webhooks`]: a job's events POSTed, signed and retried, to its caller's receiver.
//! - [`middleware`]: tower layers of the server (trace context, request metrics, catch-panic,
//!   identity, tenant rate, the Idempotency-Key's presence, request body deadline and budget,
//!   request bounds, load shedding, request size, stream limit, inflation budget), and the
//!   request size limits.
//! - [`metrics`]: Prometheus metrics (served by [`app::http_endpoint`]).
//! - [`mesh`]: the service mesh and Kubernetes fit (connection age and grace, the liveness
//!   and readiness health services).
//! - [`storage`]: templates, fonts, images and outputs in object storage (the data
//!   directory, or an S3-compatible bucket): the index and quotas, pins for accepted jobs,
//!   admission records, bounded summaries, signed links.
//! - [`redis_client`]: the Redis connection shared by the key store and shared job records.
//! - [`fair_share`]: the one mechanism of the pools a caller (tenant, or peer address before
//!   identity) can hold: connections, handshakes, request buffers, watch and download slots,
//!   webhook sender slots, analysis workers.
//! - [`error`]: error classes (deterministic or transient) shared by every module.
//! - `reason`: the wire contract of refusals and failures, one `Reason` enum.
//! - `sync`: a mutex lock that a panic elsewhere cannot wedge.
//! - [`app`]: the application built from its settings (services, health, reflection, the
//!   tower stack) and run until stopped, with its drain on shutdown.
//! - [`config`]: the server's settings, from flags and environment variables.
//! - [`cli`]: the subcommands (`serve`, `render`, `inspect`, `worker`, `analyze`, the
//!   benches, and the client verbs `template`, `submit`, `job`).
//! - [`telemetry`]: logging set-up; OpenTelemetry traces (per server, OTLP export) and the
//!   spans a worker reports back.
//! - [`tls`]: TLS and mTLS on the gRPC listener (our own accept loop, so certificates
//!   reload without a restart) and the watcher that re-reads changed configuration files.

pub mod analysis;
pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
mod console;
pub mod encode;
pub mod error;
pub mod fair_share;
pub mod grpc;
pub mod http_json;
pub mod idempotency;
pub mod jobs;
pub mod lottie;
pub mod mesh;
pub mod metrics;
pub mod middleware;
#[allow(unsafe_code)]
pub mod os;
pub(crate) mod reason;
pub mod redis_client;
pub mod render;
pub mod sandbox;
pub mod spec;
pub mod storage;
mod sync;
pub mod telemetry;
pub(crate) mod templates;
pub mod tls;
pub mod webhooks;
