//! The durable journal on a disk that loses or tears unsynced writes: acknowledged appends
//! survive, a torn last write is dropped, rewrites are atomic, reopen is repeatable.

mod common;

use std::rc::Rc;

use common::*;
use storage::{CrashMode, FaultyDisk, Journal, JournalError};

fn rec(i: usize) -> Vec<u8> {
    format!("decision {i} {}", "x".repeat(i % 50)).into_bytes()
}

// Checks that every acknowledged append is read back in order after a reopen, that
// concurrent appends share fdatasyncs, and that a rewrite keeps exactly what it was given.
#[test]
fn append_reopen_rewrite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let disk = FaultyDisk::new();
        let (j, found) = Journal::open_with(&path, Rc::new(disk.clone())).await.expect("open");
        assert!(found.is_empty());
        let j = Rc::new(j);
        let before = disk.fdatasyncs();
        let mut tasks = Vec::new();
        for i in 0..64 {
            let j = j.clone();
            tasks.push(glommio::spawn_local(async move { j.append(&rec(i)).await }));
        }
        for t in tasks {
            t.await.expect("append");
        }
        assert!(disk.fdatasyncs() - before < 64, "appends share fdatasyncs");
        assert!(matches!(j.append(&[]).await, Err(JournalError::RecordSize { .. })));
        j.close().await;
        drop(j);
        let (j, found) = Journal::open_with(&path, Rc::new(disk.clone())).await.expect("reopen");
        let want: Vec<Vec<u8>> = (0..64).map(rec).collect();
        assert_eq!(found, want);
        j.rewrite(&want[60..]).await.expect("rewrite");
        j.append(&rec(100)).await.expect("append after rewrite");
        j.close().await;
        drop(j);
        let (j, found) = Journal::open_with(&path, Rc::new(disk)).await.expect("reopen 2");
        let mut want = want[60..].to_vec();
        want.push(rec(100));
        assert_eq!(found, want);
        j.close().await;
        let files = std::fs::read_dir(&path).expect("dir").count();
        assert_eq!(files, 1, "old journal files are removed");
    });
}

// Checks crashes after a failed fdatasync: with the unsynced write dropped, kept, or torn at
// many lengths, reopen succeeds, keeps every acknowledged record and either has the failed
// one whole or not at all; the journal stops after the failure.
#[test]
fn crash_after_failed_fdatasync() {
    for keep in [None, Some(0), Some(1), Some(31), Some(32), Some(100), Some(4095), Some(4096)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        run_allowing_warnings(move || async move {
            let disk = FaultyDisk::new();
            let (j, _) = Journal::open_with(&path, Rc::new(disk.clone())).await.expect("open");
            for i in 0..5 {
                j.append(&rec(i)).await.expect("acknowledged");
            }
            disk.fail_fdatasync_after(0);
            assert!(j.append(&rec(5)).await.is_err());
            assert!(matches!(j.append(&rec(6)).await, Err(JournalError::Fatal { .. })));
            j.close().await;
            drop(j);
            let mode = match keep {
                None => CrashMode::DropUnsynced,
                Some(k) => CrashMode::TearLast { keep_bytes: k },
            };
            disk.crash(mode).expect("crash");
            let (j, found) = Journal::open_with(&path, Rc::new(FaultyDisk::new()))
                .await
                .expect("reopen after crash");
            let acked: Vec<Vec<u8>> = (0..5).map(rec).collect();
            assert_eq!(found[..5], acked[..], "keep {keep:?}");
            assert!(found.len() == 5 || found.get(5) == Some(&rec(5)), "keep {keep:?}");
            j.append(&rec(7)).await.expect("append after recovery");
            j.close().await;
        });
    }
}

// Checks that a journal file is zero-filled ahead of its tail: created with
// JOURNAL_PREALLOC_BYTES of zeros, extended while appends fill it, never reported in `bytes()`;
// and that a crash that drops the unsynced zeros (or keeps them) loses no acknowledged record.
#[test]
fn preallocated_ahead_of_the_tail() {
    use storage::limits::{JOURNAL_PREALLOC_BYTES, JOURNAL_PREALLOC_LOW_BYTES};
    for mode in [CrashMode::DropUnsynced, CrashMode::KeepUnsynced] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        run(move || async move {
            let disk = FaultyDisk::new();
            let (j, _) = Journal::open_with(&path, Rc::new(disk.clone())).await.expect("open");
            let file_len = || {
                let entry = std::fs::read_dir(&path).expect("dir").next().expect("a file");
                entry.expect("entry").metadata().expect("metadata").len()
            };
            assert_eq!(j.bytes(), 4096, "a fresh journal holds its header only");
            assert_eq!(file_len(), 4096 + JOURNAL_PREALLOC_BYTES as u64);
            // One chunk (one block) per sequential append: past the low mark, the file grows.
            let n = JOURNAL_PREALLOC_BYTES / 4096 + 8;
            for i in 0..n {
                j.append(&rec(i)).await.expect("append");
                assert!(file_len() >= j.bytes(), "the tail stays inside the file");
            }
            assert_eq!(j.bytes(), 4096 * (n as u64 + 1));
            assert!(file_len() >= j.bytes() + JOURNAL_PREALLOC_LOW_BYTES as u64, "extended ahead");
            j.close().await;
            drop(j);
            disk.crash(mode).expect("crash");
            let (j, found) =
                Journal::open_with(&path, Rc::new(FaultyDisk::new())).await.expect("reopen");
            assert_eq!(found, (0..n).map(rec).collect::<Vec<_>>(), "{mode:?}");
            j.close().await;
        });
    }
}
