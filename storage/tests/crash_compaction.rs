//! Crash safety of compaction, by reconstructing the directory a crash would leave at each
//! step: (1) before the rename (a `.seg.tmp` beside the old segments), (2) after the rename but
//! before the old segments were removed. Reopening must give the same documents either way,
//! and clean up the leftovers.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::json;

const SEGMENT: u64 = 64 << 10;

fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    segment_files(dir).into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("read"))).collect()
}

async fn fill(path: &Path) {
    let f = open(path, options(SEGMENT)).await;
    for r in 0..5 {
        for d in 0..40 {
            f.apply(put("c", &format!("d{d}"), json!({"r": r, "pad": "w".repeat(200)})))
                .await
                .expect("put");
        }
    }
    f.close().await;
}

async fn check(path: &Path) {
    let f = open(path, options(SEGMENT)).await;
    assert_eq!(f.stats().docs, 40);
    for d in 0..40 {
        let doc = f.get("c", &format!("d{d}")).expect("present");
        assert_eq!(doc.doc().to_serde()["r"], json!(4));
    }
    f.close().await;
}

// Checks a crash after the compacted file was renamed into place but before the old segments
// were removed: the compacted file wins and the old files are removed at open.
#[test]
fn crash_after_rename_before_removal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        fill(&path).await;
        let old = snapshot(&path);
        let f = open(&path, options(SEGMENT)).await;
        f.compact().await.expect("compact");
        f.close().await;
        for (p, bytes) in &old {
            if !p.exists() {
                std::fs::write(p, bytes).expect("restore old segment");
            }
        }
        check(&path).await;
        let names: Vec<_> = segment_files(&path);
        assert!(names.iter().all(|p| p.exists()));
        assert!(names.len() < old.len(), "old segments were removed: {names:?}");
    });
}

// Checks a crash before the rename: the half-made compacted file is a `.tmp` and is removed;
// the old segments stay authoritative.
#[test]
fn crash_before_rename() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        fill(&path).await;
        let old = snapshot(&path);
        let f = open(&path, options(SEGMENT)).await;
        f.compact().await.expect("compact");
        f.close().await;
        // Turn the compacted file back into a temporary one and restore the old segments.
        for p in segment_files(&path) {
            let name = p.file_name().and_then(|n| n.to_str()).expect("name").to_owned();
            if !name.ends_with("-0000.seg") {
                std::fs::rename(&p, path.join(format!("{name}.tmp"))).expect("to tmp");
            }
        }
        for (p, bytes) in &old {
            std::fs::write(p, bytes).expect("restore");
        }
        let extra: Vec<_> =
            segment_files(&path).into_iter().filter(|p| !old.iter().any(|(o, _)| o == p)).collect();
        for p in extra {
            std::fs::remove_file(p).expect("remove segment rolled after the crash point");
        }
        check(&path).await;
        let leftovers = std::fs::read_dir(&path)
            .expect("dir")
            .filter(|e| e.as_ref().expect("entry").path().to_string_lossy().ends_with(".tmp"))
            .count();
        assert_eq!(leftovers, 0);
    });
}

// Checks a missing segment in the middle of the sequence is refused as corruption.
#[test]
fn missing_segment_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        fill(&path).await;
        let files = segment_files(&path);
        assert!(files.len() >= 3);
        std::fs::remove_file(&files[1]).expect("remove");
        let r = storage::Fragment::open(&path, FRAGMENT, router::ShardRange::ALL, options(SEGMENT))
            .await;
        assert!(matches!(r, Err(storage::OpenError::Corruption { .. })), "{r:?}");
    });
}
