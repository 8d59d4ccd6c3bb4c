//! A job's fingerprint (DESIGN.md): the hash of the canonical, validated request plus the
//! template's sha256 (and its fonts', see `TemplateRecord::render_identity`). Same
//! fingerprint ⇒ same output bytes, so it keys quarantine, idempotency-key payload checks and
//! render de-duplication. Canonical means: maps sorted by key (the domain types
//! hold BTreeMaps), defaults filled in, numbers printed by one algorithm (serde_json's ryu),
//! so neither field order nor map order on the wire changes it.

use crate::lottie::template::hex_sha256;
use crate::spec::{Modifications, OutputSpec};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

#[derive(Serialize)]
struct Canonical<'a> {
    /// Bumped when the meaning of a rendered request changes (so old fingerprints expire).
    version: u32,
    template_sha256: &'a str,
    modifications: &'a Modifications,
    output: &'a OutputSpec,
}

impl Fingerprint {
    pub fn of(template_sha256: &str, modifications: &Modifications, output: &OutputSpec) -> Self {
        let canonical = Canonical {
            version: 1,
            template_sha256,
            modifications,
            output,
        };
        // Serialising plain maps, strings and finite numbers cannot fail; an empty string
        // would still give a stable (if shared) fingerprint rather than a panic.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        Fingerprint(hex_sha256(&bytes))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Dimension, Format, Fps, Rgba};

    fn output(format: Format) -> OutputSpec {
        OutputSpec {
            format,
            fps: Fps::DEFAULT,
            width: Dimension::try_from(1080).unwrap(),
            height: Dimension::try_from(1080).unwrap(),
            background: None,
        }
    }

    #[test]
    fn insertion_order_does_not_matter_and_every_input_does() {
        let red = Rgba::new(1.0, 0.0, 0.0, None).unwrap();
        let blue = Rgba::new(0.0, 0.0, 1.0, None).unwrap();
        let mut one = Modifications::default();
        one.colors.insert("a".into(), red);
        one.colors.insert("b".into(), blue);
        let mut two = Modifications::default();
        two.colors.insert("b".into(), blue);
        two.colors.insert("a".into(), red);
        let base = Fingerprint::of("abc", &one, &output(Format::Mp4));
        assert_eq!(base, Fingerprint::of("abc", &two, &output(Format::Mp4)));
        assert_ne!(base, Fingerprint::of("abd", &one, &output(Format::Mp4)));
        assert_ne!(base, Fingerprint::of("abc", &one, &output(Format::Gif)));
        two.texts.insert("title".into(), "hi".into());
        assert_ne!(base, Fingerprint::of("abc", &two, &output(Format::Mp4)));
    }

    #[test]
    fn negative_zero_is_the_same_colour_as_zero() {
        let mut one = Modifications::default();
        one.colors
            .insert("a".into(), Rgba::new(-0.0, 0.0, 0.0, None).unwrap());
        let mut two = Modifications::default();
        two.colors
            .insert("a".into(), Rgba::new(0.0, 0.0, 0.0, None).unwrap());
        let spec = output(Format::Mp4);
        assert_eq!(
            Fingerprint::of("t", &one, &spec),
            Fingerprint::of("t", &two, &spec)
        );
    }
}
