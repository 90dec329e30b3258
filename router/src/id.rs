//! Document id to shard (SHARDING.md §1 and §2).
//!
//! `hash(s) = xxh64(utf8(lowercase(s)), seed 0) % 2^20`. An id whose text after its last `$`
//! (a `$` in the first position does not count) is `@N` names shard `N`; an empty tail means
//! "placed by content"; any other tail is hashed instead of the whole id.
//!
//! The parser is total: every byte string gives a [`Placement`] or an [`IdError`]. ASCII ids
//! are lower-cased without touching the heap: an id with no upper-case letter is hashed in
//! place, any other through a stack buffer.

use std::fmt;

use xxhash_rust::xxh64::{Xxh64, xxh64};

use crate::error::IdError;
use crate::ids::{SHARD_COUNT, ShardId};
use crate::limits::ID_BYTES_MAX;

/// Bytes lower-cased per step when hashing an ASCII string with upper-case letters. Ids
/// (at most [`ID_BYTES_MAX`]) fit in one step; longer strings (content values) stream.
const LOWER_CHUNK_BYTES: usize = 128;

/// Where an id places its document.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Placement {
    /// The hash of the whole id, or of the text after its last `$`.
    Hashed(ShardId),
    /// Named explicitly by a `$@N` suffix.
    Explicit(ShardId),
    /// The id ends with `$`: the shard comes from the document's content (SHARDING.md §3).
    /// Valid only when inserting a new document into a content-sharded collection; see
    /// [`crate::assign`].
    Content,
}

impl Placement {
    /// The shard, unless the placement depends on content.
    pub const fn shard(self) -> Option<ShardId> {
        match self {
            Placement::Hashed(shard) | Placement::Explicit(shard) => Some(shard),
            Placement::Content => None,
        }
    }

    /// The shard, or [`IdError::NeedsContent`] for a trailing-`$` id: for callers (lookups,
    /// updates, deletes) where content-based assignment does not apply.
    pub const fn fixed(self) -> Result<ShardId, IdError> {
        match self.shard() {
            Some(shard) => Ok(shard),
            None => Err(IdError::NeedsContent),
        }
    }
}

/// `hash(s)` of SHARDING.md §1: xxh64 (seed 0) of the UTF-8 of `s` lower-cased by Unicode
/// default rules (`str::to_lowercase`), modulo 2^20. Allocation-free for ASCII `s`.
pub fn hash(s: &str) -> ShardId {
    ShardId::from_u64_mod(hash64_lower(s))
}

fn hash64_lower(s: &str) -> u64 {
    let bytes = s.as_bytes();
    if !bytes.is_ascii() {
        return xxh64(s.to_lowercase().as_bytes(), 0);
    }
    if !bytes.iter().any(u8::is_ascii_uppercase) {
        return xxh64(bytes, 0);
    }
    let mut buf = [0u8; LOWER_CHUNK_BYTES];
    if bytes.len() <= LOWER_CHUNK_BYTES {
        let lowered = lower_into(&mut buf, bytes);
        return xxh64(lowered, 0);
    }
    let mut state = Xxh64::new(0);
    for chunk in bytes.chunks(LOWER_CHUNK_BYTES) {
        state.update(lower_into(&mut buf, chunk));
    }
    state.digest()
}

/// Copies `src` lower-cased (ASCII) into the front of `buf` and returns that part.
/// `src.len() <= buf.len()` by every caller; `zip` keeps this total regardless.
fn lower_into<'b>(buf: &'b mut [u8; LOWER_CHUNK_BYTES], src: &[u8]) -> &'b [u8] {
    debug_assert!(src.len() <= buf.len());
    for (dst, b) in buf.iter_mut().zip(src) {
        *dst = b.to_ascii_lowercase();
    }
    let n = src.len().min(LOWER_CHUNK_BYTES);
    buf.split_at(n).0
}

/// The placement of document id `id` (SHARDING.md §2).
///
/// Errors: empty, longer than [`ID_BYTES_MAX`] bytes, or a malformed `$@N` suffix. A trailing
/// `$` is not an error here but [`Placement::Content`]: the caller decides whether content
/// assignment applies ([`Placement::fixed`] refuses it).
pub fn shard_of(id: &str) -> Result<Placement, IdError> {
    check_len(id.len())?;
    place(id)
}

