//! The metrics endpoint seen by a scraper: real HTTP requests to a running node. The answer
//! parses as Prometheus text (a strict parser of the exposition format 0.0.4 below), its
//! counters move with a write and read load, `SHOW STATS` carries the same names, and bad
//! requests get 4xx answers without hurting the node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::{Node, NodeOptions, simple_rows};

/// Bounds a request to the node so a hang becomes a failure (not a synchronisation delay).
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends raw bytes, reads the whole answer (the node closes after one), returns (status, body).
fn http(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(HTTP_TIMEOUT)).unwrap();
    stream.write_all(request).expect("send request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read answer");
    let text = String::from_utf8(answer).expect("UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let status_line = head.lines().next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
    let status: u16 = parts.next().unwrap().parse().unwrap();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map(|l| l.parse::<usize>().unwrap());
    if let Some(length) = length
        && !request.starts_with(b"HEAD")
    {
        assert_eq!(body.len(), length, "Content-Length matches the body");
    }
    if status == 200 {
        assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    }
    (status, body.to_owned())
}

fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let (status, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_eq!(status, 200);
    parse_prometheus(&body)
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses `name{a="x",b="y"}` labels strictly; returns the labels in order.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("label in {text:?}"));
        assert!(is_name(name) && !name.contains(':'), "label name {name:?}");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next().unwrap_or_else(|| panic!("unterminated label in {text:?}"));
            match c {
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    other => panic!("bad escape {other:?} in {text:?}"),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.push((name.to_owned(), value));
        rest = &after[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
            assert!(!rest.is_empty(), "trailing comma in {text:?}");
        }
    }
    labels
}

/// A strict reader of the text exposition format: every sample belongs to a family declared
/// with HELP and TYPE before it, names and labels are well formed, values are numbers,
/// histogram buckets are cumulative and end with `+Inf` equal to `_count`. Returns
/// `name{labels}` to value.
fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = BTreeSet::new();
    let mut samples = BTreeMap::new();
    // Per histogram and label set (without le): the last bucket count seen.
    let mut buckets: BTreeMap<String, f64> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(is_name(name) && !help.is_empty(), "{line}");
            assert!(helped.insert(name.to_owned()), "HELP twice for {name}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(helped.contains(name), "TYPE before HELP for {name}");
            assert!(matches!(kind, "counter" | "gauge" | "histogram"), "{line}");
            assert!(types.insert(name.to_owned(), kind.to_owned()).is_none(), "TYPE twice");
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let (series, value) = line.rsplit_once(' ').expect("sample and value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, parse_labels(l.strip_suffix('}').expect("closing brace"))),
            None => (series, Vec::new()),
        };
        assert!(is_name(name), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s).filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        let kind = types.get(family).unwrap_or_else(|| panic!("sample before TYPE: {line}"));
        if kind == "counter" || name.ends_with("_count") || name.ends_with("_bucket") {
            assert!(value >= 0.0, "{line}");
        }
        if name.ends_with("_bucket") && kind == "histogram" {
            let le = labels.iter().find(|(k, _)| k == "le").expect("bucket has le");
            let rest: Vec<_> = labels.iter().filter(|(k, _)| k != "le").collect();
            let key = format!("{family}{rest:?}");
            let last = buckets.get(&key).copied().unwrap_or(0.0);
            assert!(value >= last, "buckets are cumulative: {line}");
            buckets.insert(key.clone(), value);
            if le.1 == "+Inf" {
                buckets.insert(format!("{key}+Inf"), value);
            } else {
                le.1.parse::<f64>().unwrap_or_else(|_| panic!("le in {line}"));
            }
        }
        if name.ends_with("_count") && kind == "histogram" {
            let key = format!("{family}{:?}+Inf", labels.iter().collect::<Vec<_>>());
            assert_eq!(buckets.get(&key), Some(&value), "+Inf bucket equals _count: {line}");
        }
        let shown = labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
        assert!(samples.insert(format!("{name}{{{shown}}}"), value).is_none(), "duplicate {line}");
    }
    samples
}

/// Sum of every sample of `name` whose labels contain each of `with` (`k=v`).
fn total(samples: &BTreeMap<String, f64>, name: &str, with: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| {
            k.split_once('{').is_some_and(|(n, labels)| {
                n == name
                    && with.iter().all(|w| labels.trim_end_matches('}').split(',').any(|l| l == *w))
            })
        })
        .map(|(_, v)| v)
        .sum()
}

