//! The model test: random sequences of put, delete, batch (some logged in parts), conflicting
//! write, scanned-range
//! check (alone and beside a queued write), compaction and reopen against a `BTreeMap`
//! oracle, comparing every read. Cases: `PROPTEST_CASES`
//! (default 32).

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use storage::{AppendError, Version, WriteBatch};

const SEGMENT: u64 = 64 << 10;
const KEYS: usize = 12;

#[derive(Debug, Clone)]
enum Step {
    Put(usize, u32, usize),
    Delete(usize),
    /// Writes (a put with its value, or a delete) with each put padded by `.1` bytes: past
    /// about 30 KiB in all the batch is logged in parts.
    Batch(Vec<(usize, Option<u32>)>, usize),
    StaleWrite(usize),
    /// A scanned-range check over key `.0`'s shard (`.1`: every shard), expecting the model's
    /// count (`.2`: one more, which must fail).
    ScanCheck(usize, bool, bool),
    /// A put and a check of every shard validated while the put is queued.
    QueuedScan(usize, u32),
    Compact,
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..KEYS, any::<u32>(), 0..600usize).prop_map(|(k, v, pad)| Step::Put(k, v, pad)),
        2 => (0..KEYS).prop_map(Step::Delete),
        2 => (
            proptest::collection::vec((0..KEYS, proptest::option::of(any::<u32>())), 1..6),
            prop_oneof![Just(0usize), 0..16_000usize],
        )
            .prop_map(|(ops, pad)| Step::Batch(ops, pad)),
        1 => (0..KEYS).prop_map(Step::StaleWrite),
        2 => (0..KEYS, any::<bool>(), any::<bool>()).prop_map(|(k, w, o)| Step::ScanCheck(k, w, o)),
        1 => (0..KEYS, any::<u32>()).prop_map(|(k, v)| Step::QueuedScan(k, v)),
        1 => Just(Step::Compact),
        1 => Just(Step::Reopen),
    ]
}

/// Key `k`, with its case varied by `salt`, so lookups are case-insensitive.
fn id(k: usize, salt: u32) -> String {
    if salt.is_multiple_of(2) { format!("doc/{k}") } else { format!("DOC/{k}") }
}

async fn check_all(f: &storage::Fragment, model: &BTreeMap<usize, u32>) {
    for k in 0..KEYS {
        let got = f.get("m", &id(k, 0)).map(|d| d.doc().to_serde()["v"].clone());
        assert_eq!(got, model.get(&k).map(|v| json!(v)), "key {k}");
    }
    let mut n = 0;
    f.scan("m", router::ShardRange::ALL, |_| {
        n += 1;
        ControlFlow::Continue(())
    });
    assert_eq!(n, model.len());
    assert_eq!(f.stats().docs, model.len() as u64);
}

fn run_case(steps: Vec<Step>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let mut f = open(&path, options(SEGMENT)).await;
        let mut model: BTreeMap<usize, u32> = BTreeMap::new();
        for (i, s) in steps.into_iter().enumerate() {
            match s {
                Step::Put(k, v, pad) => {
                    let doc = json!({"v": v, "pad": "x".repeat(pad)});
                    let key = id(k, v);
                    f.apply(WriteBatch::new().put("m", &key, shard_of(&id(k, 0)), None, doc))
                        .await
                        .expect("put");
                    model.insert(k, v);
                }
                Step::Delete(k) => {
                    f.apply(WriteBatch::new().delete("m", &id(k, 1), shard_of(&id(k, 0)), None))
                        .await
                        .expect("delete");
                    model.remove(&k);
                }
                Step::Batch(ops, pad) => {
                    let mut b = WriteBatch::new();
                    for (k, v) in &ops {
                        b = match v {
                            Some(v) => b.put(
                                "m",
                                &id(*k, *v),
                                shard_of(&id(*k, 0)),
                                None,
                                json!({"v": v, "pad": "b".repeat(pad)}),
                            ),
                            None => b.delete("m", &id(*k, 0), shard_of(&id(*k, 0)), None),
                        };
                    }
                    f.apply(b).await.expect("batch");
                    for (k, v) in ops {
                        match v {
                            Some(v) => model.insert(k, v),
                            None => model.remove(&k),
                        };
                    }
                }
                Step::StaleWrite(k) => {
                    let stale = match f.version_of("m", &id(k, 0)) {
                        Some(v) => Version::new(v.get() - 1),
                        None => Version::new(1_000_000),
                    };
                    let b = WriteBatch::new()
                        .put(
                            "m",
                            &id((k + 1) % KEYS, 0),
                            shard_of(&id((k + 1) % KEYS, 0)),
                            None,
                            json!({"v": 0}),
                        )
                        .put("m", &id(k, 0), shard_of(&id(k, 0)), Some(stale), json!({"v": 1}));
                    assert!(matches!(f.apply(b).await, Err(AppendError::Conflict { .. })));
                }
                Step::ScanCheck(k, whole, off) => {
                    let range = if whole {
                        router::ShardRange::ALL
                    } else {
                        router::ShardRange::single(shard_of(&id(k, 0)))
                    };
                    let docs =
                        model.keys().filter(|j| range.contains(shard_of(&id(**j, 0)))).count()
                            as u64;
                    let got =
                        f.apply(WriteBatch::new().scan("m", range, docs + u64::from(off))).await;
                    if off {
                        assert!(matches!(got, Err(AppendError::Phantom { .. })), "{got:?}");
                    } else {
                        got.expect("the model's count");
                    }
                }
                Step::QueuedScan(k, v) => {
                    let put = WriteBatch::new().put(
                        "m",
                        &id(k, v),
                        shard_of(&id(k, 0)),
                        None,
                        json!({"v": v}),
                    );
                    model.insert(k, v);
                    let scan =
                        WriteBatch::new().scan("m", router::ShardRange::ALL, model.len() as u64);
                    let (put, scan) = futures_lite::future::zip(f.apply(put), f.apply(scan)).await;
                    put.expect("put");
                    scan.expect("the queued put counts");
                }
                Step::Compact => {
                    f.compact().await.expect("compact");
                    let st = f.stats();
                    assert!(st.live_bytes <= st.live_bytes + st.dead_bytes);
                }
                Step::Reopen => {
                    f.close().await;
                    f = open(&path, options(SEGMENT)).await;
                    assert_eq!(f.stats().torn_tails, 0);
                }
            }
            check_all(&f, &model).await;
            let _ = i;
        }
        f.close().await;
        let f = open(&path, options(SEGMENT)).await;
        check_all(&f, &model).await;
        f.close().await;
    });
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    // Checks the fragment against the BTreeMap after every step of a random sequence.
    #[test]
    fn model_matches_btreemap(steps in proptest::collection::vec(step(), 1..60)) {
        run_case(steps);
    }
}
