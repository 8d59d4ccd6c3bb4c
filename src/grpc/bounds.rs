//! The contract's bounds, enforced before anything is built from a request. Every repeated,
//! map, string and bytes field of every request message declares its maximum in the proto
//! files, as protovalidate writes it (`(buf.validate.field).repeated.max_items`,
//! `.map.max_pairs`, `.map.keys.string.max_len`, `.string.max_len`, `.bytes.max_len`, …;
//! `proto/buf/validate/validate.proto`, vendored). They are read here once from the
//! descriptor set into a [`Schema`], and two linear scans hold a request to them without
//! building it: [`wire`] over protobuf bytes (the gRPC door; also where unknown fields are
//! found) and [`json`] over the HTTP door's JSON (also where duplicate members are refused).
//!
//! Why before decoding: prost and prost-reflect build every element they read, and an
//! element costs far more in memory than on the wire (an empty gradient stop is 2 bytes
//! there and some 60 bytes decoded; an empty map entry of the door's JSON, `{},`, some 300
//! in a `DynamicMessage`). Validation after decoding came too late: one 16 MiB SubmitRender
//! of empty stops took the server up by gigabytes. A scan keeps nothing per element, so a
//! message over a bound costs its bytes and a pass over them.
//!
//! The alternative, protovalidate's own runtime (CEL over a decoded message), checks after
//! decoding too; we read the same rules and check them where they can still protect us.

pub(crate) mod json;
pub(crate) mod wire;

use super::methods::Method;
use super::proto::descriptor_pool;
use crate::error::{FieldViolation, ServiceError};
use crate::reason::Reason;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, Value,
};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

/// Unknown fields named in one answer. Each costs the caller two bytes on the wire but a
/// violation of about a hundred bytes in the answer (found by fuzzing: a 374-byte body drew
/// a 10 KB error, a 4 MiB one would have drawn hundreds of MiB); a typo needs one or two.
pub(crate) const MAX_UNKNOWN_FIELDS_REPORTED: usize = 16;

/// Violations named in one refusal; beyond them the message says how many more. A bound
/// is broken once per field, but a map of 16 entries can break a key bound 16 times.
pub(crate) const MAX_VIOLATIONS_REPORTED: usize = 16;

/// How deep request messages nest. The contract's deepest request path is 5 messages
/// (RenderRequest → Modifications → map entry → Gradient → GradientStop → Color); a wire
/// message deeper than this is not one of ours (the scans recurse per level).
pub(crate) const MAX_MESSAGE_DEPTH: usize = 16;

/// A string is refused by the scans only past this many times its bound. Up to it, building
/// it costs no more than its bytes (a string is not amplified by decoding), and the domain's
/// checks, which hold the same bound (tested), then report it together with every other
/// violation of the request, as the contract promises (a text one character too long is the
/// common mistake). Counts have no slack: elements are what decoding amplifies, and nested
/// counts multiply; nor have bytes (images, fonts, templates): megabytes past the bound
/// would be built for nothing, and the message they make could pass the method's limit.
pub(crate) const LENGTH_SLACK: u64 = 4;

/// Characters of an unknown JSON member's name shown in a refusal.
const MAX_UNKNOWN_NAME_CHARS: usize = 64;

/// A field the contract does not have, as the caller sent it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unknown<'a> {
    Number(u32),
    Name(&'a str),
}

/// Holds a gRPC request body just received for `method` (`body`: one message with its
/// 5-byte prefix) to the contract, before tonic copies it into its decoding buffer: a
/// refused body costs its bytes once. A compressed message is checked after it is
/// inflated, by the codec; a method whose request is no contract message, not at all.
pub(crate) fn check_received(method: Method, body: &[u8]) -> Result<(), ServiceError> {
    let schema = Schema::contract()?;
    let message = method.request();
    let (true, Some((0, bytes))) = (schema.plans_request_of(method), body.split_first()) else {
        return Ok(());
    };
    match bytes.get(4..) {
        Some(encoded) => wire::check(schema, message, encoded),
        None => Ok(()),
    }
}

/// The most a string or bytes value may hold: characters and bytes (either may be absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Length {
    pub max_chars: Option<u64>,
    pub max_bytes: Option<u64>,
}

impl Length {
    #[cfg(test)]
    fn is_bounded(&self) -> bool {
        self.max_chars.is_some() || self.max_bytes.is_some()
    }
}

