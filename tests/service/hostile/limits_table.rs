//! The limits tables of `docs/security.md` against the code. Every table there with a `value`
//! and an `in the code` column is read row by row: the value cell holds figures separated by
//! ` / `, the code cell names, in the same order, the constant (its path in this crate) or the
//! `serve` flag whose default each figure is. A figure that is not what its constant or
//! default says (to the digits the document shows), a name this test does not know, a row
//! whose cells do not parse, or a missing table, fails the test; so the document cannot drift
//! from the code, in either direction.

use clap::CommandFactory;
use std::time::Duration;

const SECURITY_DOC: &str = "docs/security.md";
/// The headings whose tables are checked: the server's limits, its pools and the template
/// fence's.
const CHECKED_TABLES: [&str; 3] = ["## Limits", "### Pools", "### Template limits (the fence)"];
const MIB: f64 = 1024.0 * 1024.0;

/// What a figure measures, so that `8 MiB` cannot stand for a count of eight million.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Count,
    Bytes,
    Seconds,
}

/// A figure of the document: its value in the canonical unit of its kind (bytes, seconds),
/// the factor of the unit it was written in, and the decimals it shows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Figure {
    Value {
        canonical: f64,
        unit_factor: f64,
        decimals: i32,
        kind: Kind,
    },
    /// `off`: a flag with no default.
    Off,
}

/// What the code says a name stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Actual {
    Value { canonical: f64, kind: Kind },
    NoDefault,
}

fn count(value: f64) -> Option<Actual> {
    Some(Actual::Value {
        canonical: value,
        kind: Kind::Count,
    })
}

fn bytes(value: f64) -> Option<Actual> {
    Some(Actual::Value {
        canonical: value,
        kind: Kind::Bytes,
    })
}

fn seconds(duration: Duration) -> Option<Actual> {
    Some(Actual::Value {
        canonical: duration.as_secs_f64(),
        kind: Kind::Seconds,
    })
}

