//! Several fragments on one executor sharing a `SyncGate`: a lone writer starts its chunk at
//! once, a fragment whose turn must wait gathers its queued records into one chunk, the gate's
//! limit bounds the fdatasyncs in flight, every acknowledged write is durable, and a failed
//! fdatasync stops only its own fragment. Assertions are on counts, never on time.

mod common;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::task::{Poll, Waker};

use common::*;
use glommio::io::DmaBuffer;
use router::{FragmentId, ShardRange};
use serde_json::json;
use storage::disk::{DiskFile, IoFuture};
use storage::{AppendError, CrashMode, Disk, FaultyDisk, Fragment, FragmentOptions, SyncGate};

const SEGMENT: u64 = 1 << 20;

/// What the watched disk saw, shared by all its files.
#[derive(Default)]
struct Watch {
    /// fdatasyncs under way right now, and the most at once.
    in_flight: Cell<usize>,
    peak: Cell<usize>,
    /// While set, fdatasyncs wait (counted in `held`) until `release`.
    hold: Cell<bool>,
    held: Cell<usize>,
    wakers: RefCell<Vec<Waker>>,
    /// Tasks waiting for `held` to change.
    watchers: RefCell<Vec<Waker>>,
}

impl Watch {
    /// Waits until `held` fdatasyncs are held. (A loop of yields would not do: glommio
    /// looks for I/O completions only when no task is runnable.)
    async fn until_held(&self, held: usize) {
        std::future::poll_fn(|cx| {
            if self.held.get() == held {
                Poll::Ready(())
            } else {
                self.watchers.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
    }

    fn release(&self) {
        self.hold.set(false);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }
}

/// A disk over another that counts fdatasyncs in flight and can hold them.
struct WatchedDisk {
    inner: Rc<dyn Disk>,
    watch: Rc<Watch>,
}

struct WatchedFile {
    inner: Rc<dyn DiskFile>,
    watch: Rc<Watch>,
}

impl DiskFile for WatchedFile {
    fn alloc(&self, bytes: usize) -> DmaBuffer {
        self.inner.alloc(bytes)
    }

    fn write_at(&self, buf: DmaBuffer, offset: u64) -> IoFuture<'_, ()> {
        self.inner.write_at(buf, offset)
    }

    fn fdatasync(&self) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let w = &self.watch;
            w.in_flight.set(w.in_flight.get() + 1);
            w.peak.set(w.peak.get().max(w.in_flight.get()));
            if w.hold.get() {
                w.held.set(w.held.get() + 1);
                for waker in w.watchers.borrow_mut().drain(..) {
                    waker.wake();
                }
                std::future::poll_fn(|cx| {
                    if w.hold.get() {
                        w.wakers.borrow_mut().push(cx.waker().clone());
                        Poll::Pending
                    } else {
                        Poll::Ready(())
                    }
                })
                .await;
                w.held.set(w.held.get() - 1);
            }
            let result = self.inner.fdatasync().await;
            w.in_flight.set(w.in_flight.get() - 1);
            result
        })
    }

    fn close(self: Rc<Self>) -> IoFuture<'static, ()> {
        let inner = self.inner.clone();
        drop(self);
        inner.close()
    }
}

impl WatchedDisk {
    fn wrap(&self, file: io::Result<Rc<dyn DiskFile>>) -> io::Result<Rc<dyn DiskFile>> {
        Ok(Rc::new(WatchedFile { inner: file?, watch: self.watch.clone() }))
    }
}

impl Disk for WatchedDisk {
    fn create<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>> {
        Box::pin(async move { self.wrap(self.inner.create(path).await) })
    }
    fn open<'a>(&'a self, path: &'a Path) -> IoFuture<'a, Rc<dyn DiskFile>> {
        Box::pin(async move { self.wrap(self.inner.open(path).await) })
    }
    fn rename<'a>(&'a self, from: &'a Path, to: &'a Path) -> IoFuture<'a, ()> {
        self.inner.rename(from, to)
    }
    fn remove<'a>(&'a self, path: &'a Path) -> IoFuture<'a, ()> {
        self.inner.remove(path)
    }
    fn sync_dir<'a>(&'a self, dir: &'a Path) -> IoFuture<'a, ()> {
        self.inner.sync_dir(dir)
    }
}

fn gated(disk: Rc<dyn Disk>, gate: &Option<SyncGate>) -> FragmentOptions {
    FragmentOptions { sync_gate: gate.clone(), ..options_on(SEGMENT, disk) }
}

