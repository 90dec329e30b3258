//! Regression: debug builds re-validated a whole batch record on every document read from it,
//! so counting the documents of a large multi-row INSERT was quadratic. Reads now validate a
//! record once per segment (debug builds only; release builds trust the index).

mod common;

use common::*;
use serde_json::json;
use storage::WriteBatch;

const SEGMENT: u64 = 4 << 20;
const DOCS: usize = 300;

fn big_batch() -> WriteBatch {
    let mut b = WriteBatch::new();
    for i in 0..DOCS {
        let id = format!("d{i}");
        b = b.put("c", &id, shard_of(&id), None, json!({"i": i, "pad": "p".repeat(64)}));
    }
    b
}

// Checks that reading every document of one batch record three times, after a reopen (spans
// from recovery) and right after the write (spans from the log), validates the record once
// in each case, and that every read still returns the right document.
#[test]
fn batch_record_is_validated_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        f.apply(big_batch()).await.expect("batch");
        {
            cov_mark::check_count!(segment_span_validated, 1);
            read_all(&f);
        }
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        {
            cov_mark::check_count!(segment_span_validated, 1);
            read_all(&f);
        }
        f.close().await;
    });
}

fn read_all(f: &storage::Fragment) {
    for _ in 0..3 {
        for i in 0..DOCS {
            let d = f.get("c", &format!("D{i}")).expect("present");
            assert_eq!(d.doc().to_serde()["i"], json!(i));
        }
    }
    let mut n = 0;
    f.scan("c", router::ShardRange::ALL, |_| {
        n += 1;
        std::ops::ControlFlow::Continue(())
    });
    assert_eq!(n, DOCS);
}
