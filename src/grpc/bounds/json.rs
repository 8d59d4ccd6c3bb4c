//! The linear scan of the HTTP door's JSON against the [`Schema`], before prost-reflect
//! builds a message from it: a serde visitor that walks the JSON as the proto3 JSON mapping
//! reads it (a member by its proto or JSON name), counts and measures what the bounds name,
//! keeps nothing per element, and refuses a member given twice (`{"theme":"a","theme":"b"}`,
//! or one field under both its names: a parser differential with proxies that keep the
//! first, where serde keeps the last).
//!
//! A value of the wrong JSON type is let through: the conversion that follows names it with
//! the mapping's own words. A syntax error ends the scan; what it found up to there is the
//! answer (a bound broken early is reported even when the body is cut short), else the
//! conversion reports the syntax error.

use super::{FieldPlan, Findings, Length, Path, Schema, Shape, Unknown, ValueKind};
use crate::error::ServiceError;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Holds the JSON `body`, a message of `message` (a full name of the contract), to the
/// contract's bounds and refuses duplicate members; `Ok` also for JSON that is not valid
/// (the conversion after says why).
pub(crate) fn check(schema: &Schema, message: &str, body: &[u8]) -> Result<(), ServiceError> {
    let index = schema
        .message(message)
        .ok_or_else(|| ServiceError::internal(format!("{message} is not in the schema")))?;
    let mut findings = Findings::default();
    let mut json = serde_json::Deserializer::from_slice(body);
    let scanned = MessageSeed {
        schema,
        index,
        path: &Path::Root,
        findings: &mut findings,
    }
    .deserialize(&mut json)
    .and_then(|()| json.end());
    match (scanned, findings.is_empty()) {
        (Err(_), true) => Ok(()),
        _ => findings.into_result(),
    }
}

/// Bytes of a member's name or a map's key kept by the scan: any name of the contract, and
/// any key within its bound and slack (128 characters, four times, four bytes each), whatever
/// the caller sent (a key may be megabytes). A test holds it above every key bound.
pub(crate) const MAX_KEPT_KEY_BYTES: usize = 4096;

/// A member's name or a map's key: its length, and its text when short enough to keep.
struct Key {
    text: Option<String>,
    bytes: u64,
}

impl Key {
    /// The text shown for this key (nothing for a long one).
    fn shown(&self) -> &str {
        self.text.as_deref().unwrap_or("")
    }
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a JSON object key")
            }
            fn visit_str<E>(self, text: &str) -> Result<Key, E> {
                Ok(Key {
                    text: (text.len() <= MAX_KEPT_KEY_BYTES).then(|| text.to_owned()),
                    bytes: text.len() as u64,
                })
            }
        }
        // The text is looked at where serde_json holds it, never copied whole.
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Stops the scan where a count passed its bound: the rest is not read.
fn over_bound<E: serde::de::Error>() -> E {
    E::custom("a count over its bound")
}

/// One message (a JSON object, or `null`).
struct MessageSeed<'a, 'p> {
    schema: &'a Schema,
    index: usize,
    path: &'a Path<'p>,
    findings: &'a mut Findings,
}

impl<'de> DeserializeSeed<'de> for MessageSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Every JSON type a value of the wrong type may be: accepted here, refused by the
/// conversion after.
macro_rules! accept_other_types {
    () => {
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_none<E>(self) -> Result<(), E> {
            Ok(())
        }
    };
}

impl<'de> Visitor<'de> for MessageSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    accept_other_types!();

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let plan = &self.schema.messages[self.index];
        // Field numbers already given: a message has a few dozen fields at most.
        let mut seen: Vec<u32> = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            let name = key.shown();
            let Some(field) = plan
                .fields
                .iter()
                .find(|field| field.name == name || field.json_name == name)
            else {
                self.findings
                    .unknown(self.path, Unknown::Name(name), &plan.full_name);
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let here = Path::Field(self.path, &field.name);
            if seen.contains(&field.number) {
                self.findings.violation(&here, || {
                    "given twice (a JSON member may appear once, by either of its names)".into()
                });
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            seen.push(field.number);
            let value = ValueSeed {
                schema: self.schema,
                field,
                path: &here,
                findings: &mut *self.findings,
            };
            map.next_value_seed(value)?;
        }
        Ok(())
    }
}

