//! Export of a shard range as a stream and import into another fragment: exactly the range's
//! documents arrive, with their content, and per-shard counts match. A damaged stream is
//! refused with the offset.

mod common;

use common::*;
use router::{FragmentId, ShardId, ShardRange};
use serde_json::json;
use storage::{Fragment, ImportError, WriteBatch};

// Checks export -> import moves exactly the documents of the range.
#[test]
fn export_import_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let src = open(&path.join("src"), options(1 << 20)).await;
        for i in 0..300u32 {
            let shard = ShardId::new(i * 3000).expect("shard");
            let b = WriteBatch::new().put(
                "c",
                &format!("Doc{i}"),
                shard,
                None,
                json!({"i": i, "p": "e".repeat(500)}),
            );
            src.apply(b).await.expect("put");
        }
        src.apply(WriteBatch::new().put(
            "other",
            "o1",
            ShardId::new(150_000).expect("s"),
            None,
            json!(1),
        ))
        .await
        .expect("put");
        let range = ShardRange::new(100_000, 400_000).expect("range");
        let dst = Fragment::open(&path.join("dst"), FragmentId::new(9), range, options(1 << 20))
            .await
            .expect("open dst");
        let mut export = src.export(range);
        let mut chunks = 0;
        while let Some(chunk) = export.next_chunk() {
            dst.import(&chunk).await.expect("import");
            chunks += 1;
        }
        assert!(chunks >= 1);
        let expected: Vec<u32> =
            (0..300).filter(|i| range.contains(ShardId::new(i * 3000).expect("s"))).collect();
        assert_eq!(dst.stats().docs, expected.len() as u64 + 1);
        for i in expected {
            let d = dst.get("c", &format!("doc{i}")).expect("imported");
            assert_eq!(d.id(), format!("Doc{i}"));
            assert_eq!(d.doc().to_serde()["i"], json!(i));
        }
        assert!(dst.get("other", "o1").is_some());
        let src_counts: Vec<_> = src.shard_stats(range).iter().map(|(s, v)| (*s, v.docs)).collect();
        let dst_counts: Vec<_> = dst.shard_stats(range).iter().map(|(s, v)| (*s, v.docs)).collect();
        assert_eq!(src_counts, dst_counts);
        src.close().await;
        dst.close().await;
    });
}

// Checks a flipped byte in an export chunk is refused, naming the offset, and writes nothing.
#[test]
fn damaged_stream_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let src = open(&path.join("src"), options(1 << 20)).await;
        src.apply(put("c", "a", json!({"a": 1}))).await.expect("put");
        let mut chunk = src.export(ShardRange::ALL).next_chunk().expect("chunk");
        chunk[20] ^= 0xff;
        let dst = open(&path.join("dst"), options(1 << 20)).await;
        let r = dst.import(&chunk).await;
        assert!(matches!(r, Err(ImportError::Corruption { offset: 0, .. })), "{r:?}");
        assert_eq!(dst.stats().docs, 0);
        src.close().await;
        dst.close().await;
    });
}