/// What a field's value is, as the scans need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    /// A message, by its index in [`Schema::messages`].
    Message(usize),
    String,
    Bytes,
    /// A number, bool or enum written as a varint: nothing to bound but its count.
    Varint,
    /// A number of this many bytes (`double`, `fixed64`: 8; `float`, `fixed32`: 4).
    Fixed(u8),
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Singular,
    Repeated,
    /// A map: its keys' kind and length (its values are the field's `value`).
    Map {
        key: ValueKind,
    },
}

/// One field of a message, with its bounds.
#[derive(Debug, Clone)]
pub(crate) struct FieldPlan {
    pub number: u32,
    pub name: String,
    pub json_name: String,
    pub shape: Shape,
    /// The kind of the field's values (a map's values).
    pub value: ValueKind,
    /// Items of a repeated field, entries of a map.
    pub max_count: Option<u64>,
    /// Each string or bytes value (a repeated field's items, a map's values).
    pub length: Length,
    /// Each key of a map.
    pub key_length: Length,
}

impl FieldPlan {
    /// What the field's count counts.
    fn counted(&self) -> &'static str {
        match self.shape {
            Shape::Map { .. } => "entries",
            _ => "items",
        }
    }

    /// True when every part of this field that can grow has a declared bound.
    #[cfg(test)]
    pub(crate) fn is_bounded(&self) -> bool {
        let counted = self.shape == Shape::Singular || self.max_count.is_some();
        let value = match self.value {
            ValueKind::String | ValueKind::Bytes => self.length.is_bounded(),
            ValueKind::Message(_) | ValueKind::Varint | ValueKind::Fixed(_) => true,
        };
        let key = match self.shape {
            Shape::Map {
                key: ValueKind::String,
            } => self.key_length.is_bounded(),
            _ => true,
        };
        counted && value && key
    }
}

/// One message: its full name and its fields.
#[derive(Debug, Clone)]
pub(crate) struct MessagePlan {
    pub full_name: String,
    pub fields: Vec<FieldPlan>,
}

impl MessagePlan {
    pub(crate) fn field(&self, number: u32) -> Option<(usize, &FieldPlan)> {
        self.fields
            .iter()
            .enumerate()
            .find(|(_, field)| field.number == number)
    }
}

/// Every message of the contract, with its fields' bounds.
#[derive(Debug)]
pub(crate) struct Schema {
    pub messages: Vec<MessagePlan>,
    by_name: HashMap<String, usize>,
}

impl Schema {
    /// The contract's schema, read once from the descriptor set.
    pub(crate) fn contract() -> Result<&'static Schema, ServiceError> {
        static SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();
        SCHEMA
            .get_or_init(|| Schema::of_pool(descriptor_pool()?))
            .as_ref()
            .map_err(|error| ServiceError::internal(error.clone()))
    }

    /// The schema of every message in `pool`.
    pub(crate) fn of_pool(pool: &DescriptorPool) -> Result<Schema, String> {
        let mut schema = Schema {
            messages: Vec::new(),
            by_name: HashMap::new(),
        };
        let descriptors: Vec<MessageDescriptor> = pool.all_messages().collect();
        for descriptor in &descriptors {
            schema.index_of(descriptor);
        }
        for descriptor in &descriptors {
            let fields = descriptor
                .fields()
                .map(|field| schema.plan_field(&field))
                .collect::<Result<Vec<_>, String>>()?;
            let index = schema.index_of(descriptor);
            schema.messages[index].fields = fields;
        }
        Ok(schema)
    }

    /// Whether `method`'s request is a message of the contract (not health's or
    /// reflection's), so that its bounds are declared here.
    pub(crate) fn plans_request_of(&self, method: Method) -> bool {
        self.by_name.contains_key(method.request())
    }

    /// The index of `name`'s plan.
    pub(crate) fn message(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    fn index_of(&mut self, descriptor: &MessageDescriptor) -> usize {
        if let Some(index) = self.by_name.get(descriptor.full_name()) {
            return *index;
        }
        let index = self.messages.len();
        self.messages.push(MessagePlan {
            full_name: descriptor.full_name().to_owned(),
            fields: Vec::new(),
        });
        self.by_name
            .insert(descriptor.full_name().to_owned(), index);
        index
    }

    fn value_kind(&mut self, kind: &Kind) -> ValueKind {
        match kind {
            Kind::Message(message) => ValueKind::Message(self.index_of(message)),
            Kind::String => ValueKind::String,
            Kind::Bytes => ValueKind::Bytes,
            Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => ValueKind::Fixed(8),
            Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => ValueKind::Fixed(4),
            _ => ValueKind::Varint,
        }
    }

    fn plan_field(&mut self, field: &FieldDescriptor) -> Result<FieldPlan, String> {
        let rules = field_rules(field);
        let rule = |path: &[&str]| rules.as_ref().and_then(|rules| rule_u64(rules, path));
        let (shape, value, max_count, length, key_length) = if field.is_map() {
            let Kind::Message(entry) = field.kind() else {
                return Err(format!("map {} has no entry message", field.full_name()));
            };
            let (Some(key), Some(value)) = (entry.get_field(1), entry.get_field(2)) else {
                return Err(format!("map {} has no key or value", field.full_name()));
            };
            (
                Shape::Map {
                    key: self.value_kind(&key.kind()),
                },
                self.value_kind(&value.kind()),
                rule(&["map", "max_pairs"]),
                length_rule(&rule, &["map", "values"]),
                length_rule(&rule, &["map", "keys"]),
            )
        } else if field.is_list() {
            (
                Shape::Repeated,
                self.value_kind(&field.kind()),
                rule(&["repeated", "max_items"]),
                length_rule(&rule, &["repeated", "items"]),
                Length::default(),
            )
        } else {
            (
                Shape::Singular,
                self.value_kind(&field.kind()),
                None,
                length_rule(&rule, &[]),
                Length::default(),
            )
        };
        Ok(FieldPlan {
            number: field.number(),
            name: field.name().to_owned(),
            json_name: field.json_name().to_owned(),
            shape,
            value,
            max_count,
            length,
            key_length,
        })
    }
}