/// A field's value: a map, a list, or one value.
struct ValueSeed<'a, 'p> {
    schema: &'a Schema,
    field: &'a FieldPlan,
    path: &'a Path<'p>,
    findings: &'a mut Findings,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.field.shape {
            Shape::Singular => ItemSeed {
                schema: self.schema,
                kind: self.field.value,
                length: self.field.length,
                path: self.path,
                findings: self.findings,
            }
            .deserialize(deserializer),
            Shape::Repeated | Shape::Map { .. } => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON array or object")
    }

    accept_other_types!();

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.field.shape != Shape::Repeated {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        let mut count = 0u64;
        loop {
            let here = Path::Index(self.path, count);
            let item = ItemSeed {
                schema: self.schema,
                kind: self.field.value,
                length: self.field.length,
                path: &here,
                findings: &mut *self.findings,
            };
            if seq.next_element_seed(item)?.is_none() {
                return Ok(());
            }
            count += 1;
            if self.findings.over_count(self.path, self.field, count) {
                return Err(over_bound());
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Shape::Map { key: key_kind } = self.field.shape else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut count = 0u64;
        // Keys given: within the bound (past it the scan stops), each within its own.
        let mut keys: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<Key>()? {
            count += 1;
            if self.findings.over_count(self.path, self.field, count) {
                return Err(over_bound());
            }
            let mut shown = true;
            if key_kind == ValueKind::String {
                let before = self.findings.violations_total;
                match &key.text {
                    Some(text) => self.findings.length(
                        self.path,
                        self.field.key_length,
                        key.bytes,
                        Some(text),
                        "a key",
                    ),
                    // Not kept: longer than any key's bound with its slack, in any script.
                    None => self.findings.violation(self.path, || {
                        format!("a key of {} bytes, past its bound", key.bytes)
                    }),
                }
                shown = self.findings.violations_total == before;
            }
            if shown && !keys.insert(key.shown().to_owned()) {
                self.findings
                    .violation(&Path::Key(self.path, key.shown()), || {
                        "given twice (a JSON member may appear once)".into()
                    });
            }
            let keyed = Path::Key(self.path, if shown { key.shown() } else { "" });
            let at = if shown { &keyed } else { self.path };
            map.next_value_seed(ItemSeed {
                schema: self.schema,
                kind: self.field.value,
                length: self.field.length,
                path: at,
                findings: &mut *self.findings,
            })?;
        }
        Ok(())
    }
}

/// One value of a field: a message, a string, base64 bytes, or a number.
struct ItemSeed<'a, 'p> {
    schema: &'a Schema,
    kind: ValueKind,
    length: Length,
    path: &'a Path<'p>,
    findings: &'a mut Findings,
}

impl<'de> DeserializeSeed<'de> for ItemSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.kind {
            ValueKind::Message(index) => MessageSeed {
                schema: self.schema,
                index,
                path: self.path,
                findings: self.findings,
            }
            .deserialize(deserializer),
            ValueKind::String | ValueKind::Bytes => deserializer.deserialize_any(self),
            ValueKind::Varint | ValueKind::Fixed(_) => {
                deserializer.deserialize_ignored_any(IgnoredAny).map(drop)
            }
        }
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON string")
    }

    accept_other_types!();

    fn visit_str<E>(self, text: &str) -> Result<(), E> {
        match self.kind {
            ValueKind::Bytes => {
                let decoded = base64_decoded_len(text);
                self.findings
                    .length(self.path, self.length, decoded, None, "a value");
            }
            _ => self.findings.length(
                self.path,
                self.length,
                text.len() as u64,
                Some(text),
                "a string",
            ),
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// Bytes a base64 text (standard or URL-safe, padded or not, as the JSON mapping accepts)
/// decodes to: three for every four characters, padding not counted.
fn base64_decoded_len(text: &str) -> u64 {
    let characters = text.trim_end_matches('=').len() as u64;
    characters / 4 * 3 + (characters % 4).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::base64_decoded_len;

    #[test]
    fn base64_lengths_are_the_decoded_bytes() {
        for bytes in 0..20usize {
            let data = vec![0xa5u8; bytes];
            let padded = base64_standard(&data);
            assert_eq!(base64_decoded_len(&padded), bytes as u64, "{padded}");
            assert_eq!(
                base64_decoded_len(padded.trim_end_matches('=')),
                bytes as u64
            );
        }
    }

    fn base64_standard(data: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(data)
    }
}