/// The constants the tables may name, by their path in the crate.
fn constant(name: &str) -> Option<Actual> {
    use lottie_render::{
        analysis, app, auth, fair_share, grpc, http_json, idempotency, jobs, lottie, metrics,
        middleware, os, sandbox, spec, storage, tls, webhooks,
    };
    use middleware::request_body;
    match name {
        "lottie::reading::assets::MAX_IMAGE_SIDE" => {
            count(lottie::reading::assets::MAX_IMAGE_SIDE as f64)
        }
        "os::ARENA_SHARE_OF_ADDRESS_SPACE_DIVISOR" => {
            count(os::ARENA_SHARE_OF_ADDRESS_SPACE_DIVISOR as f64)
        }
        "lottie::reading::images::MAX_IMAGE_BYTES" => {
            bytes(lottie::reading::images::MAX_IMAGE_BYTES as f64)
        }
        "lottie::reading::dotlottie::MAX_THEMES" => {
            count(lottie::reading::dotlottie::MAX_THEMES as f64)
        }
        "lottie::lowering::text::fonts::MAX_FONTS_PER_TEMPLATE" => {
            count(lottie::lowering::text::fonts::MAX_FONTS_PER_TEMPLATE as f64)
        }
        "lottie::lowering::text::fonts::MAX_FONT_BYTES" => {
            bytes(lottie::lowering::text::fonts::MAX_FONT_BYTES as f64)
        }
        "lottie::reading::dotlottie::MAX_LISTED_ANIMATIONS" => {
            count(lottie::reading::dotlottie::MAX_LISTED_ANIMATIONS as f64)
        }
        "lottie::reading::dotlottie::MAX_ANIMATION_ID_CHARS" => {
            count(lottie::reading::dotlottie::MAX_ANIMATION_ID_CHARS as f64)
        }
        "lottie::reading::dotlottie::MAX_ARCHIVE_ENTRIES" => {
            count(lottie::reading::dotlottie::MAX_ARCHIVE_ENTRIES as f64)
        }
        "lottie::reading::dotlottie::MAX_INFLATED_BYTES" => {
            bytes(lottie::reading::dotlottie::MAX_INFLATED_BYTES as f64)
        }
        "lottie::reading::dotlottie::MAX_IMAGE_ENTRY_BYTES" => {
            bytes(lottie::reading::dotlottie::MAX_IMAGE_ENTRY_BYTES as f64)
        }
        "storage::images::MAX_IMAGES_PER_TENANT" => {
            count(storage::images::MAX_IMAGES_PER_TENANT as f64)
        }
        "storage::images::MAX_IMAGE_BYTES_PER_TENANT" => {
            bytes(storage::images::MAX_IMAGE_BYTES_PER_TENANT as f64)
        }
        "middleware::request_body::MAX_UPLOAD_IMAGE_REQUEST_BYTES" => {
            bytes(middleware::request_body::MAX_UPLOAD_IMAGE_REQUEST_BYTES as f64)
        }
        "grpc::convert::MAX_IMAGES_PER_REQUEST" => {
            count(grpc::convert::MAX_IMAGES_PER_REQUEST as f64)
        }
        "grpc::convert::MAX_REQUEST_IMAGE_BYTES" => {
            bytes(grpc::convert::MAX_REQUEST_IMAGE_BYTES as f64)
        }
        "lottie::reading::assets::MAX_IMAGE_PIXELS" => {
            count(lottie::reading::assets::MAX_IMAGE_PIXELS as f64)
        }
        "lottie::reading::assets::MAX_TEMPLATE_IMAGE_DECODED_BYTES" => {
            bytes(lottie::reading::assets::MAX_TEMPLATE_IMAGE_DECODED_BYTES as f64)
        }
        "lottie::reading::assets::PNG_EXTRA_IMAGE_DATA_BYTES" => {
            bytes(lottie::reading::assets::PNG_EXTRA_IMAGE_DATA_BYTES as f64)
        }
        "lottie::reading::assets::MAX_JPEG_SCANS" => {
            count(lottie::reading::assets::MAX_JPEG_SCANS as f64)
        }
        "render::layer_effects::MAX_BLURRED_PIXELS_PER_FRAME" => {
            count(lottie_render::render::layer_effects::MAX_BLURRED_PIXELS_PER_FRAME as f64)
        }
        "render::layer_effects::MAX_EFFECT_MARGIN_PIXELS" => {
            count(lottie_render::render::layer_effects::MAX_EFFECT_MARGIN_PIXELS as f64)
        }
        "lottie::lowering::effects::rendered::MAX_RENDERED_EFFECT_LAYERS" => {
            count(lottie::lowering::effects::rendered::MAX_RENDERED_EFFECT_LAYERS as f64)
        }
        "lottie::lowering::text::MAX_TEXT_VERTICES_PER_TEMPLATE" => {
            count(lottie::lowering::text::MAX_TEXT_VERTICES_PER_TEMPLATE as f64)
        }
        "lottie::lowering::expressions::EXPRESSION_WORK_UNITS_PER_FRAME" => {
            count(lottie::lowering::expressions::EXPRESSION_WORK_UNITS_PER_FRAME as f64)
        }
        "lottie::lowering::expressions::MAX_EXPRESSION_WORK_UNITS" => {
            count(lottie::lowering::expressions::MAX_EXPRESSION_WORK_UNITS as f64)
        }
        "lottie::lowering::expressions::POLL_WORK_UNITS" => {
            count(lottie::lowering::expressions::POLL_WORK_UNITS as f64)
        }
        "lottie::lowering::expressions::BYTES_PER_WORK_UNIT" => {
            bytes(lottie::lowering::expressions::BYTES_PER_WORK_UNIT as f64)
        }
        "lottie::lowering::expressions::MAX_EXPRESSION_CPU" => {
            seconds(lottie::lowering::expressions::MAX_EXPRESSION_CPU)
        }
        "lottie::modifications::MAX_LISTED_SLOTS" => {
            count(lottie::modifications::MAX_LISTED_SLOTS as f64)
        }
        "lottie::reading::template::MAX_TEMPLATE_BYTES" => {
            bytes(lottie::reading::template::MAX_TEMPLATE_BYTES as f64)
        }
        "lottie::reading::template::MAX_JSON_DEPTH" => {
            count(lottie::reading::template::MAX_JSON_DEPTH as f64)
        }
        "lottie::lowering::expressions::paths::MAX_BAKED_PATH_VERTICES" => {
            count(lottie::lowering::expressions::paths::MAX_BAKED_PATH_VERTICES as f64)
        }
        "lottie::lowering::easing::MAX_RESAMPLED_KEYFRAMES" => {
            count(lottie::lowering::easing::MAX_RESAMPLED_KEYFRAMES as f64)
        }
        "lottie::lowering::easing::MAX_SAMPLES_PER_SEGMENT" => {
            count(lottie::lowering::easing::MAX_SAMPLES_PER_SEGMENT as f64)
        }
        "lottie::lowering::easing::MAX_EASED_DIMENSIONS" => {
            count(lottie::lowering::easing::MAX_EASED_DIMENSIONS as f64)
        }
        "lottie::lowering::gradients::MAX_RESAMPLED_GRADIENT_VALUES" => {
            count(lottie::lowering::gradients::MAX_RESAMPLED_GRADIENT_VALUES as f64)
        }
        "lottie::lowering::mattes::MAX_SAMPLED_MASK_VERTICES" => {
            count(lottie::lowering::mattes::MAX_SAMPLED_MASK_VERTICES as f64)
        }
        "lottie::lowering::mattes::MAX_MATTE_GROUP_DEPTH" => {
            count(lottie::lowering::mattes::MAX_MATTE_GROUP_DEPTH as f64)
        }
        "lottie::lowering::skew::MAX_SKEWED_GROUP_DEPTH" => {
            count(lottie::lowering::skew::MAX_SKEWED_GROUP_DEPTH as f64)
        }
        "lottie::reading::template::MAX_JSON_VALUES" => {
            count(lottie::reading::template::MAX_JSON_VALUES as f64)
        }
        "lottie::reading::fence::MAX_FRAME_RATE" => count(lottie::reading::fence::MAX_FRAME_RATE),
        "lottie::reading::fence::MAX_CANVAS_SIDE" => {
            count(lottie::reading::fence::MAX_CANVAS_SIDE as f64)
        }
        "lottie::reading::fence::MAX_DURATION_SECONDS" => seconds(Duration::from_secs_f64(
            lottie::reading::fence::MAX_DURATION_SECONDS,
        )),
        "lottie::reading::fence::MAX_LAYERS_TOTAL" => {
            count(lottie::reading::fence::MAX_LAYERS_TOTAL as f64)
        }
        "lottie::reading::fence::MAX_PRECOMP_DEPTH" => {
            count(lottie::reading::fence::MAX_PRECOMP_DEPTH as f64)
        }
        "lottie::reading::fence::MAX_REPEATER_COPIES" => {
            count(lottie::reading::fence::MAX_REPEATER_COPIES)
        }
        "lottie::reading::fence::MAX_NESTED_REPEATER_COPIES" => {
            count(lottie::reading::fence::MAX_NESTED_REPEATER_COPIES)
        }
        "lottie::reading::fence::MAX_POLYSTAR_POINTS" => {
            count(lottie::reading::fence::MAX_POLYSTAR_POINTS)
        }
        "lottie::reading::fence::MAX_PATH_VERTICES" => {
            count(lottie::reading::fence::MAX_PATH_VERTICES as f64)
        }
        "lottie::reading::fence::MAX_PATH_COORDINATE" => {
            count(lottie::reading::fence::MAX_PATH_COORDINATE)
        }
        "lottie::reading::fence::MAX_GRADIENT_STOPS" => {
            count(lottie::reading::fence::MAX_GRADIENT_STOPS as f64)
        }
        "lottie::reading::fence::MAX_EXPRESSIONS" => {
            count(lottie::reading::fence::MAX_EXPRESSIONS as f64)
        }
        "lottie::report::MAX_MARKERS" => count(lottie::report::MAX_MARKERS as f64),
        "lottie::report::MAX_MARKER_NAME_CHARS" => {
            count(lottie::report::MAX_MARKER_NAME_CHARS as f64)
        }
        "spec::timing::MAX_LOOP_COUNT" => count(f64::from(spec::timing::MAX_LOOP_COUNT)),
        "sandbox::MAX_OUTPUT_BYTES" => bytes(sandbox::MAX_OUTPUT_BYTES as f64),
        "spec::output::MAX_WEBP_ANIMATION_MEGAPIXELS" => {
            count(spec::output::MAX_WEBP_ANIMATION_MEGAPIXELS)
        }
        "spec::output::MAX_GIF_SECONDS" => {
            seconds(Duration::from_secs_f64(spec::output::MAX_GIF_SECONDS))
        }
        "analysis::ANALYSIS_WALL_PER_CPU" => count(f64::from(analysis::ANALYSIS_WALL_PER_CPU)),
        "analysis::ANALYSIS_STALL_SECONDS" => {
            seconds(Duration::from_secs(analysis::ANALYSIS_STALL_SECONDS))
        }
        "analysis::WORKER_WAIT" => seconds(analysis::WORKER_WAIT),
        "analysis::shares::FIRST_BACKOFF_BUDGETS" => {
            count(f64::from(analysis::shares::FIRST_BACKOFF_BUDGETS))
        }
        "analysis::shares::BACKOFF_MAX" => seconds(analysis::shares::BACKOFF_MAX),
        "analysis::shares::TENANT_CPU_SECONDS_PER_SECOND" => {
            count(analysis::shares::TENANT_CPU_SECONDS_PER_SECOND)
        }
        "analysis::shares::TENANT_CPU_BURST_BUDGETS" => {
            count(analysis::shares::TENANT_CPU_BURST_BUDGETS)
        }
        "grpc::templates::MAX_CONCURRENT_TEMPLATE_PARSES" => {
            count(grpc::templates::MAX_CONCURRENT_TEMPLATE_PARSES as f64)
        }
        "grpc::templates::PARSE_WAIT" => seconds(grpc::templates::PARSE_WAIT),
        "grpc::templates::MAX_PAGE_BYTES" => bytes(grpc::templates::MAX_PAGE_BYTES as f64),
        "jobs::MAX_JOBS_EXAMINED_PER_LIST" => count(jobs::MAX_JOBS_EXAMINED_PER_LIST as f64),
        "jobs::MAX_INDEXED_JOBS_PER_TENANT" => count(jobs::MAX_INDEXED_JOBS_PER_TENANT as f64),
        "metrics::recent_refusals::WINDOW_MINUTES" => {
            count(metrics::recent_refusals::WINDOW_MINUTES as f64)
        }
        "storage::MAX_TEMPLATE_RECORD_BYTES" => bytes(storage::MAX_TEMPLATE_RECORD_BYTES as f64),
        "storage::record_cache::MAX_CACHED_RECORDS" => {
            count(storage::record_cache::MAX_CACHED_RECORDS as f64)
        }
        "storage::record_cache::MAX_CACHED_RECORD_BYTES" => {
            bytes(storage::record_cache::MAX_CACHED_RECORD_BYTES as f64)
        }
        "storage::summary::MAX_DEFAULT_TEXT_CHARS" => {
            count(storage::summary::MAX_DEFAULT_TEXT_CHARS as f64)
        }
        "storage::summary::MAX_WARNINGS_SHOWN" => {
            count(storage::summary::MAX_WARNINGS_SHOWN as f64)
        }
        "storage::summary::MAX_WARNING_CHARS" => count(storage::summary::MAX_WARNING_CHARS as f64),
        "storage::summary::MAX_SLOT_LIST_BYTES" => {
            bytes(storage::summary::MAX_SLOT_LIST_BYTES as f64)
        }
        "http_json::transcode::MAX_QUERY_PARAMETERS" => {
            count(http_json::transcode::MAX_QUERY_PARAMETERS as f64)
        }
        "http_json::answer::MAX_ANSWER_BYTES" => bytes(http_json::answer::MAX_ANSWER_BYTES as f64),
        "webhooks::destination::MAX_WEBHOOK_URL_BYTES" => {
            bytes(webhooks::destination::MAX_WEBHOOK_URL_BYTES as f64)
        }
        "webhooks::dispatch::MAX_PER_DESTINATION" => {
            count(webhooks::dispatch::MAX_PER_DESTINATION as f64)
        }
        "webhooks::client::MAX_ANSWER_BYTES" => bytes(webhooks::client::MAX_ANSWER_BYTES as f64),
        "webhooks::client::CONNECT_TIMEOUT" => seconds(webhooks::client::CONNECT_TIMEOUT),
        "webhooks::client::ANSWER_TIMEOUT" => seconds(webhooks::client::ANSWER_TIMEOUT),
        "webhooks::dispatch::ATTEMPTS_AFTER_STOP" => {
            seconds(webhooks::dispatch::ATTEMPTS_AFTER_STOP)
        }
        "webhooks::store::MAX_PENDING_DELIVERIES" => {
            count(webhooks::store::MAX_PENDING_DELIVERIES as f64)
        }
        "webhooks::resolver::RESOLVER_SLOTS" => count(webhooks::resolver::RESOLVER_SLOTS as f64),
        "webhooks::resolver::RESOLVER_SLOT_WAIT" => seconds(webhooks::resolver::RESOLVER_SLOT_WAIT),
        "app::open_connections::DESCRIPTOR_RESERVE" => {
            count(app::open_connections::DESCRIPTOR_RESERVE as f64)
        }
        "app::accept::ACCEPT_ERROR_BACKOFF" => seconds(app::accept::ACCEPT_ERROR_BACKOFF),
        "app::transport::MAX_STREAMS_PER_CONNECTION" => {
            count(f64::from(app::transport::MAX_STREAMS_PER_CONNECTION))
        }
        "app::transport::PER_CONNECTION_SHARE_DIVISOR" => {
            count(app::transport::PER_CONNECTION_SHARE_DIVISOR as f64)
        }
        "app::transport::MAX_HEADER_LIST_BYTES" => {
            bytes(f64::from(app::transport::MAX_HEADER_LIST_BYTES))
        }
        "app::transport::MAX_PENDING_ACCEPT_RESET_STREAMS" => {
            count(app::transport::MAX_PENDING_ACCEPT_RESET_STREAMS as f64)
        }
        "app::transport::MAX_LOCAL_ERROR_RESET_STREAMS" => {
            count(app::transport::MAX_LOCAL_ERROR_RESET_STREAMS as f64)
        }
        "middleware::request_body::MAX_REQUEST_BYTES" => {
            bytes(middleware::request_body::MAX_REQUEST_BYTES as f64)
        }
        "middleware::request_body::MAX_RENDER_REQUEST_BYTES" => {
            bytes(middleware::request_body::MAX_RENDER_REQUEST_BYTES as f64)
        }
        "jobs::settings::DEFAULT_TENANT_MAX_JOBS" => {
            count(f64::from(jobs::settings::DEFAULT_TENANT_MAX_JOBS))
        }
        "middleware::request_body::MAX_HEALTH_REQUEST_BYTES" => {
            bytes(request_body::MAX_HEALTH_REQUEST_BYTES as f64)
        }
        "middleware::request_body::MAX_REFLECTION_REQUEST_BYTES" => {
            bytes(request_body::MAX_REFLECTION_REQUEST_BYTES as f64)
        }
        "middleware::request_body::MAX_ID_REQUEST_BYTES" => {
            bytes(request_body::MAX_ID_REQUEST_BYTES as f64)
        }
        "middleware::request_body::REQUEST_BUFFER_BUDGET_BYTES" => {
            bytes(request_body::REQUEST_BUFFER_BUDGET_BYTES as f64)
        }
        "middleware::request_body::LARGE_FIRST_AMOUNT_BYTES" => {
            bytes(request_body::LARGE_FIRST_AMOUNT_BYTES as f64)
        }
        "middleware::request_body::SMALL_FIRST_AMOUNT_BYTES" => {
            bytes(request_body::SMALL_FIRST_AMOUNT_BYTES as f64)
        }
        "middleware::request_body::ID_BUFFER_BUDGET_BYTES" => {
            bytes(request_body::ID_BUFFER_BUDGET_BYTES as f64)
        }
        "middleware::request_body::REQUEST_BODY_IDLE_TIMEOUT" => {
            seconds(request_body::REQUEST_BODY_IDLE_TIMEOUT)
        }
        "middleware::request_body::REQUEST_BUFFER_WAIT" => {
            seconds(request_body::REQUEST_BUFFER_WAIT)
        }
        "middleware::request_body::HEALTH_BUFFER_BUDGET_BYTES" => {
            bytes(request_body::HEALTH_BUFFER_BUDGET_BYTES as f64)
        }
        "middleware::inflation_budget::INFLATION_BUDGET_BYTES" => {
            bytes(middleware::inflation_budget::INFLATION_BUDGET_BYTES as f64)
        }
        "middleware::inflation_budget::INFLATION_WAIT" => {
            seconds(middleware::inflation_budget::INFLATION_WAIT)
        }
        "middleware::inflation_budget::INFLATION_RETRY_AFTER" => {
            seconds(middleware::inflation_budget::INFLATION_RETRY_AFTER)
        }
        "tls::incoming::TLS_HANDSHAKE_TIMEOUT" => seconds(tls::incoming::TLS_HANDSHAKE_TIMEOUT),
        "tls::incoming::MAX_TLS_HANDSHAKES_IN_PROGRESS" => {
            count(tls::incoming::MAX_TLS_HANDSHAKES_IN_PROGRESS as f64)
        }
        "tls::files::MAX_TLS_FILE_BYTES" => bytes(tls::files::MAX_TLS_FILE_BYTES as f64),
        "auth::files::MAX_IDENTITY_FILE_BYTES" => {
            bytes(auth::files::MAX_IDENTITY_FILE_BYTES as f64)
        }
        "auth::api_keys::MAX_API_KEY_BYTES" => bytes(auth::api_keys::MAX_API_KEY_BYTES as f64),
        "auth::known_identities::MAX_IDENTITY_BYTES" => {
            bytes(auth::known_identities::MAX_IDENTITY_BYTES as f64)
        }
        "fair_share::RESERVE_FIRST_AMOUNTS" => count(fair_share::RESERVE_FIRST_AMOUNTS as f64),
        "fair_share::FIRST_SLOTS" => count(fair_share::FIRST_SLOTS as f64),
        "idempotency::store::MAX_MEMORY_KEYS" => count(idempotency::store::MAX_MEMORY_KEYS as f64),
        _ => None,
    }
}