/// [`shard_of`] over raw bytes, for the wire and the fuzzer: invalid UTF-8 is
/// [`IdError::InvalidUtf8`].
pub fn shard_of_bytes(id: &[u8]) -> Result<Placement, IdError> {
    check_len(id.len())?;
    match std::str::from_utf8(id) {
        Ok(text) => place(text),
        Err(e) => Err(IdError::InvalidUtf8 { valid_up_to: e.valid_up_to() }),
    }
}

fn check_len(bytes: usize) -> Result<(), IdError> {
    if bytes == 0 {
        return Err(IdError::Empty);
    }
    if bytes > ID_BYTES_MAX {
        return Err(IdError::TooLong { bytes, max: ID_BYTES_MAX });
    }
    Ok(())
}

/// The text after the last `$` that is not the id's first byte, if there is one. A `$` is
/// ASCII, so a `$` byte after offset 0 is also after the first character.
pub(crate) fn tail(id: &str) -> Option<&str> {
    let bytes = id.as_bytes();
    let rest = bytes.get(1..)?;
    let pos = rest.iter().rposition(|&b| b == b'$')?;
    // `pos + 2` is just past a `$` byte, a character boundary.
    id.get(pos + 2..)
}

/// The placement of `id` without the emptiness and length checks: for routing a literal that
/// may equal a stored id only after lower-casing (which can shorten text).
pub(crate) fn place_unchecked(id: &str) -> Result<Placement, IdError> {
    place(id)
}

fn place(id: &str) -> Result<Placement, IdError> {
    match tail(id) {
        None => Ok(Placement::Hashed(hash(id))),
        Some("") => Ok(Placement::Content),
        Some(tail) => match tail.strip_prefix('@') {
            Some(digits) => parse_shard_number(digits).map(Placement::Explicit),
            None => Ok(Placement::Hashed(hash(tail))),
        },
    }
}

/// `digits` after `$@`: one or more ASCII decimal digits (leading zeros allowed) with value
/// below `SHARD_COUNT`.
fn parse_shard_number(digits: &str) -> Result<ShardId, IdError> {
    if digits.is_empty() {
        return Err(IdError::ShardSuffixEmpty);
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(IdError::ShardSuffixNotDecimal { suffix: digits.to_owned() });
    }
    let mut value: u32 = 0;
    for b in digits.bytes() {
        value = value * 10 + u32::from(b - b'0');
        // Leading zeros keep `value` small; once it reaches SHARD_COUNT it can only grow, and
        // stopping here keeps the arithmetic far from overflow.
        if value >= SHARD_COUNT {
            return Err(IdError::ShardSuffixTooLarge { suffix: digits.to_owned() });
        }
    }
    ShardId::new(value).ok_or_else(|| IdError::ShardSuffixTooLarge { suffix: digits.to_owned() })
}

/// The key a document is indexed under: its id lower-cased by the same rule as [`hash`].
/// Ids that differ only in case are the same document (SHARDING.md §1); storage keeps the
/// case first written for display and uses this key for lookups.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct DocKey(String);

