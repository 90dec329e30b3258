//! A fragment opened through a relative path works: glommio 0.9.0 resolves paths with
//! `openat(-1, …)`, which fails with EBADF for a relative path, so `tessera serve --data-dir ./d`
//! could not start. Storage makes every path absolute before glommio sees it.

mod common;

use std::path::{Component, Path, PathBuf};

use common::*;
use serde_json::json;

const SEGMENT: u64 = 1 << 20;

/// `target` written relative to `base` (both absolute).
fn relative_to(target: &Path, base: &Path) -> PathBuf {
    let t: Vec<Component> = target.components().collect();
    let b: Vec<Component> = base.components().collect();
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c.as_os_str());
    }
    out
}

// Checks that writes, a reopen (recovery) and a compaction all work through a relative path.
#[test]
fn regression_fragment_opens_through_a_relative_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = std::env::current_dir().expect("cwd");
    let relative = relative_to(&dir.path().join("frag"), &cwd);
    assert!(relative.is_relative(), "{}", relative.display());
    run(move || async move {
        let f = open(&relative, options(SEGMENT)).await;
        f.apply(put("c", "a", json!(1))).await.expect("write through a relative path");
        f.close().await;
        let f = open(&relative, options(SEGMENT)).await;
        assert_eq!(f.get("c", "a").map(|d| d.id().to_owned()).as_deref(), Some("a"));
        f.compact().await.expect("compaction renames and removes through a relative path");
        f.close().await;
    });
}