/// The default of `serve`'s flag `--name` as clap has it (the very default the server runs
/// with, read without the environment), in the unit its name ends in.
fn flag_default(flag: &str) -> Option<Actual> {
    let name = flag.strip_prefix("--")?;
    let cli = lottie_render::cli::Cli::command();
    let serve = cli.find_subcommand("serve")?;
    let argument = serve
        .get_arguments()
        .find(|argument| argument.get_long() == Some(name))?;
    let Some(default) = argument.get_default_values().first() else {
        return Some(Actual::NoDefault);
    };
    let value: f64 = default.to_str()?.parse().ok()?;
    let segments: Vec<&str> = name.split('-').collect();
    let actual = if segments.contains(&"mb") {
        Actual::Value {
            canonical: value * MIB,
            kind: Kind::Bytes,
        }
    } else if segments.contains(&"ms") {
        Actual::Value {
            canonical: value / 1000.0,
            kind: Kind::Seconds,
        }
    } else if segments.contains(&"seconds") {
        Actual::Value {
            canonical: value,
            kind: Kind::Seconds,
        }
    } else {
        Actual::Value {
            canonical: value,
            kind: Kind::Count,
        }
    };
    Some(actual)
}

/// The unit a figure may be written in: its kind and its factor to the canonical unit.
fn unit(name: &str) -> Option<(Kind, f64)> {
    Some(match name {
        "" | "px" | "units" => (Kind::Count, 1.0),
        "B" | "bytes" => (Kind::Bytes, 1.0),
        "KiB" => (Kind::Bytes, 1024.0),
        "MiB" => (Kind::Bytes, MIB),
        "GiB" => (Kind::Bytes, MIB * 1024.0),
        "ms" => (Kind::Seconds, 0.001),
        "s" => (Kind::Seconds, 1.0),
        "min" => (Kind::Seconds, 60.0),
        "h" => (Kind::Seconds, 3600.0),
        _ => return None,
    })
}