impl DocKey {
    /// The key text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for DocKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for DocKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The index key of document id `id` (see [`DocKey`]). Does not validate the id; callers
/// validate with [`shard_of`] first.
pub fn doc_key(id: &str) -> DocKey {
    if id.is_ascii() { DocKey(id.to_ascii_lowercase()) } else { DocKey(id.to_lowercase()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(n: u32) -> ShardId {
        ShardId::new(n).expect("test shard in range")
    }

    // Checks every hash vector of SHARDING.md §1, through `hash` and through `shard_of`.
    #[test]
    fn hash_vectors() {
        let vectors = [
            ("orders/1-A", 151_326),
            ("customers/1-A", 982_173),
            ("customers/6-A", 16_312),
            ("orders/2-A", 831_716),
            ("users/1", 1_005_385),
        ];
        for (input, expected) in vectors {
            assert_eq!(hash(input), shard(expected), "hash({input})");
            assert_eq!(shard_of(input), Ok(Placement::Hashed(shard(expected))), "{input}");
        }
    }

    // Checks every id vector of SHARDING.md §2.
    #[test]
    fn id_vectors() {
        assert_eq!(shard_of("orders/1-A"), Ok(Placement::Hashed(shard(151_326))));
        assert_eq!(shard_of("orders/2-A$customers/1-A"), Ok(Placement::Hashed(shard(982_173))));
        assert_eq!(shard_of("orders/1-A$@982173"), Ok(Placement::Explicit(shard(982_173))));
        assert_eq!(shard_of("a$b$customers/1-A"), Ok(Placement::Hashed(shard(982_173))));
        assert!(matches!(
            shard_of("orders/1-A$@1048576"),
            Err(IdError::ShardSuffixTooLarge { .. })
        ));
        assert_eq!(shard_of("$@5"), Ok(Placement::Hashed(shard(434_747))));
        assert_eq!(shard_of("$@5"), Ok(Placement::Hashed(hash("$@5"))));
    }

    // Checks each malformed `$@` suffix named in §2 gets its own typed error.
    #[test]
    fn shard_suffix_errors() {
        assert_eq!(shard_of("x$@"), Err(IdError::ShardSuffixEmpty));
        assert!(matches!(shard_of("x$@12a"), Err(IdError::ShardSuffixNotDecimal { .. })));
        assert!(matches!(shard_of("x$@-1"), Err(IdError::ShardSuffixNotDecimal { .. })));
        assert!(matches!(shard_of("x$@+1"), Err(IdError::ShardSuffixNotDecimal { .. })));
        assert!(matches!(shard_of("x$@ 1"), Err(IdError::ShardSuffixNotDecimal { .. })));
        assert!(matches!(shard_of("x$@1048576"), Err(IdError::ShardSuffixTooLarge { .. })));
        assert!(matches!(
            shard_of("x$@99999999999999999999999999"),
            Err(IdError::ShardSuffixTooLarge { .. })
        ));
        assert_eq!(shard_of("x$@1048575"), Ok(Placement::Explicit(ShardId::MAX)));
        assert_eq!(shard_of("x$@0000000000000000000000007"), Ok(Placement::Explicit(shard(7))));
        assert_eq!(shard_of("x$@0"), Ok(Placement::Explicit(ShardId::MIN)));
    }

    // Checks the trailing `$` is Content, a leading `$` is ordinary, and `fixed` refuses Content.
    #[test]
    fn dollar_positions() {
        assert_eq!(shard_of("orders/1-A$"), Ok(Placement::Content));
        assert_eq!(shard_of("orders/1-A$").and_then(Placement::fixed), Err(IdError::NeedsContent));
        assert_eq!(shard_of("$"), Ok(Placement::Hashed(hash("$"))));
        assert_eq!(shard_of("$$"), Ok(Placement::Content));
        assert_eq!(shard_of("$foo"), Ok(Placement::Hashed(hash("$foo"))));
        assert_eq!(shard_of("é$x"), Ok(Placement::Hashed(hash("x"))));
        assert_eq!(shard_of("a$@1$b"), Ok(Placement::Hashed(hash("b"))), "last $ wins");
    }

    // Checks the length limit, the empty id and invalid UTF-8 are typed errors.
    #[test]
    fn limits_and_encoding() {
        assert_eq!(shard_of(""), Err(IdError::Empty));
        assert_eq!(shard_of_bytes(b""), Err(IdError::Empty));
        let long = "a".repeat(ID_BYTES_MAX);
        assert!(shard_of(&long).is_ok());
        let too_long = "a".repeat(ID_BYTES_MAX + 1);
        assert_eq!(
            shard_of(&too_long),
            Err(IdError::TooLong { bytes: ID_BYTES_MAX + 1, max: ID_BYTES_MAX })
        );
        assert_eq!(shard_of_bytes(b"ab\xffc"), Err(IdError::InvalidUtf8 { valid_up_to: 2 }));
        assert_eq!(shard_of_bytes("orders/1-A".as_bytes()), shard_of("orders/1-A"));
    }

    // Checks case-insensitivity: the ASCII fast paths (no upper case, one chunk, streamed
    // chunks) and the Unicode path all agree with xxh64 of `to_lowercase`.
    #[test]
    fn lowercasing_paths_agree() {
        let reference = |s: &str| ShardId::from_u64_mod(xxh64(s.to_lowercase().as_bytes(), 0));
        let inputs = [
            "orders/1-a".to_owned(),
            "ORDERS/1-A".to_owned(),
            "X".repeat(LOWER_CHUNK_BYTES),
            "Ab".repeat(LOWER_CHUNK_BYTES + 3),
            "ÀÉÎõü/ΣΑΣ".to_owned(),
            "İstanbul".to_owned(),
        ];
        for s in &inputs {
            assert_eq!(hash(s), reference(s), "{s}");
            assert_eq!(hash(s), hash(&s.to_lowercase()), "{s}");
        }
        assert_eq!(doc_key("Orders/1-A").as_str(), "orders/1-a");
        assert_eq!(doc_key("ÀB").as_str(), "àb");
    }
}
