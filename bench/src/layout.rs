//! Where Tessera keeps each customer's documents, so the cross-fragment transfer can pick two
//! documents on fragments of *different executors* (cores), for both targets alike.
//!
//! A document `d/<k>$customers/<c>` lives on shard `hash("customers/<c>")` (SHARDING.md §1-2:
//! the text after the last `$`, lower-cased, xxh64 with seed 0, modulo 2^20). Which fragment
//! holds that shard and which executor owns the fragment comes from the node's
//! `SHOW FRAGMENTS` (columns `fragment`, `shards` as `[start, end)`, `executor`), or, when no
//! Tessera target is measured, from the node's default layout on this machine
//! ([`Layout::even`]: `n` equal ranges, fragment `i` on executor `i mod executors`). The bench
//! computes the placement itself: it links no Tessera crate, only the published hash.

use crate::error::LayoutError;
use crate::limits::DOCS_PER_CUSTOMER;
use crate::ops::customer_name;

/// Logical shards (SHARDING.md: `SHARD_COUNT = 1 << 20`).
pub const SHARD_COUNT: u32 = 1 << 20;

/// The shard of a placement key (`hash` of SHARDING.md §1).
pub fn shard_of_key(key: &str) -> u32 {
    let h = xxhash_rust::xxh64::xxh64(key.to_lowercase().as_bytes(), 0);
    // The remainder is below 2^20, so it fits.
    u32::try_from(h % u64::from(SHARD_COUNT)).unwrap_or(0)
}

/// The shard every document of customer `c` lives on (its id ends with `$customers/<c>`).
pub fn shard_of_customer(c: u64) -> u32 {
    shard_of_key(&customer_name(c))
}

/// One fragment: its shard range and its executor's name as `SHOW FRAGMENTS` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// First shard.
    pub start: u32,
    /// One past the last shard.
    pub end: u32,
    /// Owning executor.
    pub executor: String,
}

/// A node's fragments in shard order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    spans: Vec<Span>,
}

impl Layout {
    /// `fragments` equal ranges (bounds `i * 2^20 / fragments`), fragment `i` on executor
    /// `i mod executors`: what `tessera serve` creates by default. Both counts at least 1.
    pub fn even(fragments: u32, executors: u32) -> Layout {
        let (n, e) = (u64::from(fragments.max(1)), executors.max(1));
        let bound = |i: u64| u32::try_from(i * u64::from(SHARD_COUNT) / n).unwrap_or(SHARD_COUNT);
        let spans = (0..n)
            .map(|i| Span {
                start: bound(i),
                end: bound(i + 1),
                executor: (u32::try_from(i).unwrap_or(0) % e).to_string(),
            })
            .collect();
        Layout { spans }
    }

    /// From `SHOW FRAGMENTS` rows as `(shards, executor)` texts, e.g. `("[0, 131072)", "0")`.
    /// The ranges must cover `0 .. 2^20` in order, without gaps.
    pub fn from_rows(rows: &[(String, String)]) -> Result<Layout, LayoutError> {
        let mut spans = Vec::with_capacity(rows.len());
        let mut next = 0u32;
        for (shards, executor) in rows {
            let bad = || LayoutError::Range { text: shards.clone() };
            let inner =
                shards.strip_prefix('[').and_then(|s| s.strip_suffix(')')).ok_or_else(bad)?;
            let (a, b) = inner.split_once(',').ok_or_else(bad)?;
            let start: u32 = a.trim().parse().map_err(|_| bad())?;
            let end: u32 = b.trim().parse().map_err(|_| bad())?;
            if start != next || end <= start || end > SHARD_COUNT {
                return Err(LayoutError::Coverage { text: shards.clone(), expected_start: next });
            }
            next = end;
            spans.push(Span { start, end, executor: executor.clone() });
        }
        if next != SHARD_COUNT {
            return Err(LayoutError::Coverage { text: "(end)".into(), expected_start: next });
        }
        Ok(Layout { spans })
    }

    /// The fragment index and span holding `shard`.
    pub fn span_of(&self, shard: u32) -> Option<(usize, &Span)> {
        let i = self.spans.partition_point(|s| s.end <= shard);
        self.spans.get(i).filter(|s| s.start <= shard).map(|s| (i, s))
    }

    /// The fragments, in shard order.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }
}

