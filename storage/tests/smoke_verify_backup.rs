//! Offline verification (`verify_dir`, `OfflineFragment`), backup cuts and I/O counters.

mod common;

use std::io::Read;
use std::ops::ControlFlow;

use common::*;
use serde_json::json;
use storage::{OfflineFragment, OpenError, verify_dir};

const SEGMENT: u64 = 64 << 10;

/// Copies a cut into `to` the way the node's backup does: `len` bytes of each open file.
fn copy_cut(cut: &storage::BackupCut, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for f in &cut.files {
        let mut bytes = Vec::new();
        (&f.file).take(f.len).read_to_end(&mut bytes).expect("read cut file");
        assert_eq!(bytes.len() as u64, f.len);
        std::fs::write(to.join(&f.name), bytes).expect("write copy");
    }
}

// Checks that verify reads a healthy fragment read-only, refuses one an open Fragment holds,
// and names segment and offset of a flipped byte before the tail.
#[test]
fn verify_reports_and_finds_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        for i in 0..5 {
            f.apply(put("c", &format!("d{i}"), json!({"i": i}))).await.expect("put");
        }
        f.apply(put("c", "d0", json!({"i": 100}))).await.expect("overwrite");
        match verify_dir(&path, FRAGMENT) {
            Err(OpenError::Locked { .. }) => {}
            other => panic!("an open fragment must be refused, got {other:?}"),
        }
        f.close().await;
        let before = std::fs::read(&segment_files(&path)[0]).expect("read");
        let report = verify_dir(&path, FRAGMENT).expect("healthy");
        assert_eq!((report.records, report.docs, report.last_lsn), (6, 5, 6));
        assert!(report.torn_tail.is_none());
        assert_eq!(std::fs::read(&segment_files(&path)[0]).expect("read"), before, "read-only");

        let offline = OfflineFragment::open(&path, FRAGMENT).expect("offline");
        assert_eq!(offline.collections(), vec!["c".to_owned()]);
        let mut seen = Vec::new();
        offline.scan("c", router::ShardRange::ALL, |d| {
            seen.push((d.id().to_owned(), d.version().get()));
            ControlFlow::Continue(())
        });
        seen.sort();
        assert_eq!(seen.first(), Some(&("d0".to_owned(), 6)));
        assert_eq!(seen.len(), 5);
        drop(offline);

        let seg = segment_files(&path)[0].clone();
        let (chunk, offset, _) = record_layout(&seg)[2];
        let mut bytes = before.clone();
        bytes[offset + 3] ^= 0x10;
        std::fs::write(&seg, &bytes).expect("flip");
        match verify_dir(&path, FRAGMENT) {
            Err(OpenError::Corruption { segment, offset: at, .. }) => {
                assert_eq!(segment, seg);
                assert_eq!(at, chunk as u64);
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    });
}

// Checks that a cut taken while writes continue copies a prefix that verifies and reopens
// with exactly the documents durable at the cut, and that I/O counters count group commits.
#[test]
fn backup_cut_is_a_consistent_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("live");
    let copy = dir.path().join("copy");
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        // Enough to roll over several 64 KiB segments.
        for i in 0..40 {
            let doc = json!({"i": i, "pad": "x".repeat(3000)});
            f.apply(put("c", &format!("d{i}"), doc)).await.expect("put");
        }
        let mut stats = f.stats();
        assert!(!stats.shards.is_empty());
        stats.shards.clear();
        assert_eq!(f.totals(), stats, "totals are stats without the shard map");
        let io = f.io_stats();
        assert_eq!(io.fdatasyncs, 40, "sequential applies: one group commit each");
        assert_eq!(io.writes_synced, 40);
        assert!(io.bytes_appended >= 40 * 4096);
        assert_eq!(io.fdatasync_micros.count(), 40);
        for (phase, h) in io.chunk_phases.named() {
            assert_eq!(h.count(), 40, "{phase}: one observation per group commit");
        }
        assert!(io.chunk_phases.fdatasync.sum() > 0, "40 real fdatasyncs take some time");
        let cut = f.backup_cut().await.expect("cut");
        assert!(cut.files.len() > 1, "several segments");
        assert_eq!(cut.lsn_durable, 40);
        // Writes after the cut are not in it.
        for i in 40..45 {
            f.apply(put("c", &format!("d{i}"), json!({"i": i}))).await.expect("put");
        }
        f.compact().await.expect("compact after the cut");
        copy_cut(&cut, &copy);
        drop(cut);
        f.close().await;
        let report = verify_dir(&copy, FRAGMENT).expect("the copy verifies");
        assert_eq!((report.docs, report.last_lsn), (40, 40));
        assert!(report.torn_tail.is_none());
        let restored = open(&copy, options(SEGMENT)).await;
        assert_eq!(restored.stats().docs, 40);
        assert_eq!(restored.stats().torn_tails, 0);
        restored.apply(put("c", "after", json!({}))).await.expect("writes go on after restore");
        assert!(restored.get("c", "d39").is_some());
        assert!(restored.get("c", "d40").is_none());
        restored.close().await;
    });
}