/// The `(buf.validate.field)` rules of `field`, when it has any.
fn field_rules(field: &FieldDescriptor) -> Option<DynamicMessage> {
    let extension = field
        .parent_pool()
        .get_extension_by_name("buf.validate.field")?;
    let options = field.options();
    if !options.has_extension(&extension) {
        return None;
    }
    match options.get_extension(&extension).into_owned() {
        Value::Message(rules) => Some(rules),
        _ => None,
    }
}

/// The number at `path` (field names) inside `rules`, when it is set.
fn rule_u64(rules: &DynamicMessage, path: &[&str]) -> Option<u64> {
    let (last, parents) = path.split_last()?;
    let mut message = rules.clone();
    for name in parents {
        if !message.has_field_by_name(name) {
            return None;
        }
        message = match message.get_field_by_name(name)?.into_owned() {
            Value::Message(inner) => inner,
            _ => return None,
        };
    }
    if !message.has_field_by_name(last) {
        return None;
    }
    message.get_field_by_name(last)?.as_u64()
}

/// A string's or bytes' length rules under `prefix` (`[]` for the field itself).
fn length_rule(rule: &dyn Fn(&[&str]) -> Option<u64>, prefix: &[&str]) -> Length {
    let at = |kind: &str, name: &str| {
        let mut path: Vec<&str> = prefix.to_vec();
        path.extend([kind, name]);
        rule(&path)
    };
    Length {
        max_chars: at("string", "max_len"),
        max_bytes: at("string", "max_bytes").or_else(|| at("bytes", "max_len")),
    }
}

/// A place in a request, rendered only when a violation names it: `modifications`,
/// `modifications.texts["title"]`, `modifications.gradients["g"].stops[3]`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, u64),
    Key(&'a Path<'a>, &'a str),
}

impl Path<'_> {
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Field(parent, name) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Path::Index(parent, index) => {
                parent.write(out);
                let _ = write!(out, "[{index}]");
            }
            Path::Key(parent, key) => {
                parent.write(out);
                // Debug-quoting escapes quotes and control characters of hostile keys; a
                // key is within its bound here (a longer one is not shown).
                let _ = write!(out, "[{key:?}]");
            }
        }
    }
}

/// What a scan found: bound violations and unknown fields, the first few of each named.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    violations: Vec<FieldViolation>,
    violations_total: usize,
    unknown: Vec<FieldViolation>,
    unknown_total: usize,
}

impl Findings {
    pub(crate) fn violation(&mut self, path: &Path<'_>, description: impl FnOnce() -> String) {
        self.violations_total += 1;
        if self.violations.len() < MAX_VIOLATIONS_REPORTED {
            self.violations.push(FieldViolation {
                field: path.render(),
                description: description(),
            });
        }
    }

