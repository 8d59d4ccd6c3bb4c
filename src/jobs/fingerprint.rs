//! A job's fingerprint (DESIGN.md): the hash of the canonical, validated request plus the
//! template's sha256 (and its fonts', see `TemplateRecord::render_identity`) and the caller's
//! tenant. Same fingerprint ⇒ same output bytes, so it keys quarantine, idempotency-key
//! payload checks and render de-duplication; the tenant in it keeps all three within one
//! tenant (two tenants' identical requests render twice, and one tenant's crashing request
//! quarantines nothing for another). The default tenant's fingerprints leave the tenant out,
//! so they are the ones of the service before tenants (records in Redis stay valid). Canonical means: maps sorted by key (the domain types
//! hold BTreeMaps), defaults filled in, numbers printed by one algorithm (serde_json's ryu),
//! so neither field order nor map order on the wire changes it.

use crate::auth::TenantId;
use crate::lottie::reading::template::hex_sha256;
use crate::spec::{Modifications, OutputSpec};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

#[derive(Serialize)]
struct Canonical<'a> {
    /// Bumped when the meaning of a rendered request changes (so old fingerprints expire).
    version: u32,
    /// None for the default tenant (its fingerprints predate tenants).
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
    template_sha256: &'a str,
    modifications: &'a Modifications,
    output: &'a OutputSpec,
}

impl Fingerprint {
    pub fn of(
        tenant: &TenantId,
        template_sha256: &str,
        modifications: &Modifications,
        output: &OutputSpec,
    ) -> Self {
        let canonical = Canonical {
            version: 1,
            tenant: (!tenant.is_default()).then(|| tenant.as_str()),
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
            ..Default::default()
        }
    }

    // That map and field order on the wire do not change a fingerprint is tested over gRPC
    // (tests/service/farm/idempotency.rs, `the_same_request_in_another_wire_order_is_a_replay`):
    // here the maps are BTreeMaps already, where order cannot matter.
    #[test]
    fn every_input_changes_the_fingerprint() {
        let red = Rgba::new(1.0, 0.0, 0.0, None).unwrap();
        let blue = Rgba::new(0.0, 0.0, 1.0, None).unwrap();
        let mut one = Modifications::default();
        one.colors.insert("a".into(), red);
        one.colors.insert("b".into(), blue);
        let mut two = one.clone();
        let base = Fingerprint::of(&TenantId::default(), "abc", &one, &output(Format::Mp4));
        assert_eq!(
            base,
            Fingerprint::of(&TenantId::default(), "abc", &two, &output(Format::Mp4))
        );
        let mut swapped = Modifications::default();
        swapped.colors.insert("a".into(), blue);
        swapped.colors.insert("b".into(), red);
        assert_ne!(
            base,
            Fingerprint::of(&TenantId::default(), "abc", &swapped, &output(Format::Mp4))
        );
        assert_ne!(
            base,
            Fingerprint::of(&TenantId::default(), "abd", &one, &output(Format::Mp4))
        );
        assert_ne!(
            base,
            Fingerprint::of(&TenantId::default(), "abc", &one, &output(Format::Gif))
        );
        two.texts.insert("title".into(), "hi".into());
        assert_ne!(
            base,
            Fingerprint::of(&TenantId::default(), "abc", &two, &output(Format::Mp4))
        );
    }

    #[test]
    fn the_tenant_is_part_of_the_fingerprint_and_the_default_tenant_keeps_the_old_one() {
        let modifications = Modifications::default();
        let spec = output(Format::Gif);
        let default = Fingerprint::of(&TenantId::default(), "t", &modifications, &spec);
        let acme = TenantId::parse("acme").unwrap();
        let other = TenantId::parse("other").unwrap();
        assert_ne!(default, Fingerprint::of(&acme, "t", &modifications, &spec));
        assert_ne!(
            Fingerprint::of(&acme, "t", &modifications, &spec),
            Fingerprint::of(&other, "t", &modifications, &spec)
        );
        // What the service computed before tenants (version 1, no tenant field).
        let before = serde_json::json!({
            "version": 1,
            "template_sha256": "t",
            "modifications": modifications,
            "output": spec,
        });
        assert_eq!(default.as_str(), hex_sha256(before.to_string().as_bytes()));
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
            Fingerprint::of(&TenantId::default(), "t", &one, &spec),
            Fingerprint::of(&TenantId::default(), "t", &two, &spec)
        );
    }
}
