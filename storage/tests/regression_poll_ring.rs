//! Segment writes stay off glommio's IOPOLL ring. On a device whose iopoll probe passes (this
//! machine's virtio disk), glommio 0.9.0 would put every DMA write there and busy-poll while it
//! is in flight, which made a cross-executor insert ~4x slower (BENCHMARKS.md, "hop2"). glommio
//! counts file writes per ring, so this is checked without any timing.

mod common;

use common::*;
use serde_json::json;

const SEGMENT: u64 = 1 << 20;

// Checks that writes, fdatasyncs, a reopen and a compaction issue no write on the poll ring,
// and that the writes did happen (on the main ring: the fragment asks for `ChunkIo::Ring`, and
// one writer never splits a wave; the default, `ChunkIo::Now`, writes chunks on glommio's
// blocking thread, on no ring at all).
#[test]
fn regression_segment_writes_avoid_the_poll_ring() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let ring = || storage::FragmentOptions { chunk_io: storage::ChunkIo::Ring, ..options(SEGMENT) };
    let (poll, main, chunks) = run(move || async move {
        let _ = glommio::executor().io_stats(); // reset the counters
        let f = open(&path, ring()).await;
        for i in 0..20 {
            f.apply(put("c", &format!("k{i}"), json!({ "i": i }))).await.expect("write");
        }
        let mut chunks = f.io_stats().fdatasyncs;
        f.close().await;
        let f = open(&path, ring()).await;
        f.apply(put("c", "after-reopen", json!(1))).await.expect("write");
        chunks += f.io_stats().fdatasyncs;
        f.compact().await.expect("compact");
        f.close().await;
        let stats = glommio::executor().io_stats();
        (stats.poll_ring.file_writes().0, stats.main_ring.file_writes().0, chunks)
    });
    assert_eq!(poll, 0, "segment writes went to glommio's IOPOLL ring");
    assert_eq!(chunks, 21, "every write was its own group commit");
    assert!(main >= 21, "the writes were made on the main ring: {main}");
}
