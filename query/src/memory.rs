//! What values hold in memory, for the byte bounds in [`crate::limits`] (a gathered result,
//! a stream page, collecting aggregates, a value an expression builds, a write's new
//! documents) and the node's transaction buffer.
//!
//! A value counts its own size plus the heap it owns, as serde_json (with `preserve_order`:
//! an `IndexMap` per object) and [`Datum`] allocate it. Strings and arrays count their
//! capacity. An object counts what a map grown one member at a time holds (parsing and
//! `json!` build maps so, and `with_capacity` allocates the same table), which is never less
//! than a clone holds; serde_json does not expose a map's capacity. The allocator's rounding
//! of each allocation is not counted. `tests/memory_accounting.rs` checks the count against
//! a counting allocator: never below what a parsed, cloned or built value holds, and within
//! 2× of it.
//!
//! (Before session 25 a value counted 16 bytes plus its strings and member names, which is
//! what it roughly takes archived; in memory a 1 KiB document of two members holds about
//! 1.5× that and one of many small members 3× or more, so the bounds held that much more
//! than they said.)

use std::mem::size_of;

use serde_json::Value;

use crate::types::Datum;

/// One object member as `indexmap` stores it: the key's hash, the key, the value.
const MEMBER_BYTES: usize = size_of::<u64>() + size_of::<String>() + size_of::<Value>();

/// Control bytes a hash table holds past its buckets (hashbrown's group width; 16 with SSE2,
/// the widest it uses).
const TABLE_GROUP_BYTES: usize = 16;

/// The bytes a JSON value holds in memory: its own size and its heap.
pub fn json_bytes(v: &Value) -> usize {
    size_of::<Value>() + json_heap(v)
}

/// The heap a JSON value owns.
fn json_heap(v: &Value) -> usize {
    match v {
        Value::String(s) => s.capacity(),
        Value::Array(items) => {
            items.capacity() * size_of::<Value>() + items.iter().map(json_heap).sum::<usize>()
        }
        Value::Object(m) => {
            map_heap(m.len()) + m.iter().map(|(k, v)| k.capacity() + json_heap(v)).sum::<usize>()
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

/// The heap of an `IndexMap` of `len` members built one insert at a time (or with that
/// capacity): a hash table of `usize` indices whose bucket count is the smallest power of two
/// (4 at least) whose capacity, 7/8 of the buckets from 8 up (one less below), holds `len`,
/// with a control byte per bucket; and a vector of members as long as that capacity (indexmap
/// grows its members to the table's capacity).
fn map_heap(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let capacity = |buckets: usize| if buckets < 8 { buckets - 1 } else { buckets / 8 * 7 };
    let mut buckets = 4usize;
    while capacity(buckets) < len {
        buckets = buckets.saturating_mul(2);
    }
    buckets * (size_of::<usize>() + 1) + TABLE_GROUP_BYTES + capacity(buckets) * MEMBER_BYTES
}

/// The bytes a [`Datum`] holds in memory: its own size and its heap.
pub fn datum_bytes(d: &Datum) -> usize {
    size_of::<Datum>()
        + match d {
            Datum::Text(t) => t.capacity(),
            Datum::Json(v) => json_heap(v),
            Datum::Null | Datum::Bool(_) | Datum::Int8(_) | Datum::Float8(_) => 0,
        }
}

/// The bytes a row of a plain SELECT holds ([`crate::exec::PartialRow`]): the row, its id, its
/// output values and its sort keys.
pub fn row_bytes(id: &str, values: &[Datum], keys: &[Datum]) -> usize {
    size_of::<crate::exec::PartialRow>()
        + id.len()
        + values.iter().chain(keys).map(datum_bytes).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the table sizes against hashbrown's growth: 3 members fit 4 buckets, 4 need 8,
    // 7 fit 8, 8 need 16, 14 fit 16, 15 need 32.
    #[test]
    fn unit_map_heap_follows_the_table_growth() {
        let table = |buckets: usize, capacity: usize| {
            buckets * (size_of::<usize>() + 1) + TABLE_GROUP_BYTES + capacity * MEMBER_BYTES
        };
        assert_eq!(map_heap(0), 0);
        assert_eq!(map_heap(1), table(4, 3));
        assert_eq!(map_heap(3), table(4, 3));
        assert_eq!(map_heap(4), table(8, 7));
        assert_eq!(map_heap(7), table(8, 7));
        assert_eq!(map_heap(8), table(16, 14));
        assert_eq!(map_heap(14), table(16, 14));
        assert_eq!(map_heap(15), table(32, 28));
    }
}
