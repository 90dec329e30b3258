//! `DiskFile::write_and_sync` on the real disk, both ways (`ChunkIo::Now`: glommio's blocking
//! thread; `ChunkIo::Ring`: io_uring). The data lands where asked, each way reports where its
//! time went (`ChunkTimes`), and dropping the future while the thread is still writing waits
//! for the thread instead of freeing the buffer under it. `DiskFile::write_zeros_now` takes
//! the blocking thread too.

mod common;

use std::os::unix::fs::FileExt;
use std::task::{Context, Poll, Waker};

use common::*;
use storage::disk::DiskFile;
use storage::{ChunkIo, Disk, DmaDisk};

const BLOCK: usize = 4096;

fn filled(file: &dyn DiskFile, bytes: usize, byte: u8) -> glommio::io::DmaBuffer {
    let mut buf = file.alloc(bytes);
    buf.as_bytes_mut().fill(byte);
    buf
}

// Two chunks at two offsets, one each way: both read back through another descriptor.
#[test]
fn write_and_sync_writes_the_chunk_at_its_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    run(move || async move {
        let file = DmaDisk.create(&path).await.expect("create");
        let first = filled(&*file, 2 * BLOCK, 0xA5);
        let now = file.write_and_sync(first, 0, ChunkIo::Now).await.expect("first chunk");
        let second = filled(&*file, BLOCK, 0x5A);
        let ring =
            file.write_and_sync(second, 3 * BLOCK as u64, ChunkIo::Ring).await.expect("second");
        // Where the time went: a real write and fdatasync each way; only the blocking thread
        // has a hand-off to wait for.
        for times in [now, ring] {
            assert!(times.synced > std::time::Duration::ZERO, "{times:?}");
        }
        assert_eq!(ring.waited, std::time::Duration::ZERO, "the ring has no thread to wait for");
        file.close().await.expect("close");
        let std_file = std::fs::File::open(&path).expect("open");
        let mut back = vec![0u8; 4 * BLOCK];
        std_file.read_exact_at(&mut back, 0).expect("read");
        assert!(back[..2 * BLOCK].iter().all(|&b| b == 0xA5));
        assert!(back[2 * BLOCK..3 * BLOCK].iter().all(|&b| b == 0), "the gap stays a hole");
        assert!(back[3 * BLOCK..].iter().all(|&b| b == 0x5A));
    });
}

// `write_zeros_now` (the spare's zero-fill) writes zeros on the blocking thread without a
// sync, in pieces when longer than its block of zeros: the range reads back as zeros, the
// bytes around it are untouched, and a later fdatasync through the ring covers them.
#[test]
fn write_zeros_now_zeroes_its_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    run(move || async move {
        let file = DmaDisk.create(&path).await.expect("create");
        let total = 80 * BLOCK;
        file.write_at(filled(&*file, total, 0x33), 0).await.expect("fill");
        file.write_zeros_now(BLOCK as u64, 70 * BLOCK).await.expect("zeros");
        file.fdatasync().await.expect("sync");
        file.close().await.expect("close");
        let std_file = std::fs::File::open(&path).expect("open");
        let mut back = vec![0u8; total];
        std_file.read_exact_at(&mut back, 0).expect("read");
        assert!(back[..BLOCK].iter().all(|&b| b == 0x33), "before the range");
        assert!(back[BLOCK..71 * BLOCK].iter().all(|&b| b == 0), "the range is zeros");
        assert!(back[71 * BLOCK..].iter().all(|&b| b == 0x33), "after the range");
    });
}

// The future is polled once (the thread has the request) and dropped at once: the drop waits
// for the thread, the file stays usable, and a later chunk is written normally.
#[test]
fn dropping_a_chunk_in_flight_waits_for_the_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    run(move || async move {
        let file = DmaDisk.create(&path).await.expect("create");
        for round in 0..20u64 {
            let mut fut = file.write_and_sync(
                filled(&*file, 16 * BLOCK, 7),
                round * 16 * BLOCK as u64,
                ChunkIo::Now,
            );
            let mut cx = Context::from_waker(Waker::noop());
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                r.expect("write");
            }
            drop(fut);
        }
        file.write_and_sync(filled(&*file, BLOCK, 9), 0, ChunkIo::Now)
            .await
            .expect("write after the drops");
        file.close().await.expect("close");
        let std_file = std::fs::File::open(&path).expect("open");
        let mut back = vec![0u8; BLOCK];
        std_file.read_exact_at(&mut back, 0).expect("read");
        assert!(back.iter().all(|&b| b == 9));
    });
}
