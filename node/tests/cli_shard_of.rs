//! Runs the built `tessera` binary's `shard-of` subcommand and checks its output lines and
//! exit status, as an operator would see them.

use std::path::PathBuf;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("shard-of")
        .args(args)
        .output()
        .expect("running the tessera binary")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

/// A configuration file under the test target's scratch directory, named per test.
fn config_file(name: &str, json: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cli_shard_of-{name}.json"));
    std::fs::write(&path, json).expect("writing the configuration file");
    path
}

// Checks the brief's done-criterion and the SHARDING.md §2 vectors, one line per id.
#[test]
fn prints_shards() {
    let out = tessera(&[
        "orders/2-A$customers/1-A",
        "orders/1-A",
        "orders/1-A$@982173",
        "a$b$customers/1-A",
        "$@5",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        "orders/2-A$customers/1-A\t982173\norders/1-A\t151326\norders/1-A$@982173\t982173\n\
         a$b$customers/1-A\t982173\n$@5\t434747\n"
    );
}

// Checks a bad id prints `<id>\terror: <reason>`, the other ids still print, and the status
// is non-zero.
#[test]
fn reports_errors() {
    let out = tessera(&["orders/1-A$@1048576", "users/1", "orders/1-A$"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("orders/1-A$@1048576\terror: "), "{text}");
    assert!(lines[0].contains("out of range"), "{text}");
    assert_eq!(lines[1], "users/1\t1005385");
    assert!(lines[2].starts_with("orders/1-A$\terror: "), "{text}");
}

// Checks --config/--doc show the content-based assignment of a trailing-`$` id (SHARDING.md
// §3 example) while ordinary ids print as usual.
#[test]
fn shows_content_assignment() {
    let config = config_file("range1000", r#"{"Fields": ["Customer"], "Range": 1000}"#);
    let config = config.to_str().expect("UTF-8 path");
    let out = tessera(&[
        "--config",
        config,
        "--doc",
        r#"{"Customer": "customers/1-A"}"#,
        "orders/1-A$",
        "orders/1-A",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "orders/1-A$\t982326\torders/1-A$@982326\norders/1-A\t151326\n");
}

// Checks an unusable configuration or document fails with status 2 and a message on stderr.
#[test]
fn refuses_bad_arguments() {
    let config = config_file("bad", r#"{"Fields": [], "Range": 1}"#);
    let config = config.to_str().expect("UTF-8 path");
    let out = tessera(&["--config", config, "--doc", "{}", "x$"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Fields"));
    let good = config_file("good", r#"{"Fields": ["Customer"]}"#);
    let out = tessera(&["--config", good.to_str().expect("UTF-8 path"), "--doc", "{", "x$"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = tessera(&["--doc", "{}", "x$"]);
    assert!(!out.status.success(), "--doc needs --config");
    let out = tessera(&[]);
    assert!(!out.status.success(), "at least one id is required");
}

// Checks an id that is not UTF-8 (possible in a Unix argument) is a typed error line, shown
// with the replacement character, not a crash.
#[test]
fn non_utf8_id_is_an_error_line() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("shard-of")
        .arg(OsStr::from_bytes(b"ab\xffc"))
        .output()
        .expect("running the tessera binary");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert!(text.starts_with("ab\u{fffd}c\terror: "), "{text}");
    assert!(text.contains("not valid UTF-8"), "{text}");
}
