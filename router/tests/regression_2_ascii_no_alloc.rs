//! Issue 2 asks `shard_of` to allocate nothing on the heap for ASCII ids. This test installs a
//! counting global allocator and checks that placing ASCII ids of every shape (lower and upper
//! case, short and at the length limit, `$` tails, `$@N`, trailing `$`) allocates nothing.
//! Error paths that carry text (a malformed `$@` suffix) may allocate and are not covered.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Forwards to the system allocator and counts allocations.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards its arguments unchanged to `System`, so the `GlobalAlloc`
// contract holds exactly as it does for `System`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller meets `GlobalAlloc::alloc`'s contract; forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, i.e. from `System`, with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// Checks ASCII ids of every placement shape are placed without a heap allocation.
#[test]
fn ascii_ids_do_not_allocate() {
    let long_lower = "a".repeat(router::limits::ID_BYTES_MAX);
    let long_upper = "A".repeat(router::limits::ID_BYTES_MAX);
    let mixed_tail = format!("orders/1${}", "Customers/1-A".repeat(30));
    let ids = [
        "orders/1-A",
        "ORDERS/1-A",
        "orders/2-A$customers/1-A",
        "orders/2-A$CUSTOMERS/1-A",
        "orders/1-A$@982173",
        "orders/1-A$",
        "$@5",
        "x",
        long_lower.as_str(),
        long_upper.as_str(),
        mixed_tail.as_str(),
    ];
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut placed = 0;
    for id in ids {
        if router::shard_of(id).is_ok() {
            placed += 1;
        }
        if router::shard_of_bytes(id.as_bytes()).is_ok() {
            placed += 1;
        }
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(placed, 2 * ids.len(), "every id is valid");
    assert_eq!(after - before, 0, "placing ASCII ids allocated");
    // The counter does see allocations: non-ASCII ids are lower-cased into a `String`.
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    assert!(router::shard_of("ÀÉÎ/1").is_ok());
    assert!(ALLOCATIONS.load(Ordering::Relaxed) > before, "the counter missed an allocation");
}
