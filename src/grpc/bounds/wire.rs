//! The linear scan of a protobuf message's bytes against the [`Schema`]: every field read
//! by its tag and length, counted and measured, nothing built. It finds the bounds broken
//! and the fields the contract does not have (at any depth), and what is not protobuf at
//! all; prost decodes only a message this scan passed.
//!
//! Hand-written because no crate offers it: prost and prost-reflect decode (build) as they
//! read, which is what this scan exists to come before. The wire format is small: a key
//! varint (field number, wire type), then a varint, 8 bytes, a length and that many bytes,
//! or 4 bytes (groups, proto2's, are skipped as unknown).

use super::{Findings, Length, Path, Schema, Shape, Unknown, ValueKind, MAX_MESSAGE_DEPTH};
use crate::error::{FieldViolation, ServiceError};
use crate::reason::Reason;

/// Protobuf's wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// Why bytes are not a protobuf message.
#[derive(Debug)]
struct Undecodable(&'static str);

/// Why a scan stopped before the end.
#[derive(Debug)]
enum Halt {
    Undecodable(&'static str),
    /// A count passed its bound: the rest is not read (a message of millions of elements
    /// is refused after its first few dozen).
    OverBound,
}

impl From<Undecodable> for Halt {
    fn from(Undecodable(why): Undecodable) -> Halt {
        Halt::Undecodable(why)
    }
}

/// Holds `bytes`, a message of `message` (a full name of the contract), to the contract's
/// bounds; `Err` for bytes that are no protobuf message, unknown fields or a broken bound.
pub(crate) fn check(schema: &Schema, message: &str, bytes: &[u8]) -> Result<(), ServiceError> {
    let plan = schema
        .message(message)
        .ok_or_else(|| ServiceError::internal(format!("{message} is not in the schema")))?;
    let mut findings = Findings::default();
    let mut scan = Scan {
        schema,
        findings: &mut findings,
    };
    match scan.message(plan, bytes, &Path::Root, 0) {
        Err(Halt::Undecodable(why)) => Err(undecodable(why)),
        Ok(()) | Err(Halt::OverBound) => findings.into_result(),
    }
}

/// The refusal of bytes that are not a protobuf message, found by the scan or by prost.
pub(crate) fn undecodable(why: &str) -> ServiceError {
    let description = format!("not a valid protobuf message: {why}");
    ServiceError::invalid_argument(
        Reason::BodyUndecodable,
        format!("the request body is {description}"),
        vec![FieldViolation {
            field: "(body)".into(),
            description,
        }],
    )
}

struct Scan<'s, 'f> {
    schema: &'s Schema,
    findings: &'f mut Findings,
}

/// Bytes being read.
struct Cursor<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Cursor<'b> {
    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn varint(&mut self) -> Result<u64, Undecodable> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .bytes
                .get(self.at)
                .ok_or(Undecodable("a varint runs past the end"))?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Undecodable("a varint longer than ten bytes"))
    }

    fn take(&mut self, length: u64) -> Result<&'b [u8], Undecodable> {
        let length = usize::try_from(length).map_err(|_| Undecodable("a length too large"))?;
        let end = self
            .at
            .checked_add(length)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(Undecodable("a length runs past the end"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A field's key: its number and wire type.
    fn key(&mut self) -> Result<(u32, u8), Undecodable> {
        let key = self.varint()?;
        let number =
            u32::try_from(key >> 3).map_err(|_| Undecodable("a field number too large"))?;
        if number == 0 {
            return Err(Undecodable("field number 0"));
        }
        Ok((number, (key & 7) as u8))
    }

    /// Skips one value of `wire_type`; a group is skipped to its end, counting nested
    /// groups without recursion.
    fn skip(&mut self, wire_type: u8) -> Result<(), Undecodable> {
        match wire_type {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LENGTH_DELIMITED => {
                let length = self.varint()?;
                self.take(length).map(drop)
            }
            FIXED32 => self.take(4).map(drop),
            START_GROUP => {
                let mut depth = 1usize;
                while depth > 0 {
                    let (_, inner) = self.key()?;
                    match inner {
                        START_GROUP => depth += 1,
                        END_GROUP => depth -= 1,
                        other => self.skip(other)?,
                    }
                    if depth > MAX_MESSAGE_DEPTH {
                        return Err(Undecodable("groups nested too deep"));
                    }
                }
                Ok(())
            }
            END_GROUP => Err(Undecodable("a group ends that did not start")),
            _ => Err(Undecodable("an invalid wire type")),
        }
    }
}

impl Scan<'_, '_> {
    fn message(
        &mut self,
        index: usize,
        bytes: &[u8],
        path: &Path<'_>,
        depth: usize,
    ) -> Result<(), Halt> {
        if depth > MAX_MESSAGE_DEPTH {
            return Err(Halt::Undecodable("messages nested too deep"));
        }
        let schema = self.schema;
        let plan = &schema.messages[index];
        let mut counts = vec![0u64; plan.fields.len()];
        let mut cursor = Cursor { bytes, at: 0 };
        while !cursor.done() {
            let (number, wire_type) = cursor.key()?;
            let Some((slot, field)) = plan.field(number) else {
                self.findings
                    .unknown(path, Unknown::Number(number), &plan.full_name);
                cursor.skip(wire_type)?;
                continue;
            };
            let here = Path::Field(path, &field.name);
            if wire_type != LENGTH_DELIMITED {
                // A number (or a mistyped field, which prost will refuse).
                if self.findings.over_count(&here, field, counts[slot] + 1) {
                    return Err(Halt::OverBound);
                }
                counts[slot] += 1;
                cursor.skip(wire_type)?;
                continue;
            }
            let length = cursor.varint()?;
            let value = cursor.take(length)?;
            if self.findings.over_count(&here, field, counts[slot] + 1) {
                return Err(Halt::OverBound);
            }
            match (field.shape, field.value) {
                (Shape::Map { key }, kind) => {
                    counts[slot] += 1;
                    self.map_entry(
                        field.key_length,
                        key,
                        field.length,
                        kind,
                        value,
                        &here,
                        depth,
                    )?;
                }
                (Shape::Repeated, ValueKind::Varint) => {
                    // Packed varints: each ends at a byte below 0x80.
                    counts[slot] += value.iter().filter(|byte| **byte < 0x80).count() as u64;
                }
                (Shape::Repeated, ValueKind::Fixed(width)) => {
                    // Packed numbers of `width` bytes (prost refuses a length that does not
                    // divide).
                    counts[slot] += (value.len() / usize::from(width)) as u64;
                }
                (shape, kind) => {
                    let item = counts[slot];
                    counts[slot] += 1;
                    let indexed = Path::Index(&here, item);
                    let at = if shape == Shape::Repeated {
                        &indexed
                    } else {
                        &here
                    };
                    self.value(kind, field.length, value, at, depth)?;
                }
            }
        }
        for (field, count) in plan.fields.iter().zip(counts) {
            self.findings
                .count(&Path::Field(path, &field.name), field, count);
        }
        Ok(())
    }

    /// One length-delimited value of `kind` at `path`.
    fn value(
        &mut self,
        kind: ValueKind,
        length: Length,
        value: &[u8],
        path: &Path<'_>,
        depth: usize,
    ) -> Result<(), Halt> {
        match kind {
            ValueKind::Message(inner) => self.message(inner, value, path, depth + 1),
            ValueKind::String => {
                let text = std::str::from_utf8(value).ok();
                self.findings
                    .length(path, length, value.len() as u64, text, "a string");
                Ok(())
            }
            ValueKind::Bytes => {
                self.findings
                    .length(path, length, value.len() as u64, None, "a value");
                Ok(())
            }
            // A number sent length-delimited: prost refuses it.
            ValueKind::Varint | ValueKind::Fixed(_) => Ok(()),
        }
    }

    /// One map entry (key 1, value 2): the key found first, so that the value's path names
    /// it; the key's own length against `key_length`.
    #[allow(clippy::too_many_arguments)]
    fn map_entry(
        &mut self,
        key_length: Length,
        key_kind: ValueKind,
        value_length: Length,
        value_kind: ValueKind,
        entry: &[u8],
        path: &Path<'_>,
        depth: usize,
    ) -> Result<(), Halt> {
        let mut key: Option<&[u8]> = None;
        let mut cursor = Cursor {
            bytes: entry,
            at: 0,
        };
        while !cursor.done() {
            let (number, wire_type) = cursor.key()?;
            if number == 1 && wire_type == LENGTH_DELIMITED {
                let length = cursor.varint()?;
                key = Some(cursor.take(length)?);
            } else {
                cursor.skip(wire_type)?;
            }
        }
        let key_text = key
            .and_then(|key| std::str::from_utf8(key).ok())
            .unwrap_or("");
        let key_bytes = key.map_or(0, <[u8]>::len) as u64;
        if key_kind == ValueKind::String {
            let before = self.findings.violations_total;
            self.findings
                .length(path, key_length, key_bytes, Some(key_text), "a key");
            if self.findings.violations_total > before {
                // The key is not shown: it may be megabytes.
                return self.entry_value(value_length, value_kind, entry, path, depth);
            }
        }
        let keyed = Path::Key(path, key_text);
        self.entry_value(value_length, value_kind, entry, &keyed, depth)
    }

    fn entry_value(
        &mut self,
        length: Length,
        kind: ValueKind,
        entry: &[u8],
        path: &Path<'_>,
        depth: usize,
    ) -> Result<(), Halt> {
        let mut cursor = Cursor {
            bytes: entry,
            at: 0,
        };
        while !cursor.done() {
            let (number, wire_type) = cursor.key()?;
            match (number, wire_type) {
                (1, _) => cursor.skip(wire_type)?,
                (2, LENGTH_DELIMITED) => {
                    let value_length = cursor.varint()?;
                    let value = cursor.take(value_length)?;
                    self.value(kind, length, value, path, depth + 1)?;
                }
                (2, _) => cursor.skip(wire_type)?,
                (other, _) => {
                    self.findings
                        .unknown(path, Unknown::Number(other), "a map entry");
                    cursor.skip(wire_type)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_varint_past_the_end_is_undecodable() {
        let mut cursor = Cursor {
            bytes: &[0x80, 0x80],
            at: 0,
        };
        assert!(cursor.varint().is_err());
    }

    #[test]
    fn nested_groups_are_skipped_to_their_end() {
        // field 1 start group, field 2 start group, field 2 end, field 1 end, then a varint
        let bytes = [0x0b, 0x13, 0x14, 0x0c, 0x08, 0x01];
        let mut cursor = Cursor {
            bytes: &bytes,
            at: 0,
        };
        let (_, wire_type) = cursor.key().unwrap();
        cursor.skip(wire_type).unwrap();
        assert_eq!(cursor.key().unwrap(), (1, VARINT));
    }
}