/// The customers with a full group of documents (`DOCS_PER_CUSTOMER` loaded ones), grouped
/// by the executor owning their shard, with each customer's fragment index.
#[derive(Clone, Debug)]
pub struct ExecutorGroups {
    /// Executor name and its customers as `(customer, fragment index)`, sorted by executor.
    groups: Vec<(String, Vec<(u64, usize)>)>,
}

impl ExecutorGroups {
    /// Groups the full customers of a data set of `docs` documents.
    pub fn new(layout: &Layout, docs: u64) -> ExecutorGroups {
        let mut groups: Vec<(String, Vec<(u64, usize)>)> = Vec::new();
        for c in 0..docs / DOCS_PER_CUSTOMER {
            let Some((fragment, span)) = layout.span_of(shard_of_customer(c)) else { continue };
            match groups.iter_mut().find(|(e, _)| *e == span.executor) {
                Some((_, members)) => members.push((c, fragment)),
                None => groups.push((span.executor.clone(), vec![(c, fragment)])),
            }
        }
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        ExecutorGroups { groups }
    }

    /// Executors that own at least one full customer.
    pub fn executors(&self) -> usize {
        self.groups.len()
    }

    /// The customers (with fragment index) of the `i`-th executor.
    pub fn members(&self, i: usize) -> &[(u64, usize)] {
        self.groups.get(i).map_or(&[], |(_, m)| m.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_hash_matches_the_sharding_vectors() {
        // SHARDING.md §1's vectors, and lower-casing before hashing.
        assert_eq!(shard_of_key("orders/1-A"), 151326);
        assert_eq!(shard_of_key("customers/1-A"), 982173);
        assert_eq!(shard_of_key("customers/6-A"), 16312);
        assert_eq!(shard_of_key("users/1"), 1005385);
        assert_eq!(shard_of_key("CUSTOMERS/1-a"), 982173);
    }

    #[test]
    fn unit_even_layout_matches_show_fragments() {
        // The default layout equals the one parsed from the node's rows, and lookups land in
        // the right span at both edges.
        let even = Layout::even(8, 2);
        let rows: Vec<(String, String)> = (0..8u32)
            .map(|i| (format!("[{}, {})", i * 131072, (i + 1) * 131072), (i % 2).to_string()))
            .collect();
        assert_eq!(Layout::from_rows(&rows).unwrap(), even);
        assert_eq!(even.span_of(0).unwrap().0, 0);
        assert_eq!(even.span_of(131071).unwrap().0, 0);
        assert_eq!(even.span_of(131072).unwrap().0, 1);
        assert_eq!(even.span_of(131072).unwrap().1.executor, "1");
        assert_eq!(even.span_of(SHARD_COUNT - 1).unwrap().0, 7);
        assert!(even.span_of(SHARD_COUNT).is_none());
        // Uneven division keeps every shard covered.
        let odd = Layout::even(3, 2);
        assert_eq!(odd.spans().last().unwrap().end, SHARD_COUNT);
    }

    #[test]
    fn unit_bad_rows_are_refused() {
        // Unparsable ranges, gaps and a short map are errors, not silent misplacement.
        let row = |s: &str| vec![(s.to_owned(), "0".to_owned())];
        assert!(matches!(Layout::from_rows(&row("0, 1048576")), Err(LayoutError::Range { .. })));
        assert!(matches!(
            Layout::from_rows(&row("[1, 1048576)")),
            Err(LayoutError::Coverage { .. })
        ));
        assert!(matches!(Layout::from_rows(&row("[0, 5)")), Err(LayoutError::Coverage { .. })));
        assert!(Layout::from_rows(&row("[0, 1048576)")).is_ok());
    }

    #[test]
    fn unit_groups_split_customers_by_executor() {
        // With the default layout both executors get customers, and every member's shard is
        // really on its group's executor.
        let layout = Layout::even(8, 2);
        let groups = ExecutorGroups::new(&layout, 8_000);
        assert_eq!(groups.executors(), 2);
        let mut total = 0;
        for i in 0..groups.executors() {
            for &(c, f) in groups.members(i) {
                let (fragment, span) = layout.span_of(shard_of_customer(c)).unwrap();
                assert_eq!(fragment, f);
                assert_eq!(span.executor, i.to_string());
                total += 1;
            }
        }
        assert_eq!(total, 1_000);
    }
}