/// A number as the document writes it (`1,000,000`, `0.5`): its value and decimals shown.
fn number(text: &str) -> Option<(f64, i32)> {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text, None),
    };
    let groups: Vec<&str> = whole.split(',').collect();
    let grouped_right = groups.iter().enumerate().all(|(index, group)| {
        !group.is_empty()
            && group.chars().all(|c| c.is_ascii_digit())
            && (index == 0 || group.len() == 3)
            && (index > 0 || groups.len() == 1 || group.len() <= 3)
    });
    if !grouped_right {
        return None;
    }
    if let Some(fraction) = fraction {
        if fraction.is_empty() || !fraction.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
    }
    let decimals = fraction.map_or(0, |fraction| fraction.len() as i32);
    let plain = text.replace(',', "");
    Some((plain.parse().ok()?, decimals))
}

/// One figure: `off`, or `NUMBER[×NUMBER] [UNIT]`.
fn figure(text: &str) -> Option<Figure> {
    if text == "off" {
        return Some(Figure::Off);
    }
    let (quantity, unit_name) = text.split_once(' ').unwrap_or((text, ""));
    let (kind, unit_factor) = unit(unit_name)?;
    let mut value = 1.0;
    let mut decimals = 0;
    for factor in quantity.split('×') {
        let (factor, shown) = number(factor)?;
        value *= factor;
        decimals = decimals.max(shown);
    }
    Some(Figure::Value {
        canonical: value * unit_factor,
        unit_factor,
        decimals,
        kind,
    })
}

