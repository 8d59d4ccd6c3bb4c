//! The pages of the list calls (ListTemplates, ListRenderJobs): their sizes, the bytes one
//! page may hold, and the page token. A token is the sort key of the last item a page
//! showed or examined (`v1.<ms>.<id>`, opaque to callers): a position in the caller's own
//! list and nothing else, so a forged one names nothing the caller could not list itself.

use crate::error::FieldViolation;
use uuid::Uuid;

/// Items of a page when the request says 0, and the most a request may ask for.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 50;
pub(crate) const MAX_PAGE_SIZE: usize = 100;
/// Encoded bytes of one page: a quarter of gRPC's default 4 MiB message limit, so stock
/// clients read every page. One item's own answer is bounded far below it (a template's by
/// `storage::summary`, a job's by the job limits), so a page always holds at least one.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// The page size `requested` (0: the default); a violation of `page_size` past the maximum.
pub(crate) fn page_size(requested: u32, violations: &mut Vec<FieldViolation>) -> usize {
    match requested as usize {
        0 => DEFAULT_PAGE_SIZE,
        size if size <= MAX_PAGE_SIZE => size,
        size => {
            violations.push(FieldViolation {
                field: "page_size".into(),
                description: format!("must be 0..={MAX_PAGE_SIZE}, got {size}"),
            });
            0
        }
    }
}

/// The position `token` names (none for an empty token: the first page); a violation of
/// `page_token` for a token this service did not issue.
pub(crate) fn page_position(
    token: &str,
    violations: &mut Vec<FieldViolation>,
) -> Option<(u64, Uuid)> {
    if token.is_empty() {
        return None;
    }
    let parsed = parse_page_token(token);
    if parsed.is_none() {
        violations.push(FieldViolation {
            field: "page_token".into(),
            description: "is not a token this service issued".into(),
        });
    }
    parsed
}

/// The token of the position after the item created at `created_at_ms` with `id`.
pub(crate) fn page_token(created_at_ms: u64, id: Uuid) -> String {
    format!("v1.{created_at_ms}.{id}")
}

fn parse_page_token(token: &str) -> Option<(u64, Uuid)> {
    let rest = token.strip_prefix("v1.")?;
    let (millis, id) = rest.split_once('.')?;
    Some((millis.parse().ok()?, Uuid::try_parse(id).ok()?))
}

/// What an item of `encoded_len` bytes adds to its page: a repeated field's element costs
/// its length, its length's varint and a tag byte.
fn element_bytes(encoded_len: usize) -> usize {
    encoded_len + prost::length_delimiter_len(encoded_len) + 1
}

/// The bytes of a page being filled, held to [`MAX_PAGE_BYTES`]: every list's one rule.
#[derive(Debug, Default)]
pub(crate) struct PageBytes {
    used: usize,
    items: usize,
}

impl PageBytes {
    /// Takes an item of `encoded_len` bytes when it fits; the first item always fits (a page
    /// shows at least one), so `false` means the page ends before it.
    pub(crate) fn take(&mut self, encoded_len: usize) -> bool {
        let size = element_bytes(encoded_len);
        if self.items > 0 && self.used + size > MAX_PAGE_BYTES {
            return false;
        }
        self.used += size;
        self.items += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_read_back_as_their_position_and_others_are_violations() {
        let id = Uuid::new_v4();
        let mut violations = Vec::new();
        assert_eq!(
            page_position(&page_token(42, id), &mut violations),
            Some((42, id))
        );
        assert_eq!(page_position("", &mut violations), None);
        assert!(violations.is_empty());
        for garbage in [
            "garbage",
            "v1.x.y",
            "v1.42",
            "v2.42.00000000-0000-0000-0000-000000000000",
        ] {
            assert_eq!(page_position(garbage, &mut violations), None);
        }
        assert_eq!(violations.len(), 4);
        assert!(violations.iter().all(|v| v.field == "page_token"));
        assert_eq!(page_size(0, &mut violations), DEFAULT_PAGE_SIZE);
        assert_eq!(page_size(101, &mut violations), 0);
        assert_eq!(
            violations.last().map(|v| v.field.as_str()),
            Some("page_size")
        );
    }

    #[test]
    fn a_page_takes_its_first_item_whatever_its_size_and_then_what_fits() {
        let mut page = PageBytes::default();
        assert!(page.take(MAX_PAGE_BYTES * 2), "the first item always");
        assert!(!page.take(1), "nothing after a full page");
        let mut page = PageBytes::default();
        let half = MAX_PAGE_BYTES / 2 - 8;
        assert!(page.take(half) && page.take(half));
        assert!(!page.take(half));
    }
}
