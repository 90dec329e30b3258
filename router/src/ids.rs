//! Newtypes for shard and fragment positions, so no bare integer crosses a crate boundary.

use std::fmt;

/// Number of logical shards: shards are `0 .. SHARD_COUNT` (`0 ..= 1_048_575`).
pub const SHARD_COUNT: u32 = 1 << 20;

/// One logical shard. Always `< SHARD_COUNT`: the constructor checks it, there is no setter.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ShardId(u32);

impl ShardId {
    /// The lowest shard.
    pub const MIN: ShardId = ShardId(0);
    /// The highest shard.
    pub const MAX: ShardId = ShardId(SHARD_COUNT - 1);

    /// A shard from its number, or `None` when the number is `>= SHARD_COUNT`.
    pub const fn new(value: u32) -> Option<ShardId> {
        if value < SHARD_COUNT { Some(ShardId(value)) } else { None }
    }

    /// A shard from any `u64`, reduced modulo `SHARD_COUNT` (the hash and `numeric()` rules).
    pub const fn from_u64_mod(value: u64) -> ShardId {
        // The remainder is < 2^20, so it fits in u32 exactly.
        #[allow(clippy::cast_possible_truncation)]
        ShardId((value % SHARD_COUNT as u64) as u32)
    }

    /// The shard number, `< SHARD_COUNT`.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A half-open range of shards `[start, end)`, with `start < end <= SHARD_COUNT`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ShardRange {
    start: u32,
    end: u32,
}

impl ShardRange {
    /// Every shard.
    pub const ALL: ShardRange = ShardRange { start: 0, end: SHARD_COUNT };

    /// `[start, end)`, or `None` unless `start < end <= SHARD_COUNT`.
    pub const fn new(start: u32, end: u32) -> Option<ShardRange> {
        if start < end && end <= SHARD_COUNT { Some(ShardRange { start, end }) } else { None }
    }

    /// The range holding exactly one shard.
    pub const fn single(shard: ShardId) -> ShardRange {
        ShardRange { start: shard.0, end: shard.0 + 1 }
    }

    /// First shard in the range.
    pub const fn start(self) -> u32 {
        self.start
    }

    /// One past the last shard in the range.
    pub const fn end(self) -> u32 {
        self.end
    }

    /// Number of shards in the range (never zero).
    pub const fn len(self) -> u32 {
        self.end - self.start
    }

    /// Always false: an empty range cannot be constructed. Present for clippy's `len` rule.
    pub const fn is_empty(self) -> bool {
        false
    }

    /// Whether `shard` lies in the range.
    pub const fn contains(self, shard: ShardId) -> bool {
        self.start <= shard.0 && shard.0 < self.end
    }

    /// Whether the two ranges share at least one shard.
    pub const fn overlaps(self, other: ShardRange) -> bool {
        self.start < other.end && other.start < self.end
    }
}

impl fmt::Display for ShardRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

/// A fragment's name: `$0`, `$1`, … (see SHARDING.md, "Terms").
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FragmentId(u32);

impl FragmentId {
    /// The fragment with this number.
    pub const fn new(value: u32) -> FragmentId {
        FragmentId(value)
    }

    /// The fragment's number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for FragmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the constructors refuse exactly the out-of-contract values.
    #[test]
    fn constructors_enforce_bounds() {
        assert_eq!(ShardId::new(SHARD_COUNT - 1), Some(ShardId::MAX));
        assert_eq!(ShardId::new(SHARD_COUNT), None);
        assert_eq!(ShardId::from_u64_mod(u64::from(SHARD_COUNT) + 5).get(), 5);
        assert!(ShardRange::new(3, 3).is_none());
        assert!(ShardRange::new(0, SHARD_COUNT + 1).is_none());
        let r = ShardRange::new(10, 20).expect("valid range");
        assert!(r.contains(ShardId(10)));
        assert!(!r.contains(ShardId(20)));
        assert!(r.overlaps(ShardRange::single(ShardId(19))));
        assert!(!r.overlaps(ShardRange::single(ShardId(20))));
        assert_eq!(FragmentId::new(3).to_string(), "$3");
    }
}
