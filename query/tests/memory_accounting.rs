//! Checks `query::memory` against what values really hold: a counting global allocator (per
//! thread, so other test threads do not interfere) measures the live heap bytes a value owns,
//! and its count must never be below that plus the value's own size, nor above twice it.
//! Values parsed from text, cloned, and built through the SQL functions are measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::mem::size_of;

use proptest::prelude::*;
use query::Datum;
use query::memory::{datum_bytes, json_bytes};
use serde_json::Value;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    LIVE.with(|l| l.set(l.get() + delta));
}

// SAFETY: every method forwards to `System` unchanged; the counter is a const-initialised
// thread-local `Cell`, which neither allocates nor re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation does).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: as for `alloc`: the caller's contract is `System.realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// `make`'s result and the bytes it holds: its size plus the heap still live once it returned.
fn held<T>(make: impl FnOnce() -> T) -> (T, usize) {
    let before = live();
    let value = make();
    let heap = usize::try_from(live() - before).expect("a value holds no negative heap");
    (value, size_of::<T>() + heap)
}

fn assert_counted(counted: usize, held: usize, what: &str) {
    assert!(counted >= held, "{what}: counted {counted} bytes, holds {held}");
    assert!(counted <= 2 * held, "{what}: counted {counted} bytes, holds only {held}");
}

/// Arbitrary JSON: scalars, strings, and nested arrays and objects of up to 40 members.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 256, 40, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..40).prop_map(Value::Array),
            prop::collection::vec(("[a-zA-Z_]{0,12}", inner), 0..40)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    // Checks a document parsed from JSON text, and a clone of it (vectors and maps cloned to
    // their length, not their capacity), against the heap they hold.
    #[test]
    fn prop_parsed_and_cloned_values_are_counted(v in json()) {
        let text = serde_json::to_string(&v).expect("encodes");
        let (parsed, bytes) = held(|| serde_json::from_str::<Value>(&text).expect("parses"));
        assert_counted(json_bytes(&parsed), bytes, &text);
        let (copy, bytes) = held(|| parsed.clone());
        assert_counted(json_bytes(&copy), bytes, &text);
        let (datum, bytes) = held(|| Datum::Json(parsed.clone()));
        assert_counted(datum_bytes(&datum), bytes, &text);
    }
}

// Checks the shapes the old count (16 bytes a value plus strings and names) fell short on
// most, and the common 1 KiB document: each is counted at least as held.
#[test]
fn documents_of_many_small_members_are_counted_as_held() {
    let wide = format!(
        "{{{}}}",
        (0..100).map(|i| format!("\"f{i}\": {i}")).collect::<Vec<_>>().join(", ")
    );
    let list = format!("[{}]", (0..1000).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    let kib = format!("{{\"n\": 1, \"pad\": \"{}\"}}", "x".repeat(1000));
    for text in [wide, list, kib, "{}".to_owned(), "[]".to_owned(), "\"\"".to_owned()] {
        let (v, bytes) = held(|| serde_json::from_str::<Value>(&text).expect("parses"));
        assert_counted(json_bytes(&v), bytes, &text);
    }
    let (v, _) = held(|| serde_json::from_str::<Value>(r#"{"a": 1, "b": 2, "c": 3, "d": 4}"#));
    let v = v.expect("parses");
    let old = 16 + 4 * (1 + 16);
    assert!(json_bytes(&v) > 3 * old, "{} against the old count's {old}", json_bytes(&v));
}

// Checks values the SQL functions build (jsonb_build_object, jsonb_build_array, jsonb_set)
// through a statement's evaluation, and their clones: the count covers what they hold.
#[test]
fn values_built_by_sql_functions_are_counted_as_held() {
    for sql in [
        "SELECT jsonb_build_object('a', 1, 'b', 'two', 'c', jsonb_build_array(1, 2, 3, 4, 5))",
        "SELECT jsonb_build_array('x', 'y', jsonb_build_object('k', 'v'), 3.5, true, NULL)",
        "SELECT jsonb_set('{\"a\": {\"b\": 1}}'::jsonb, '{a,c}', '[1, 2, 3]'::jsonb)",
    ] {
        let statement = query::parse(sql).expect("plans").remove(0);
        let bound = query::bind(&statement, &[]).expect("binds");
        let query::Statement::Select(select) = bound else { panic!("{sql}: not a SELECT") };
        // Only the value outlives the closure: the result set around it is dropped inside.
        let (value, bytes) = held(|| {
            let result = query::execute_constant(&select).expect("evaluates");
            result.rows.into_iter().next().and_then(|r| r.into_iter().next())
        });
        let Some(Datum::Json(v)) = value else { panic!("{sql}: no JSON value: {value:?}") };
        let bytes = bytes - size_of::<Option<Datum>>() + size_of::<Value>();
        assert_counted(json_bytes(&v), bytes, sql);
        let text = serde_json::to_string(&v).expect("encodes");
        let (rebuilt, bytes) = held(|| v.clone());
        assert_counted(json_bytes(&rebuilt), bytes, sql);
        assert_eq!(serde_json::to_string(&rebuilt).expect("encodes"), text);
    }
}