/// The table cells of a Markdown row (`\|` inside a cell kept as `|`).
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner
        .replace("\\|", "\u{0}")
        .split('|')
        .map(|cell| cell.trim().replace('\u{0}', "|"))
        .collect()
}

/// Checks every figure of the checked tables in `doc`; the number of figures checked, or
/// every disagreement and parse failure, one line each.
fn check(doc: &str) -> Result<usize, Vec<String>> {
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut heading = String::new();
    let mut tables_found: Vec<String> = Vec::new();
    let mut columns: Option<(usize, usize)> = None;
    let mut lines = doc.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.starts_with('#') {
            heading = line.to_owned();
            continue;
        }
        if !line.starts_with('|') {
            columns = None;
            continue;
        }
        if columns.is_none() {
            // A header row: a checked table has both columns and sits under a checked heading.
            let header = cells(line);
            let value = header.iter().position(|cell| cell == "value");
            let code = header.iter().position(|cell| cell == "in the code");
            if let (Some(value), Some(code)) = (value, code) {
                if !CHECKED_TABLES.contains(&heading.as_str()) {
                    problems.push(format!(
                        "a limits table under {heading:?}, not one of {CHECKED_TABLES:?}"
                    ));
                }
                tables_found.push(heading.clone());
                columns = Some((value, code));
                // The delimiter row.
                if !lines
                    .next()
                    .is_some_and(|row| row.trim().starts_with("|---"))
                {
                    problems.push(format!("the table under {heading:?} has no delimiter row"));
                }
            } else {
                // Some other table: skip it whole.
                while lines.peek().is_some_and(|row| row.trim().starts_with('|')) {
                    lines.next();
                }
            }
            continue;
        }
        let Some((value_column, code_column)) = columns else {
            continue;
        };
        let row = cells(line);
        let limit = row.first().cloned().unwrap_or_default();
        let (Some(values), Some(names)) = (row.get(value_column), row.get(code_column)) else {
            problems.push(format!("{limit:?}: the row has too few cells"));
            continue;
        };
        let values: Vec<&str> = values.split(" / ").collect();
        let names: Vec<&str> = names.split(" / ").collect();
        if values.len() != names.len() {
            problems.push(format!(
                "{limit:?}: {} figures ({values:?}) but {} names ({names:?})",
                values.len(),
                names.len()
            ));
            continue;
        }
        for (value, name) in values.iter().zip(&names) {
            let Some(stated) = figure(value.trim()) else {
                problems.push(format!(
                    "{limit:?}: {value:?} is no figure (NUMBER[×NUMBER] [UNIT], or off)"
                ));
                continue;
            };
            let name = name.trim();
            let Some(name) = name
                .strip_prefix('`')
                .and_then(|name| name.strip_suffix('`'))
                .filter(|name| !name.contains('`'))
            else {
                problems.push(format!("{limit:?}: {name:?} is not one name in backquotes"));
                continue;
            };
            let actual = if name.starts_with("--") {
                flag_default(name)
            } else {
                constant(name)
            };
            let Some(actual) = actual else {
                problems.push(format!(
                    "{limit:?}: {name} is neither a serve flag with a numeric default nor a constant this test knows"
                ));
                continue;
            };
            checked += 1;
            if let Some(problem) = disagreement(&limit, name, value, stated, actual) {
                problems.push(problem);
            }
        }
    }
    for table in CHECKED_TABLES {
        match tables_found.iter().filter(|found| *found == table).count() {
            1 => {}
            0 => problems.push(format!("no limits table found under {table:?}")),
            n => problems.push(format!("{n} limits tables under {table:?}")),
        }
    }
    if problems.is_empty() {
        Ok(checked)
    } else {
        Err(problems)
    }
}