// Checks that verify reports a torn tail (bytes after the last chunk of the last segment,
// within one chunk) without calling it corruption, and leaves the bytes in place; the next
// open truncates it as usual.
#[test]
fn verify_reports_a_torn_tail_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        for i in 0..3 {
            f.apply(put("c", &format!("d{i}"), json!({"i": i}))).await.expect("put");
        }
        f.close().await;
        let seg = segment_files(&path)[0].clone();
        let (chunk, _, _) = *record_layout(&seg).last().expect("records");
        let tail_at = chunk + 4096;
        let mut bytes = std::fs::read(&seg).expect("read");
        bytes[tail_at + 100] = 0xAB;
        std::fs::write(&seg, &bytes).expect("write");
        let report = verify_dir(&path, FRAGMENT).expect("a torn tail is not corruption");
        let torn = report.torn_tail.expect("reported");
        assert_eq!((torn.segment, torn.offset), (seg.clone(), tail_at as u64));
        assert_eq!(report.docs, 3);
        assert_eq!(std::fs::read(&seg).expect("read")[tail_at + 100], 0xAB, "left in place");
        let f = open(&path, options(SEGMENT)).await;
        assert_eq!(f.stats().torn_tails, 1);
        f.close().await;
        assert!(verify_dir(&path, FRAGMENT).expect("clean now").torn_tail.is_none());
    });
}

// Checks that an offline reader leaves an in-doubt transaction's writes out until told it
// committed (the coordinator's decision, which a crash or a backup cut can hold without this
// fragment's Commit record), then shows them, over the version the document had before.
#[test]
fn offline_commit_in_doubt_applies_only_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let f = open(&path, options(SEGMENT)).await;
        f.apply(put("c", "a", json!({"v": 0}))).await.expect("put");
        f.prepare(storage::TxId::new(7), put("c", "a", json!({"v": 7}))).await.expect("prepare");
        f.prepare(storage::TxId::new(8), put("c", "b", json!({"v": 8}))).await.expect("prepare");
        f.close().await;
        let docs = |o: &OfflineFragment| {
            let mut seen = Vec::new();
            o.scan("c", router::ShardRange::ALL, |d| {
                seen.push((d.id().to_owned(), d.doc().to_serde()));
                ControlFlow::Continue(())
            });
            seen
        };
        let mut offline = OfflineFragment::open(&path, FRAGMENT).expect("offline");
        let mut in_doubt = offline.in_doubt();
        in_doubt.sort();
        assert_eq!(in_doubt, vec![storage::TxId::new(7), storage::TxId::new(8)]);
        assert_eq!(docs(&offline), vec![("a".to_owned(), json!({"v": 0}))], "none applied yet");
        assert_eq!(offline.commit_in_doubt(|t| t == storage::TxId::new(7)), 1);
        assert_eq!(docs(&offline), vec![("a".to_owned(), json!({"v": 7}))], "7 only");
        assert_eq!(offline.in_doubt(), vec![storage::TxId::new(8)], "8 stays in doubt");
    });
}
