//! Reading the replies of XREADGROUP, XAUTOCLAIM and XRANGE (nested arrays of values) into
//! entries.

use deadpool_redis::redis::Value;

/// A string reply's text.
pub(super) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// The entries of an XREADGROUP reply (`[[stream, [entry…]]…]`, or a map of stream to
/// entries in RESP3).
pub(super) fn collect_entries(reply: &Value, entries: &mut Vec<(String, Vec<(String, String)>)>) {
    match reply {
        Value::Array(streams) => {
            for stream in streams {
                if let Value::Array(parts) = stream {
                    if let Some(list) = parts.get(1) {
                        collect_entry_list(list, entries);
                    }
                }
            }
        }
        Value::Map(streams) => {
            for (_, list) in streams {
                collect_entry_list(list, entries);
            }
        }
        _ => {}
    }
}

/// Entries `[[id, [field, value…]]…]`; an entry deleted meanwhile (no fields) is skipped.
pub(super) fn collect_entry_list(list: &Value, entries: &mut Vec<(String, Vec<(String, String)>)>) {
    let Value::Array(list) = list else {
        return;
    };
    for entry in list {
        let Value::Array(parts) = entry else {
            continue;
        };
        let (Some(id), Some(Value::Array(values))) = (parts.first().and_then(text), parts.get(1))
        else {
            continue;
        };
        let fields = values
            .chunks(2)
            .filter_map(|pair| Some((text(pair.first()?)?, text(pair.get(1)?)?)))
            .collect();
        entries.push((id, fields));
    }
}