/// Why `stated` (written `text`) is not what `name` holds, if it is not: a stated figure must
/// be the actual value rounded to the decimals the document shows.
fn disagreement(
    limit: &str,
    name: &str,
    text: &str,
    stated: Figure,
    actual: Actual,
) -> Option<String> {
    match (stated, actual) {
        (Figure::Off, Actual::NoDefault) => None,
        (Figure::Off, Actual::Value { canonical, .. }) => Some(format!(
            "{limit:?}: says off, but {name} is {canonical} (canonical unit)"
        )),
        (Figure::Value { .. }, Actual::NoDefault) => Some(format!(
            "{limit:?}: says {text}, but {name} has no default (write off)"
        )),
        (
            Figure::Value {
                canonical: stated,
                unit_factor,
                decimals,
                kind,
            },
            Actual::Value {
                canonical: actual,
                kind: actual_kind,
            },
        ) => {
            if kind != actual_kind {
                return Some(format!(
                    "{limit:?}: {text} is a {kind:?}, but {name} is a {actual_kind:?}"
                ));
            }
            let in_stated_unit = actual / unit_factor;
            let tolerance = 0.5 * 10f64.powi(-decimals) - 1e-9;
            ((in_stated_unit - stated / unit_factor).abs() > tolerance).then(|| {
                format!("{limit:?}: says {text}, but {name} is {in_stated_unit} in that unit")
            })
        }
    }
}

