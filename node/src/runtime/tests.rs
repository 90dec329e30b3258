use super::*;
use std::sync::Mutex;

/// Each executor's state in these tests: its index and a log shared with the test.
struct Probe {
    index: usize,
    thread: String,
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_owned()
}

// Checks that a call runs on the target executor, with the target's state, and returns its
// result to the caller: executor 0 asks every executor for its index and thread name.
#[test]
fn call_runs_on_the_target_executor() {
    let seen: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let seen_by_serve = Arc::clone(&seen);
    let shutdown = Shutdown::new();
    run(
        2,
        shutdown,
        |ctx: ExecutorContext<Probe>| async move {
            Ok(Probe { index: ctx.index.get(), thread: thread_name() })
        },
        move |state, ctx| {
            let seen = Arc::clone(&seen_by_serve);
            async move {
                if state.index == 0 {
                    for to in 0..ctx.mesh.len() {
                        let answer = ctx
                            .mesh
                            .call(ExecutorIndex::new(to), |s: Rc<Probe>| async move {
                                (s.index, s.thread.clone(), thread_name())
                            })
                            .await
                            .expect("executor answers");
                        assert_eq!(answer.1, answer.2, "ran on the thread that owns the state");
                        seen.lock().expect("lock").push((answer.0, answer.1));
                    }
                    ctx.shutdown.trigger();
                }
                ctx.shutdown.wait().await;
            }
        },
        |_, _| async {},
    )
    .expect("runtime ends cleanly");
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 2);
    // glommio appends its own suffix to the thread name we give.
    assert_eq!(seen[0].0, 0);
    assert!(seen[0].1.starts_with("tessera-0"), "{:?}", seen[0]);
    assert_eq!(seen[1].0, 1);
    assert!(seen[1].1.starts_with("tessera-1"), "{:?}", seen[1]);
}

// Checks the shutdown order: an executor that finished serving still answers calls from one
// that has not, and `close` runs only after every executor has stopped serving.
#[test]
fn executors_answer_until_all_have_served() {
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let (o1, o2) = (Arc::clone(&order), Arc::clone(&order));
    run(
        2,
        Shutdown::new(),
        |ctx: ExecutorContext<Probe>| async move {
            Ok(Probe { index: ctx.index.get(), thread: thread_name() })
        },
        move |state, ctx| {
            let order = Arc::clone(&o1);
            async move {
                if state.index == 1 {
                    // Executor 1 stops serving at once.
                    order.lock().expect("lock").push("1 served".into());
                    ctx.shutdown.trigger();
                    return;
                }
                ctx.shutdown.wait().await;
                // Executor 0 still calls executor 1 after 1 has stopped serving.
                let got = ctx
                    .mesh
                    .call(ExecutorIndex::new(1), |s: Rc<Probe>| async move { s.index })
                    .await
                    .expect("a served executor still answers");
                order.lock().expect("lock").push(format!("0 got {got}"));
            }
        },
        move |state, _| {
            let order = Arc::clone(&o2);
            async move { order.lock().expect("lock").push(format!("close {}", state.index)) }
        },
    )
    .expect("clean end");
    let order = order.lock().expect("lock");
    assert_eq!(order[0], "1 served");
    assert_eq!(order[1], "0 got 1");
    assert!(order[2..].iter().all(|e| e.starts_with("close")), "{order:?}");
    assert_eq!(order.len(), 4);
}

// Checks that a failing init stops the whole node with that error instead of hanging, and
// that serve runs nowhere, since the node is not whole.
#[test]
fn failed_init_stops_every_executor() {
    let served = Arc::new(AtomicUsize::new(0));
    let served_in = Arc::clone(&served);
    let err = run(
        2,
        Shutdown::new(),
        |ctx: ExecutorContext<Probe>| async move {
            if ctx.index.get() == 1 {
                Err("disk on fire".to_owned())
            } else {
                Ok(Probe { index: 0, thread: thread_name() })
            }
        },
        move |_, ctx| {
            let served = Arc::clone(&served_in);
            async move {
                served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ctx.shutdown.wait().await;
            }
        },
        |_, _| async {},
    )
    .expect_err("init failure is reported");
    assert!(err.to_string().contains("disk on fire"), "{err}");
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 0);
}

// Checks that calling an executor that does not exist is an error, not a panic.
#[test]
fn call_to_missing_executor_is_an_error() {
    let result: Arc<Mutex<Option<CallError>>> = Arc::default();
    let r = Arc::clone(&result);
    run(
        1,
        Shutdown::new(),
        |_: ExecutorContext<Probe>| async { Ok(Probe { index: 0, thread: thread_name() }) },
        move |_, ctx| {
            let r = Arc::clone(&r);
            async move {
                let e = ctx
                    .mesh
                    .call(ExecutorIndex::new(5), |s: Rc<Probe>| async move { s.index })
                    .await
                    .expect_err("no executor 5");
                *r.lock().expect("lock") = Some(e);
            }
        },
        |_, _| async {},
    )
    .expect("clean end");
    assert_eq!(*result.lock().expect("lock"), Some(CallError::NoSuchExecutor(5, 1)));
}

// Checks the countdown fires on the last arrival only, and that extra arrivals are harmless.
#[test]
fn countdown_fires_on_last_arrival() {
    let c = Countdown::new(2);
    c.arrive();
    assert!(!c.latch.fired.load(std::sync::atomic::Ordering::SeqCst));
    c.arrive();
    assert!(c.latch.fired.load(std::sync::atomic::Ordering::SeqCst));
    c.arrive();
    futures_lite::future::block_on(c.wait());
    let s = Shutdown::new();
    assert!(!s.is_triggered());
    s.trigger();
    s.trigger();
    futures_lite::future::block_on(s.wait());
    assert!(s.is_triggered());
}

use std::sync::atomic::AtomicUsize;