// Checks a real scrape before and after a load: the text parses strictly, and statements by
// kind, routing opcodes, rows written and read, fdatasyncs with the writes they covered, bytes
// appended and the latency histograms all grow; SHOW STATS names the same metrics.
#[tokio::test]
async fn scrape_parses_and_counters_move_with_load() {
    let node = Node::start_with(NodeOptions { metrics: true, ..NodeOptions::default() });
    let addr = node.metrics_addr().expect("metrics address");
    let before = scrape(addr);
    assert!(before.keys().any(|k| k.starts_with("tessera_fragment_documents{")), "{before:?}");
    let client = node.connect().await;
    for i in 0..40 {
        client
            .simple_query(&format!(r#"INSERT INTO items VALUES ('items/{i}', '{{"n": {i}}}')"#))
            .await
            .unwrap();
    }
    for i in 0..10 {
        client
            .simple_query(&format!("SELECT * FROM items WHERE id() = 'items/{i}'"))
            .await
            .unwrap();
    }
    client.simple_query("SELECT count(*) FROM items").await.unwrap();
    // Routed twice inside (counting its fragments, then running), counted once.
    client.simple_query("UPDATE items SET n = 0 WHERE id() = 'items/1'").await.unwrap();
    let after = scrape(addr);
    let grew = |name: &str, with: &[&str]| total(&after, name, with) - total(&before, name, with);
    assert_eq!(grew("tessera_statements_total", &["kind=insert"]), 40.0);
    assert_eq!(grew("tessera_statements_total", &["kind=select"]), 11.0);
    assert_eq!(grew("tessera_routes_total", &["opcode=single"]), 51.0, "once per statement");
    assert_eq!(grew("tessera_routes_total", &["opcode=scatter"]), 1.0);
    assert_eq!(grew("tessera_rows_written_total", &[]), 41.0);
    assert!(grew("tessera_rows_read_total", &[]) >= 50.0);
    assert_eq!(grew("tessera_commits_total", &[]), 41.0);
    assert!(grew("tessera_fragment_fdatasyncs_total", &[]) >= 1.0);
    assert_eq!(grew("tessera_fragment_writes_synced_total", &[]), 41.0);
    assert!(grew("tessera_fragment_bytes_appended_total", &[]) >= 40.0 * 4096.0);
    assert_eq!(total(&after, "tessera_fragment_documents", &[]), 40.0);
    assert!(grew("tessera_statement_duration_seconds_count", &[]) >= 52.0);
    assert_eq!(grew("tessera_commit_duration_seconds_count", &[]), 41.0);
    assert!(grew("tessera_fdatasync_duration_seconds_count", &[]) >= 1.0);
    // Every group commit is also split into its four phases, once each.
    let commits = grew("tessera_fdatasync_duration_seconds_count", &[]);
    for phase in ["thread_wait", "write", "fdatasync", "notice"] {
        let with = format!("phase={phase}");
        let split = grew("tessera_group_commit_phase_seconds_count", &[with.as_str()]);
        assert_eq!(split, commits, "{phase}");
    }
    assert!(total(&after, "tessera_connections", &[]) >= 1.0);
    assert!(
        total(&after, "tessera_mesh_calls_total", &[]) >= 1.0,
        "scrapes and scatters cross cores"
    );

    let rows = simple_rows(&client.simple_query("SHOW STATS").await.unwrap());
    let names: BTreeSet<String> = rows.iter().map(|r| r[0].clone().unwrap()).collect();
    for name in [
        "tessera_statements_total",
        "tessera_fragment_fdatasyncs_total",
        "tessera_statement_duration_seconds_bucket",
    ] {
        assert!(names.contains(name), "SHOW STATS lacks {name}");
    }
    let inserts: f64 = rows
        .iter()
        .filter(|r| r[0].as_deref() == Some("tessera_statements_total"))
        .filter(|r| r[1].as_deref().is_some_and(|l| l.contains("kind=\"insert\"")))
        .map(|r| r[2].as_deref().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(inserts, 40.0, "SHOW STATS counts what the endpoint counts");

    // A text this connection's executor parsed twice before is planned from its parse
    // cache (kept the second time it was seen).
    client.simple_query("SELECT count(*) FROM items").await.unwrap();
    let before = scrape(addr);
    for _ in 0..5 {
        client.simple_query("SELECT count(*) FROM items").await.unwrap();
    }
    let after = scrape(addr);
    let grew = |name: &str| total(&after, name, &[]) - total(&before, name, &[]);
    assert_eq!(grew("tessera_parse_cache_hits_total"), 5.0);
    assert_eq!(grew("tessera_parse_cache_misses_total"), 0.0);
    assert!(total(&after, "tessera_parse_cache_entries", &[]) >= 1.0);
}

// Checks that transaction outcomes reach the endpoint: a one-document block commits on the fast
// path, a multi-row INSERT over every fragment commits by two-phase commit, a ROLLBACK counts
// as an abort; nothing stays prepared once the commit is finished.
#[tokio::test]
async fn transaction_counters_move() {
    let node = Node::start_with(NodeOptions { metrics: true, ..NodeOptions::default() });
    let addr = node.metrics_addr().expect("metrics address");
    let client = node.connect().await;
    let before = scrape(addr);
    client
        .batch_execute(r#"BEGIN; INSERT INTO t VALUES ('one', '{"n": 1}'); COMMIT"#)
        .await
        .unwrap();
    let rows: Vec<String> = (0..32).map(|i| format!(r#"('many/{i}', '{{"n": {i}}}')"#)).collect();
    client.batch_execute(&format!("INSERT INTO t VALUES {}", rows.join(", "))).await.unwrap();
    client.batch_execute(r#"BEGIN; INSERT INTO t VALUES ('gone', '{}'); ROLLBACK"#).await.unwrap();
    let after = scrape(addr);
    let grew = |name: &str, with: &[&str]| total(&after, name, with) - total(&before, name, with);
    assert_eq!(grew("tessera_transactions_total", &["outcome=fast_path_commit"]), 1.0);
    assert_eq!(grew("tessera_transactions_total", &["outcome=two_phase_commit"]), 1.0);
    assert_eq!(grew("tessera_transactions_total", &["outcome=abort"]), 1.0);
    assert_eq!(grew("tessera_transaction_conflicts_total", &[]), 0.0);
    assert_eq!(grew("tessera_transaction_range_conflicts_total", &[]), 0.0);
    // Participants drop a prepared transaction once its COMMIT records are durable, which may
    // be just after the client heard COMMIT: wait (bounded) for that.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while total(&scrape(addr), "tessera_transactions_prepared", &[]) != 0.0 {
        assert!(std::time::Instant::now() < deadline, "a committed transaction stays prepared");
        tokio::task::yield_now().await;
    }
}

// Checks that bad requests get their 4xx (or 505) and never hurt the node: wrong method,
// wrong path, garbage, an oversized head, too many headers, a request cut short, an
// unsupported version; afterwards a scrape still works and the node stops cleanly.
#[test]
fn bad_requests_get_4xx_and_never_crash() {
    let node = Node::start_with(NodeOptions { metrics: true, ..NodeOptions::default() });
    let addr = node.metrics_addr().expect("metrics address");
    assert_eq!(http(addr, b"POST /metrics HTTP/1.1\r\n\r\n").0, 405);
    assert_eq!(http(addr, b"GET / HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(http(addr, b"GET /metricsx HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(http(addr, b"\x00\x01\x02garbage\r\n\r\n").0, 400);
    assert_eq!(http(addr, b"GET /metrics HTTP/3.0\r\n\r\n").0, 505);
    assert_eq!(http(addr, b"GET /metrics HTTP/1.1\r\nbroken header\r\n\r\n").0, 400);
    let huge = format!("GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(http(addr, huge.as_bytes()).0, 431);
    let many = format!("GET /metrics HTTP/1.1\r\n{}\r\n", "X-A: b\r\n".repeat(100));
    assert_eq!(http(addr, many.as_bytes()).0, 431);
    assert_eq!(http(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").0, 200);
    // A request cut short: the node waits, the client leaves; nothing breaks.
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metr").unwrap();
    }
    let samples = scrape(addr);
    assert!(!samples.is_empty());
    drop(node);
}