    /// A field the contract does not have: by its number on the wire (`#7`), by its name
    /// in JSON.
    pub(crate) fn unknown(&mut self, path: &Path<'_>, field: Unknown<'_>, message: &str) {
        self.unknown_total += 1;
        if self.unknown.len() < MAX_UNKNOWN_FIELDS_REPORTED {
            let (name, description) = match field {
                Unknown::Number(number) => (
                    format!("#{number}"),
                    format!("unknown field number {number} in {message}"),
                ),
                Unknown::Name(name) => {
                    // The name as the caller wrote it, cut: it may be megabytes.
                    let shown: String = name.chars().take(MAX_UNKNOWN_NAME_CHARS).collect();
                    let description = format!("unknown field {shown:?} in {message}");
                    (shown, description)
                }
            };
            self.unknown.push(FieldViolation {
                field: Path::Field(path, &name).render(),
                description,
            });
        }
    }

    /// True when nothing was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.violations_total == 0 && self.unknown_total == 0
    }

    /// A whole count of `count` against its bound (a packed list's, counted at once).
    pub(crate) fn count(&mut self, path: &Path<'_>, plan: &FieldPlan, count: u64) {
        if let Some(max) = plan.max_count.filter(|max| count > *max) {
            let what = plan.counted();
            self.violation(path, || format!("at most {max} {what}, got {count}"));
        }
    }

    /// A count growing by one to `count`, reported as soon as it passes its bound; true
    /// then, and the scan stops: what follows is not read.
    pub(crate) fn over_count(&mut self, path: &Path<'_>, plan: &FieldPlan, count: u64) -> bool {
        match plan.max_count {
            Some(max) if count > max => {
                let what = plan.counted();
                self.violation(path, || format!("at most {max} {what}, got more"));
                true
            }
            _ => false,
        }
    }

    /// A string (`text`, when it is UTF-8) or bytes value of `bytes` bytes against `length`,
    /// a string with [`LENGTH_SLACK`].
    pub(crate) fn length(
        &mut self,
        path: &Path<'_>,
        length: Length,
        bytes: u64,
        text: Option<&str>,
        what: &str,
    ) {
        if let Some(max) = length.max_bytes {
            let most = match text {
                Some(_) => max.saturating_mul(LENGTH_SLACK),
                None => max,
            };
            if bytes > most {
                self.violation(path, || {
                    format!("{what} of at most {max} bytes, got {bytes}")
                });
                return;
            }
        }
        if let (Some(max), Some(text)) = (length.max_chars, text) {
            let most = max.saturating_mul(LENGTH_SLACK);
            // A character is at least one byte: only a value longer in bytes is counted.
            if bytes > most {
                let chars = text.chars().count() as u64;
                if chars > most {
                    self.violation(path, || {
                        format!("{what} of at most {max} characters, got {chars}")
                    });
                }
            }
        }
    }

    /// The refusal these findings make, if any: unknown fields first (a field the caller
    /// believes it sent), then the bounds.
    pub(crate) fn into_result(self) -> Result<(), ServiceError> {
        if self.unknown_total > 0 {
            let mut message = format!(
                "the request has fields this service does not know: {}",
                names(&self.unknown)
            );
            let unnamed = self.unknown_total - self.unknown.len();
            if unnamed > 0 {
                let _ = write!(message, " and {unnamed} more");
            }
            return Err(ServiceError::invalid_argument(
                Reason::UnknownFields,
                message,
                self.unknown,
            ));
        }
        if self.violations_total > 0 {
            let mut message = match self.violations.as_slice() {
                [only] if self.violations_total == 1 => {
                    format!("{}: {}", only.field, only.description)
                }
                _ => format!(
                    "{} fields over the contract's bounds: {}",
                    self.violations_total,
                    names(&self.violations)
                ),
            };
            let unnamed = self.violations_total - self.violations.len();
            if unnamed > 0 {
                let _ = write!(message, " and {unnamed} more");
            }
            return Err(ServiceError::invalid_argument(
                Reason::RequestInvalid,
                message,
                self.violations,
            ));
        }
        Ok(())
    }
}

fn names(violations: &[FieldViolation]) -> String {
    violations
        .iter()
        .map(|v| v.field.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
