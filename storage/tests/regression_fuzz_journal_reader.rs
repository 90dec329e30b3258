//! Replays the `journal_reader` fuzz corpus (seeds and any past findings) through the journal
//! reader's fuzz body, so CI checks it without cargo-fuzz. The valid seeds must read back
//! their records. `TESSERA_WRITE_FUZZ_SEEDS=1` regenerates the seeds from a real journal.

mod common;

use std::path::PathBuf;

use common::*;
use storage::Journal;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/journal_reader")
}

fn write_seeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run(move || async move {
        let (j, _) = Journal::open(&path).await.expect("open");
        for r in [&b"{\"tx\":1,\"commit\":true,\"fragments\":[0,1]}"[..], b"x", b"third record"] {
            j.append(r).await.expect("append");
        }
        j.close().await;
    });
    let file = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "jrn"))
        .expect("journal file");
    let bytes = std::fs::read(file).expect("journal");
    std::fs::create_dir_all(corpus()).expect("corpus dir");
    std::fs::write(corpus().join("seed-three-records"), &bytes).expect("seed");
    std::fs::write(corpus().join("seed-header-only"), &bytes[..4096]).expect("seed");
    std::fs::write(corpus().join("seed-torn"), &bytes[..bytes.len() - 100]).expect("seed");
}

// Checks every corpus file goes through the fuzz body without panicking and the valid seeds
// yield their records.
#[test]
fn corpus_replays() {
    if std::env::var("TESSERA_WRITE_FUZZ_SEEDS").is_ok() {
        write_seeds();
    }
    let mut files = 0;
    for entry in std::fs::read_dir(corpus()).expect("corpus dir") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read");
        storage::journal::fuzz_journal_reader(&bytes);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let result = storage::journal::read_journal(&bytes);
        if name == "seed-three-records" {
            let image = result.expect("valid seed");
            assert_eq!(image.records.len(), 3);
            assert!(!image.torn);
        } else if name == "seed-torn" {
            let image = result.expect("a torn seed reads");
            assert!(image.torn);
            assert_eq!(image.records.len(), 2);
        }
        files += 1;
    }
    assert!(files >= 3, "seeds present");
}