/// Opens fragments 1..=n in subdirectories of `root`.
async fn open_all(root: &Path, n: u32, opts: impl Fn(u32) -> FragmentOptions) -> Vec<Rc<Fragment>> {
    let mut v = Vec::new();
    for i in 1..=n {
        let dir: PathBuf = root.join(format!("f{i}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = Fragment::open(&dir, FragmentId::new(i), ShardRange::ALL, opts(i))
            .await
            .expect("open fragment");
        v.push(Rc::new(f));
    }
    v
}

async fn close_all(fragments: Vec<Rc<Fragment>>) {
    for f in fragments {
        Rc::try_unwrap(f).expect("sole owner").close().await;
    }
}

/// Yields to the executor until `cond` holds, for conditions other runnable tasks make true
/// without waiting for I/O. It yields the task queue, not only the task: the fragments'
/// writers run in a queue of their own, which glommio runs only once this one has run dry or
/// yielded.
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        glommio::executor().yield_task_queue_now().await;
    }
}

/// Runs `fut` and counts into `started` once it has been polled the first time (by then an
/// `apply` has queued its record).
async fn counted<F: Future>(started: Rc<Cell<usize>>, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut first = true;
    std::future::poll_fn(|cx| {
        let p = fut.as_mut().poll(cx);
        if first {
            first = false;
            started.set(started.get() + 1);
        }
        p
    })
    .await
}

// Checks that one writer going round the fragments of a gated executor never waits for the
// gate: every write is its own chunk and fdatasync, started at once.
#[test]
fn smoke_lone_writer_is_never_delayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let gate = Some(SyncGate::new(1).expect("gate"));
        let fragments = open_all(&root, 4, |_| gated(Rc::new(storage::DmaDisk), &gate)).await;
        for n in 0..40u32 {
            let f = &fragments[(n % 4) as usize];
            f.apply(put("c", &format!("d{n}"), json!({"n": n}))).await.expect("apply");
        }
        let stats = gate.as_ref().expect("gate").stats();
        assert_eq!(stats.waited, 0, "{stats:?}");
        assert_eq!(stats.immediate, 40, "{stats:?}");
        assert_eq!(stats.peak, 1);
        for f in &fragments {
            let io = f.io_stats();
            assert_eq!((io.fdatasyncs, io.writes_synced), (10, 10), "{io:?}");
        }
        close_all(fragments).await;
    });
}

/// Fragment `a` starts a chunk whose fdatasync the disk holds; meanwhile ten writes arrive on
/// fragment `b`. Returns `b`'s fdatasyncs and the most fdatasyncs in flight at once.
async fn ten_writes_behind_a_held_sync(root: &Path, gate: Option<SyncGate>) -> (u64, usize) {
    let watch = Rc::new(Watch::default());
    let disk: Rc<dyn Disk> =
        Rc::new(WatchedDisk { inner: Rc::new(storage::DmaDisk), watch: watch.clone() });
    let fragments = open_all(root, 2, |_| gated(disk.clone(), &gate)).await;
    watch.hold.set(true);
    let a = fragments[0].clone();
    let first = glommio::spawn_local(async move { a.apply(put("c", "a0", json!({}))).await });
    watch.until_held(1).await;
    let started = Rc::new(Cell::new(0));
    let mut tasks = Vec::new();
    for n in 0..10 {
        let (b, started) = (fragments[1].clone(), started.clone());
        tasks.push(glommio::spawn_local(async move {
            counted(started, b.apply(put("c", &format!("b{n}"), json!({"n": n})))).await
        }));
    }
    until(|| started.get() == 10).await;
    match &gate {
        Some(g) => {
            // b's writer asked for a permit and waits in the gate's queue.
            until(|| g.waiting() == 1).await;
            assert_eq!(watch.held.get(), 1, "only a's fdatasync started");
        }
        // Without a gate b's chunk starts next to a's.
        None => watch.until_held(2).await,
    }
    watch.release();
    first.await.expect("a acknowledged");
    for t in tasks {
        t.await.expect("b acknowledged");
    }
    let b_io = fragments[1].io_stats();
    assert_eq!(b_io.writes_synced, 10);
    for n in 0..10 {
        assert!(fragments[1].get("c", &format!("b{n}")).is_some());
    }
    let peak = watch.peak.get();
    close_all(fragments).await;
    (b_io.fdatasyncs, peak)
}

// Checks that writes queued while the gate is held by another fragment's chunk go out as one
// chunk with one fdatasync once their turn comes, and that at most one fdatasync ran at a
// time.
#[test]
fn smoke_writes_merge_while_another_fragment_syncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        cov_mark::check!(sync_gate_waited);
        let gate = SyncGate::new(1).expect("gate");
        let (b_syncs, peak) = ten_writes_behind_a_held_sync(&root, Some(gate.clone())).await;
        assert_eq!(b_syncs, 1, "b's ten writes share one fdatasync");
        assert_eq!(peak, 1, "one fdatasync in flight at a time");
        let stats = gate.stats();
        assert_eq!((stats.immediate, stats.waited, stats.peak), (1, 1, 1), "{stats:?}");
        assert_eq!(gate.held(), 0, "every permit came back");
    });
}

// The same without a gate, for contrast: b starts its own chunk at once, its fdatasync in
// flight next to a's.
#[test]
fn smoke_without_a_gate_fragments_sync_side_by_side() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (b_syncs, peak) = ten_writes_behind_a_held_sync(&root, None).await;
        assert!(b_syncs >= 1, "b synced {b_syncs} times");
        assert!(peak >= 2, "a's and b's fdatasyncs side by side: {peak}");
    });
}

