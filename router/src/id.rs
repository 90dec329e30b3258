//! Document id to shard (SHARDING.md §1 and §2).
//!
//! `hash(s) = xxh64(utf8(lowercase(s)), seed 0) % 2^20`. An id whose text after its last `$`
//! (a `$` in the first position does not count) is `@N` names shard `N`; an empty tail means
//! "placed by content"; any other tail is hashed instead of the whole id.
//!
//! The parser is total: every byte string gives a [`Placement`] or an [`IdError`]. ASCII ids
//! are lower-cased without touching the heap, through a stack buffer in one pass that also
//! detects non-ASCII text (which takes `str::to_lowercase`).

use std::fmt;

use xxhash_rust::xxh64::{Xxh64, xxh64};

use crate::error::IdError;
use crate::ids::{SHARD_COUNT, ShardId};
use crate::limits::ID_BYTES_MAX;

/// Strings up to this many bytes (most ids) are lower-cased through a stack buffer this
/// small, so clearing it costs next to nothing; longer ids use an `ID_BYTES_MAX` buffer.
const SHORT_BYTES: usize = 32;

/// Bytes lower-cased per step when hashing an ASCII string longer than any id (a content
/// value); such strings are streamed through xxh64.
const LOWER_CHUNK_BYTES: usize = 256;

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
    if bytes.len() <= SHORT_BYTES {
        let mut buf = [0u8; SHORT_BYTES];
        if let Some(lowered) = lower_ascii(&mut buf, bytes) {
            return xxh64(lowered, 0);
        }
        return xxh64(s.to_lowercase().as_bytes(), 0);
    }
    if bytes.len() <= ID_BYTES_MAX {
        let mut buf = [0u8; ID_BYTES_MAX];
        if let Some(lowered) = lower_ascii(&mut buf, bytes) {
            return xxh64(lowered, 0);
        }
        return xxh64(s.to_lowercase().as_bytes(), 0);
    }
    // Longer than any id (a content value): stream in chunks.
    if !bytes.is_ascii() {
        return xxh64(s.to_lowercase().as_bytes(), 0);
    }
    let mut buf = [0u8; LOWER_CHUNK_BYTES];
    let mut state = Xxh64::new(0);
    for chunk in bytes.chunks(LOWER_CHUNK_BYTES) {
        match lower_ascii(&mut buf, chunk) {
            Some(lowered) => state.update(lowered),
            // Unreachable after the `is_ascii` check; correct regardless.
            None => return xxh64(s.to_lowercase().as_bytes(), 0),
        }
    }
    state.digest()
}

/// Copies `src` ASCII-lower-cased into the front of `buf` and returns that part, or `None`
/// when `src` is longer than `buf` or not all ASCII. One pass the compiler vectorises: the
/// non-ASCII check rides along with the copy.
fn lower_ascii<'b, const N: usize>(buf: &'b mut [u8; N], src: &[u8]) -> Option<&'b [u8]> {
    if src.len() > N {
        return None;
    }
    let mut any_high = 0u8;
    for (dst, &b) in buf.iter_mut().zip(src) {
        any_high |= b;
        *dst = b.to_ascii_lowercase();
    }
    if any_high.is_ascii() { Some(buf.split_at(src.len()).0) } else { None }
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
    let pos = last_dollar(rest)?;
    // `pos + 2` is just past a `$` byte, a character boundary.
    id.get(pos + 2..)
}

/// The offset of the last `$` in `bytes`, eight bytes at a time (a byte loop with an early
/// exit does not vectorise, and long ids would pay a cycle or more per byte).
fn last_dollar(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const DOLLARS: u64 = u64::from_ne_bytes([b'$'; 8]);
    let mut end = bytes.len();
    while end >= 8 {
        let start = end - 8;
        let word = bytes.get(start..end)?;
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        // Zero bytes of `x` are the `$` bytes of `word`; the expression is non-zero exactly
        // when `x` has a zero byte.
        let x = u64::from_ne_bytes(eight) ^ DOLLARS;
        if x.wrapping_sub(ONES) & !x & HIGHS != 0 {
            return word.iter().rposition(|&b| b == b'$').map(|p| start + p);
        }
        end = start;
    }
    bytes.get(..end)?.iter().rposition(|&b| b == b'$')
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
            "X".repeat(SHORT_BYTES),
            "x".repeat(SHORT_BYTES + 1),
            format!("{}É", "X".repeat(SHORT_BYTES + 1)),
            "Y".repeat(ID_BYTES_MAX),
            "Y".repeat(ID_BYTES_MAX + 1),
            format!("{}É", "X".repeat(ID_BYTES_MAX + 1)),
            "Ab".repeat(LOWER_CHUNK_BYTES + 3),
            "ÀÉÎõü/ΣΑΣ".to_owned(),
            "İstanbul".to_owned(),
        ];
        for s in &inputs {
            assert_eq!(hash(s), reference(s), "{s}");
            assert_eq!(hash(s), hash(&s.to_lowercase()), "{s}");
        }
        assert_eq!(doc_key("Orders/1-A").as_str(), "orders/1-a");
        // The word-at-a-time `$` search finds the last one at every position.
        for len in 1..40 {
            for at in 0..len {
                let mut id = vec![b'a'; len];
                id[at] = b'$';
                if at + 1 < len {
                    id[at + 1] = b'$';
                }
                let expected = id.iter().rposition(|&b| b == b'$');
                assert_eq!(last_dollar(&id), expected, "len {len} at {at}");
            }
            assert_eq!(last_dollar(&vec![b'a'; len]), None);
        }
        assert_eq!(doc_key("ÀB").as_str(), "àb");
    }
}
