//! Checks per-row filter evaluation allocates nothing for scalar comparisons: fields are read
//! in place through `DocValue` and literal strings are borrowed from the plan. A counting
//! global allocator (per thread, so other test threads do not interfere) measures it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use query::Statement;
use query::expr::{Row, matches};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` unchanged; the counter is a const-initialised
// thread-local `Cell`, which neither allocates nor re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation does).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// Checks a filter of scalar comparisons, IN, BETWEEN, LIKE, IS NULL and boolean logic
// evaluates over 1,000 documents without one allocation.
#[test]
fn scalar_filter_is_allocation_free() {
    let sql = "SELECT * FROM c WHERE (age >= 18 AND age < 65.5 OR name = 'Ann') \
               AND address.city IN ('Oslo', 'Rome') AND NOT tag LIKE 'x%' \
               AND score BETWEEN 1 AND 10 AND missing IS NULL AND id() <> 'z'";
    let Statement::Select(select) = query::parse(sql).expect("plans").remove(0) else { panic!() };
    let filter = select.filter.as_ref().expect("filter");
    let docs: Vec<serde_json::Value> = (0..1000)
        .map(|i| {
            serde_json::json!({
                "age": i % 90, "name": if i % 7 == 0 { "Ann" } else { "Bob" },
                "address": {"city": if i % 2 == 0 { "Oslo" } else { "Paris" }},
                "tag": format!("t{i}"), "score": (i % 12) as f64 / 1.5,
            })
        })
        .collect();
    let ids: Vec<String> = (0..1000).map(|i| format!("c/{i}")).collect();
    let before = allocations();
    let mut hits = 0;
    for (doc, id) in docs.iter().zip(&ids) {
        let row = Row { id, doc: Some(doc), excluded: None };
        if matches(filter, &row).expect("evaluates") {
            hits += 1;
        }
    }
    let after = allocations();
    assert!(hits > 0, "the filter matches some documents");
    assert_eq!(after - before, 0, "allocations during evaluation");
}