/// Writers per fragment and writes per writer under load.
const WRITERS: u32 = 8;
const ROUNDS: u32 = 12;

/// `WRITERS` tasks per fragment, each writing `ROUNDS` documents in a row. Returns the ids
/// acknowledged and the ids whose write failed, per fragment.
async fn load(fragments: &[Rc<Fragment>]) -> Vec<(Vec<String>, Vec<String>)> {
    let mut tasks = Vec::new();
    for (i, f) in fragments.iter().enumerate() {
        for w in 0..WRITERS {
            let f = f.clone();
            tasks.push(glommio::spawn_local(async move {
                let mut out = Vec::new();
                for r in 0..ROUNDS {
                    let id = format!("w{w}-{r}");
                    let res = f.apply(put("c", &id, json!({"w": w, "r": r}))).await;
                    out.push((i, id, res));
                }
                out
            }));
        }
    }
    let mut per: Vec<(Vec<String>, Vec<String>)> = vec![Default::default(); fragments.len()];
    for t in tasks {
        for (i, id, res) in t.await {
            match res {
                Ok(_) => per[i].0.push(id),
                Err(AppendError::Fatal { .. }) => per[i].1.push(id),
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }
    per
}

// Checks, under concurrent writers on four fragments sharing a gate of 2: the limit holds,
// groups are bigger than one write, and after a crash that drops every unsynced write every
// acknowledged write is there.
#[test]
fn crash_gated_fragments_keep_every_acknowledged_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run(move || async move {
        let gate = Some(SyncGate::new(2).expect("gate"));
        let watch = Rc::new(Watch::default());
        let faulty = FaultyDisk::new();
        let disk: Rc<dyn Disk> =
            Rc::new(WatchedDisk { inner: Rc::new(faulty.clone()), watch: watch.clone() });
        let fragments = open_all(&root, 4, |_| gated(disk.clone(), &gate)).await;
        let per = load(&fragments).await;
        let syncs: u64 = fragments.iter().map(|f| f.io_stats().fdatasyncs).sum();
        let writes = u64::from(4 * WRITERS * ROUNDS);
        assert!(per.iter().all(|(_, failed)| failed.is_empty()));
        assert!(watch.peak.get() <= 2, "peak {} fdatasyncs in flight", watch.peak.get());
        assert!(syncs < writes, "{syncs} fdatasyncs for {writes} writes: groups merged");
        let stats = gate.as_ref().expect("gate").stats();
        assert!(stats.waited > 0 && stats.peak == 2, "{stats:?}");
        close_all(fragments).await;
        faulty.crash(CrashMode::DropUnsynced).expect("crash");
        let fragments = open_all(&root, 4, |_| options(SEGMENT)).await;
        for (f, (acked, _)) in fragments.iter().zip(&per) {
            assert_eq!(f.stats().docs, acked.len() as u64);
            for id in acked {
                assert!(f.get("c", id).is_some(), "acknowledged {id} lost");
            }
        }
        close_all(fragments).await;
    });
}

// Checks that a failed fdatasync stops its own fragment only: the others, sharing the gate,
// keep acknowledging every write (the failed fragment's permits came back), and after a
// crash the failed fragment has exactly its acknowledged writes.
#[test]
fn crash_failed_fdatasync_stops_only_its_fragment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    run_allowing_warnings(move || async move {
        let gate = Some(SyncGate::new(1).expect("gate"));
        let disks: Vec<FaultyDisk> = (0..4).map(|_| FaultyDisk::new()).collect();
        let fragments =
            open_all(&root, 4, |i| gated(Rc::new(disks[i as usize - 1].clone()), &gate)).await;
        disks[0].fail_fdatasync_after(3);
        let per = load(&fragments).await;
        assert!(fragments[0].fatal().is_some());
        assert!(!per[0].1.is_empty(), "fragment 1 failed writes");
        for (i, (acked, failed)) in per.iter().enumerate().skip(1) {
            assert!(failed.is_empty(), "fragment {} failed {failed:?}", i + 1);
            assert_eq!(acked.len(), (WRITERS * ROUNDS) as usize);
            assert!(fragments[i].fatal().is_none());
        }
        let g = gate.as_ref().expect("gate");
        assert_eq!((g.held(), g.waiting()), (0, 0), "every permit came back");
        close_all(fragments).await;
        for d in &disks {
            d.crash(CrashMode::DropUnsynced).expect("crash");
        }
        let fragments = open_all(&root, 4, |_| options(SEGMENT)).await;
        for (f, (acked, failed)) in fragments.iter().zip(&per) {
            for id in acked {
                assert!(f.get("c", id).is_some(), "acknowledged {id} lost");
            }
            for id in failed {
                assert!(f.get("c", id).is_none(), "failed {id} visible");
            }
        }
        close_all(fragments).await;
    });
}
