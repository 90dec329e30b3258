//! Helpers shared by the storage integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::rc::Rc;

use router::{FragmentId, ShardId, ShardRange};
use storage::{Disk, Fragment, FragmentOptions, WriteBatch};

/// Runs `f` on a fresh glommio executor (the way the node runs fragments), with the I/O memory
/// that fits the machine's 8 MiB locked-memory limit. Fails the test on any WARN or ERROR log
/// line: tests that expect one use [`run_allowing_warnings`].
pub fn run<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (out, alarms) = run_logged(f);
    assert!(alarms.is_empty(), "unexpected WARN/ERROR log lines: {alarms:?}");
    out
}

/// Like [`run`], for tests that provoke warnings on purpose (torn tails, failed fdatasync).
pub fn run_allowing_warnings<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    run_logged(f).0
}

fn run_logged<F, Fut, T>(f: F) -> (T, Vec<String>)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    let alarms = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = alarms.clone();
    let out = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        // glommio 0.9.0 can park for good when the preemption timer has fired just as it looks
        // for runnable tasks (`run_task_queues` reads "preempted" as "nothing to run"); on a
        // loaded machine a long crash run hit it. A long timer keeps tests clear of it.
        .preempt_timer(std::time::Duration::from_secs(60))
        .spawn(move || async move {
            let subscriber = tracing_subscriber::registry().with(Alarm(seen));
            let _guard = tracing::subscriber::set_default(subscriber);
            f().await
        })
        .expect("spawn executor")
        .join()
        .expect("executor thread");
    let alarms = alarms.lock().expect("alarms").clone();
    (out, alarms)
}

/// Collects WARN and ERROR events.
struct Alarm(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Alarm {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let meta = event.metadata();
        if *meta.level() <= tracing::Level::WARN {
            let line = format!("{} {} {}", meta.level(), meta.target(), meta.name());
            self.0.lock().expect("alarms").push(line);
        }
    }
}

pub const FRAGMENT: FragmentId = FragmentId::new(7);

pub fn options(segment_bytes: u64) -> FragmentOptions {
    FragmentOptions {
        segment_bytes,
        compact_dead_bytes_min: u64::MAX,
        ..FragmentOptions::default()
    }
}

pub fn options_on(segment_bytes: u64, disk: Rc<dyn Disk>) -> FragmentOptions {
    FragmentOptions {
        segment_bytes,
        compact_dead_bytes_min: u64::MAX,
        disk,
        ..FragmentOptions::default()
    }
}

pub async fn open(dir: &Path, options: FragmentOptions) -> Fragment {
    Fragment::open(dir, FRAGMENT, ShardRange::ALL, options).await.expect("open fragment")
}

/// A shard derived from the key, so documents spread over shards.
pub fn shard_of(key: &str) -> ShardId {
    let h = key.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    ShardId::from_u64_mod(h)
}

pub fn put(coll: &str, id: &str, doc: serde_json::Value) -> WriteBatch {
    WriteBatch::new().put(coll, id, shard_of(&id.to_lowercase()), None, doc)
}

/// A small deterministic generator (xorshift), so tests need no RNG crate and print a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Segment files of a fragment directory, sorted.
pub fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

/// (chunk start, payload offset, payload length) of every record of a single-segment file
/// written with one record per chunk (sequential, unconcurrent applies).
pub fn record_layout(segment: &Path) -> Vec<(usize, usize, usize)> {
    use storage::format::{LsnRule, SegmentHeader, scan_segment};
    let bytes = std::fs::read(segment).expect("read segment");
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(&bytes);
    let header = SegmentHeader::decode(&aligned).expect("header");
    let mut out = Vec::new();
    let end = scan_segment(&aligned, &header, LsnRule::Contiguous, 0, |rec| {
        let offset = usize::try_from(rec.span.offset()).expect("offset");
        // One record per chunk: the chunk header and the frame header precede the payload.
        let chunk =
            offset - storage::limits::FRAME_HEADER_BYTES - storage::limits::CHUNK_HEADER_BYTES;
        out.push((chunk, offset, rec.span.len()));
    });
    assert!(end.damage.is_none(), "clean segment expected");
    out
}

/// End of the frame (payload rounded up to 8) of a record at `offset` with `len` bytes.
pub fn frame_end(offset: usize, len: usize) -> usize {
    offset + len.next_multiple_of(8)
}

/// Polls `fut` exactly once (a write polled once is validated and queued, not yet durable:
/// the writer task has not run, nothing having yielded to it).
pub async fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let mut fut = fut;
    std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await
}
