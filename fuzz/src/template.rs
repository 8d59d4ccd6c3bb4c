//! Template parse and fence (`Template::parse`), which the analysis worker runs on every
//! CreateTemplate and the render worker on every render, and the server's own syntax check
//! (`Template::check_syntax`), on arbitrary bytes.
//!
//! Promises checked beyond "no panic": a parse either errors (with a `$`-rooted JSON path,
//! in proportion to the input) or yields a template within every fence limit whose warnings
//! are distinct and in proportion to the input; parsing is idempotent (the tree it yields
//! parses again to the same tree and warnings); the syntax check accepts every JSON template
//! the parse accepts, and what it refuses the parse refuses with the same error. A packed
//! template (`.tgs`, `.lottie`) is unpacked by the parse within its bounds. Time and memory
//! per input are held by libFuzzer's `-timeout` and `-rss_limit_mb`.

use super::{first_difference, is_packed, template_answer_budget};
use lottie_render::lottie::reading::fence;
use lottie_render::lottie::{Template, TemplateError};
use std::collections::HashSet;

/// One input of the target: panics (an assertion) on a broken promise.
pub fn run(data: &[u8]) {
    let checked = Template::check_syntax(data);
    let parsed = Template::parse(data);
    // The server's check is of JSON uploads; a packed one is unpacked and checked in the
    // workers.
    if let (Err(refused), false) = (&checked, is_packed(data)) {
        assert_eq!(
            parsed.as_ref().err(),
            Some(refused),
            "the parse and the check disagree"
        );
    }
    let template = match parsed {
        Ok(template) => template,
        Err(error) => {
            let message = error.to_string();
            assert!(
                message.len() <= template_answer_budget(data),
                "error of {} bytes for {} input bytes",
                message.len(),
                data.len()
            );
            if let TemplateError::Invalid { path, .. } = &error {
                assert!(path.starts_with('$'), "{path}");
            }
            return;
        }
    };
    let model = &template.model;
    assert!(model.fr > 0.0 && model.fr <= fence::MAX_FRAME_RATE);
    assert!((1..=fence::MAX_CANVAS_SIDE).contains(&model.w));
    assert!((1..=fence::MAX_CANVAS_SIDE).contains(&model.h));
    let duration = template.duration_seconds();
    assert!(
        duration > 0.0 && duration <= fence::MAX_DURATION_SECONDS,
        "{duration}"
    );
    assert!(template.layer_count() <= fence::MAX_LAYERS_TOTAL);
    assert!(template.json.is_object());
    let distinct: HashSet<&String> = template.warnings.iter().collect();
    assert_eq!(distinct.len(), template.warnings.len(), "repeated warnings");
    let warning_bytes: usize = template.warnings.iter().map(String::len).sum();
    assert!(
        warning_bytes <= template_answer_budget(data),
        "{warning_bytes} bytes of warnings for {} input bytes",
        data.len()
    );
    let again = Template::parse(template.json.to_string().as_bytes())
        .unwrap_or_else(|error| panic!("the parsed tree does not parse again: {error}"));
    if let Some(difference) = first_difference(&template.json, &again.json, &mut String::new()) {
        panic!("parsing the parsed tree again changes it at {difference}");
    }
    assert_eq!(again.warnings, template.warnings);
}
