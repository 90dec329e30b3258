//! `tessera verify` on a stopped node's data directory: a healthy directory passes with one
//! line per fragment; a directory a running node holds is refused; a flipped byte in a record
//! followed by later records is found and named by segment and offset, with exit status 1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Node, run_client};

fn verify(dir: &Path) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.arg("verify").arg("--data-dir").arg(dir);
    run_client(c)
}

fn largest_segment(data_dir: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(data_dir.join("fragments"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    // Most records: the one whose last non-zero byte is furthest in.
    segments.sort_by_key(|p| {
        let bytes = std::fs::read(p).unwrap();
        bytes.iter().rposition(|&b| b != 0).unwrap_or(0)
    });
    segments.pop().unwrap()
}

// Checks the three outcomes: refused while running (exit 2), sound when stopped (exit 0, one
// line per fragment), and a flipped record byte named by segment and chunk offset (exit 1).
#[tokio::test]
async fn verify_finds_and_names_injected_corruption() {
    let mut node = Node::start();
    {
        let client = node.connect().await;
        // One statement per document: one chunk each, so chunk 1 is followed by later ones.
        for i in 0..60 {
            client
                .simple_query(&format!(r#"INSERT INTO c VALUES ('d{i}', '{{"i": {i}}}')"#))
                .await
                .unwrap();
        }
    }
    let running = verify(node.data_dir());
    assert_eq!(running.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&running.stderr).contains("running node"));
    node.stop();

    let sound = verify(node.data_dir());
    let stdout = String::from_utf8_lossy(&sound.stdout);
    assert!(sound.status.success(), "{stdout}{}", String::from_utf8_lossy(&sound.stderr));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("fragment $") && l.contains(": ok")).count(),
        8
    );
    assert!(stdout.contains("60 documents") || stdout.contains("documents"), "{stdout}");
    let docs: u64 = stdout
        .lines()
        .filter_map(|l| l.split(", ").find_map(|p| p.strip_suffix(" documents")))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(docs, 60);

    // The first chunk starts right after the 4 KiB segment header; flip a byte of its record.
    let segment = largest_segment(node.data_dir());
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[4096 + 48] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    let damaged = verify(node.data_dir());
    let stdout = String::from_utf8_lossy(&damaged.stdout);
    assert_eq!(damaged.status.code(), Some(1), "{stdout}");
    let line = stdout.lines().find(|l| l.contains("PROBLEM")).expect("a problem line");
    assert!(line.contains(&segment.display().to_string()), "names the segment: {line}");
    assert!(line.contains("offset 4096"), "names the offset: {line}");
    assert!(stdout.contains("verify: PROBLEMS FOUND"));
    // Put it back so the harness's clean-up sees a healthy directory.
    bytes[4096 + 48] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    assert!(verify(node.data_dir()).status.success());
}
