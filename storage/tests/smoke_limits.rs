//! Limits: every bound on input is a typed error and writes nothing.

mod common;

use common::*;
use router::{ShardId, ShardRange};
use serde_json::json;
use storage::limits::{
    BATCH_BYTES_MAX, BATCH_OPS_MAX, COLLECTION_BYTES_MAX, DOC_BYTES_MAX, DOC_DEPTH_MAX,
    ID_BYTES_MAX,
};
use storage::{AppendError, Fragment, InputError, WriteBatch};

fn deep(levels: usize) -> serde_json::Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "d": v });
    }
    v
}

// Checks id, collection, depth, size, batch and shard limits, each with its own error.
#[test]
fn limits_are_typed_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let range = ShardRange::new(0, 1000).expect("range");
        let f = Fragment::open(&path, FRAGMENT, range, options(1 << 20)).await.expect("open");
        let s = ShardId::new(5).expect("shard");
        let input = |r: Result<storage::CommitInfo, AppendError>| match r {
            Err(AppendError::Input(e)) => e,
            other => panic!("expected an input error, got {other:?}"),
        };
        let long_id = "i".repeat(ID_BYTES_MAX + 1);
        assert!(matches!(
            input(f.apply(WriteBatch::new().put("c", &long_id, s, None, json!(1))).await),
            InputError::IdTooLong { .. }
        ));
        assert_eq!(
            input(f.apply(WriteBatch::new().put("c", "", s, None, json!(1))).await),
            InputError::IdEmpty
        );
        let long_coll = "c".repeat(COLLECTION_BYTES_MAX + 1);
        assert!(matches!(
            input(f.apply(WriteBatch::new().put(&long_coll, "a", s, None, json!(1))).await),
            InputError::CollectionName { .. }
        ));
        assert_eq!(
            input(f.apply(WriteBatch::new().put("c", "a", s, None, deep(DOC_DEPTH_MAX))).await),
            InputError::DocTooDeep { max: DOC_DEPTH_MAX }
        );
        f.apply(WriteBatch::new().put("c", "ok", s, None, deep(DOC_DEPTH_MAX - 1)))
            .await
            .expect("at the limit");
        let big = json!({"s": "x".repeat(DOC_BYTES_MAX)});
        assert!(matches!(
            input(f.apply(WriteBatch::new().put("c", "a", s, None, big)).await),
            InputError::DocTooLarge { .. }
        ));
        assert!(matches!(
            input(f.apply(WriteBatch::new()).await),
            InputError::BatchSize { ops: 0, .. }
        ));
        let mut many = WriteBatch::new();
        for i in 0..=BATCH_OPS_MAX {
            many = many.delete("c", &format!("k{i}"), s, None);
        }
        assert!(matches!(input(f.apply(many).await), InputError::BatchSize { .. }));
        // One document within DOC_BYTES_MAX that no chunk of a 1 MiB segment can carry.
        let wide = json!({"s": "y".repeat(1_045_000)});
        assert!(matches!(
            input(f.apply(WriteBatch::new().put("c", "w", s, None, wide)).await),
            InputError::RecordTooLarge { .. }
        ));
        // Documents past BATCH_BYTES_MAX in all, each well within the document limit.
        let mut heavy = WriteBatch::new();
        let text = "z".repeat(DOC_BYTES_MAX / 2);
        for i in 0..(2 * BATCH_BYTES_MAX / DOC_BYTES_MAX + 1) {
            heavy = heavy.put("c", &format!("h{i}"), s, None, json!({ "s": text }));
        }
        assert!(matches!(input(f.apply(heavy).await), InputError::BatchBytes { .. }));
        let outside = ShardId::new(5000).expect("shard");
        assert!(matches!(
            f.apply(WriteBatch::new().put("c", "a", outside, None, json!(1))).await,
            Err(AppendError::WrongShard { .. })
        ));
        assert_eq!(f.stats().docs, 1, "only the write at the depth limit landed");
        f.close().await;
    });
}