fn security_doc() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SECURITY_DOC);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

#[test]
fn every_figure_of_the_limits_tables_in_the_security_doc_is_its_constant_or_flag_default() {
    match check(&security_doc()) {
        Ok(checked) => {
            // Both tables hold dozens of figures; a handful means rows were not read.
            assert!(
                checked >= 80,
                "only {checked} figures checked in {SECURITY_DOC}"
            );
            println!("{checked} figures of {SECURITY_DOC} agree with the code");
        }
        Err(problems) => panic!(
            "{SECURITY_DOC} disagrees with the code:\n{}",
            problems.join("\n")
        ),
    }
}

/// The check itself: a changed figure, an unknown name, a malformed figure or a missing table
/// each make it fail, so the test above fails when the document or the code drifts.
#[test]
fn the_limits_table_check_fails_on_a_changed_figure_an_unknown_name_or_a_missing_table() {
    let doc = security_doc();
    let changes = [
        (
            "| 8192 px / 4096×4096 |",
            "| 8193 px / 4096×4096 |",
            "MAX_IMAGE_SIDE",
        ),
        (
            "| 272 MiB / 1 MiB / 16 / 1 s / 5 s / 30 s |",
            "| 272 MiB / 2 MiB / 16 / 1 s / 5 s / 30 s |",
            "LARGE_FIRST_AMOUNT_BYTES",
        ),
        ("| 5 s / 1 GiB |", "| 5 s / 2 GiB |", "--analysis-memory-mb"),
        (
            "| 64 / 1 / 16 / 60 s |",
            "| 64 / 1 / 16 / 60 ms |",
            "--download-idle-timeout-ms",
        ),
        ("| 128 MiB |", "| 128 |", "MAX_TEMPLATE_IMAGE_DECODED_BYTES"),
        ("| off |", "| 1 |", "--tenant-requests-per-second"),
        (
            "`lottie::reading::fence::MAX_LAYERS_TOTAL`",
            "`lottie::reading::fence::MAX_LAYER_TOTAL`",
            "MAX_LAYER_TOTAL",
        ),
        ("| 2,000,000 |", "| 2 million |", "2 million"),
        (
            "### Template limits (the fence)",
            "### The fence",
            "Template limits (the fence)",
        ),
    ];
    for (from, to, named) in changes {
        assert_eq!(
            doc.matches(from).count(),
            1,
            "{from:?} is not once in {SECURITY_DOC}"
        );
        let changed = doc.replacen(from, to, 1);
        let Err(problems) = check(&changed) else {
            panic!("{from:?} → {to:?} passed the check");
        };
        assert!(
            problems.iter().any(|problem| problem.contains(named)),
            "{from:?} → {to:?}: no problem names {named}: {problems:?}"
        );
    }
}
