//! The region's bounds and its data connection's defences, on real `tessera` processes:
//! buffer overflow gives SQLSTATE 53400 and the buffered statements are still served once the
//! map exists; bad frames on a data connection close that connection only; an owner answers a
//! share routed by an old map with `StaleEpoch` and a share for a fragment it does not hold
//! with `NotMine`, and a content-placed INSERT planned with an older collection catalog with
//! 40001; a single node refuses data connections.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use node::cluster::forward::{self, DataMessage, Reply, Request, Share};
use node::cluster::limits::REGION_BUFFER_TOTAL;
use node::cluster::wire::{Hello, PROTOCOL_VERSION, Peer, Role};
use support::cluster::{CLUSTER_DEADLINE, POLL_EVERY, cluster_args};
use support::{Node, NodeOptions, free_loopback_port, simple_rows};

fn options(id: u32, peer: u16, join: Option<u16>, more: &[&str]) -> NodeOptions {
    let extra_args = cluster_args("limits", id, peer, join, more);
    NodeOptions { executors: 1, fragments: 4, extra_args, ..NodeOptions::default() }
}

/// Starts a cluster node; members that stop before it may be reported unreachable (WARN).
fn start(options: NodeOptions) -> Node {
    let mut node = Node::start_with(options);
    node.expect_log("is unreachable");
    node
}

async fn buffered(client: &tokio_postgres::Client) -> i64 {
    let rows = simple_rows(&client.simple_query("SHOW REGION").await.unwrap());
    rows.iter().map(|r| r[4].as_deref().unwrap().parse::<i64>().unwrap()).sum()
}

async fn raw_client(node: &Node) -> tokio_postgres::Client {
    let (client, conn) =
        tokio_postgres::connect(&node.conn_str(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

// Checks the overflow: with no map allocated (min-members not reached), REGION_BUFFER_TOTAL
// statements wait in the buffer; the next one fails at once with 53400 naming the buffer; once
// the second node joins, every buffered statement is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_buffer_overflow_gives_53400_and_buffered_statements_run() {
    let seed_port = free_loopback_port();
    let mut first = start(options(1, seed_port, None, &["--min-members", "2"]));
    let admin = first.connect().await;
    let mut waiting = Vec::new();
    for _ in 0..REGION_BUFFER_TOTAL {
        let client = raw_client(&first).await;
        waiting.push(tokio::spawn(async move {
            client.query_one("SELECT count(*) FROM docs", &[]).await.map(|r| r.get::<_, i64>(0))
        }));
    }
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    while buffered(&admin).await < REGION_BUFFER_TOTAL as i64 {
        assert!(Instant::now() < deadline, "statements not buffered: {}", first.log_text());
        tokio::time::sleep(POLL_EVERY).await;
    }
    let extra = raw_client(&first).await;
    let err = extra.query_one("SELECT count(*) FROM docs", &[]).await.unwrap_err();
    assert_eq!(support::sqlstate(&err), "53400", "{err}");
    let message = err.as_db_error().unwrap().message().to_owned();
    assert!(message.contains("is full"), "{message}");
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), &[]));
    for task in waiting {
        assert_eq!(task.await.unwrap().unwrap(), 0);
    }
    assert_eq!(buffered(&admin).await, 0);
    first.stop();
    second.stop();
}

fn startup() -> Vec<u8> {
    let mut p = 8i32.to_be_bytes().to_vec();
    p.extend_from_slice(&node::pg::frame::PEER_DATA_CODE.to_be_bytes());
    p
}

fn hello(cluster: &str, node: u64) -> Vec<u8> {
    let hello = Hello {
        cluster: cluster.to_owned(),
        version: PROTOCOL_VERSION,
        peer: Peer {
            node,
            role: Role::Proxy,
            peer_addr: "127.0.0.1:1".into(),
            pg_addr: "127.0.0.1:1".into(),
            executors: 0,
        },
    };
    forward::encode_data_frame(&DataMessage::Hello(hello)).unwrap()
}

/// Reads frames until one decodes; `None` when the node closed the connection first.
fn read_message(stream: &mut TcpStream) -> Option<DataMessage> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((m, _))) = forward::decode_data_frame(&buf) {
            return Some(m);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Whether the node closed `stream` (EOF within the read timeout).
fn closed(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 64];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            // A reset: the node closed with our bytes unread.
            Err(_) => return true,
        }
    }
}

fn dial(node: &Node) -> TcpStream {
    let s = TcpStream::connect(node.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn request(epoch: u64, share: Share) -> Vec<u8> {
    request_of("SELECT count(*) FROM docs", epoch, share)
}

/// A forwarded request of `sql`, planned with catalog version 0 (older than any change).
fn request_of(sql: &str, epoch: u64, share: Share) -> Vec<u8> {
    let r = Request { epoch, catalog: 0, sql: sql.into(), index: 0, params: Vec::new(), share };
    forward::encode_data_frame(&DataMessage::Request(r)).unwrap()
}

// Checks the data connection's defences and the owner's answers: garbage after the startup
// code, another cluster's hello, a frame with a bad checksum after a good handshake and a
// length over the limit each close that connection only (the node keeps serving SQL and other
// data connections); a share routed by an older map is answered `StaleEpoch`, one for a
// fragment the node does not hold `NotMine`, a good one with partial results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_data_connection_bad_frames_and_owner_answers() {
    let mut node = start(options(1, free_loopback_port(), None, &["--min-members", "1"]));
    let client = node.connect().await;
    client.batch_execute("INSERT INTO docs VALUES ('a', '{}'), ('b', '{}')").await.unwrap_or(());
    // Garbage instead of a hello.
    let mut s = dial(&node);
    s.write_all(&startup()).unwrap();
    s.write_all(b"\x10\x00\x00\x00not a frame at all, no").unwrap();
    assert!(closed(&mut s), "garbage must close the connection");
    // Another cluster's hello is refused with a reason, then closed.
    let mut s = dial(&node);
    s.write_all(&startup()).unwrap();
    s.write_all(&hello("other", 9)).unwrap();
    match read_message(&mut s) {
        Some(DataMessage::Refused { reason }) => assert!(reason.contains("other"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(closed(&mut s));
    // A good handshake, then the owner's answers, then a bad checksum.
    let mut s = dial(&node);
    s.write_all(&startup()).unwrap();
    s.write_all(&hello("limits", 9)).unwrap();
    match read_message(&mut s) {
        Some(DataMessage::Hello(h)) => assert_eq!(h.peer.node, 1),
        other => panic!("expected a hello, got {other:?}"),
    }
    s.write_all(&request(1, Share::Fragments)).unwrap();
    let fragments = match read_message(&mut s) {
        Some(DataMessage::Reply(Reply::Fragments(f))) => f,
        other => panic!("expected fragments, got {other:?}"),
    };
    assert_eq!(fragments.len(), 4);
    s.write_all(&request(0, Share::Fragments)).unwrap();
    assert_eq!(read_message(&mut s), Some(DataMessage::Reply(Reply::StaleEpoch { current: 1 })));
    let not_held = forward::WireTarget { fragment: 77, ranges: Vec::new() };
    s.write_all(&request(1, Share::Select { targets: vec![not_held] })).unwrap();
    assert_eq!(read_message(&mut s), Some(DataMessage::Reply(Reply::NotMine { fragment: 77 })));
    let all: Vec<forward::WireTarget> = fragments
        .iter()
        .map(|f| forward::WireTarget {
            fragment: f.fragment,
            ranges: vec![forward::WireRange { start: f.start, end: f.end }],
        })
        .collect();
    s.write_all(&request(1, Share::Select { targets: all })).unwrap();
    match read_message(&mut s) {
        Some(DataMessage::Reply(Reply::Partials(p))) => assert_eq!(p.len(), 4),
        other => panic!("expected partials, got {other:?}"),
    }
    // A transaction's INSERT placed by content, planned with an older collection catalog than
    // the owner's: the owner would place it by another configuration, so it writes nothing
    // and answers 40001 (the client retries); a plain id does not depend on the catalog.
    client
        .batch_execute(r#"CREATE TABLE inv () WITH (sharding = '{"Fields": ["Customer"]}')"#)
        .await
        .unwrap();
    let insert = |id: &str| {
        let targets = fragments
            .iter()
            .map(|f| forward::WireTxnTarget {
                fragment: f.fragment,
                ranges: Vec::new(),
                writes: Vec::new(),
                reads: forward::WireReads::default(),
            })
            .collect();
        let sql = format!(r#"INSERT INTO inv VALUES ('{id}', '{{"Customer": "c/1"}}')"#);
        request_of(&sql, 1, Share::TxnWrite { targets })
    };
    s.write_all(&insert("inv/1$")).unwrap();
    match read_message(&mut s) {
        Some(DataMessage::Reply(Reply::Failed { code, message })) => {
            assert_eq!(code, "40001", "{message}");
            assert!(message.contains("catalog changed"), "{message}");
        }
        other => panic!("expected a retryable failure, got {other:?}"),
    }
    s.write_all(&insert("inv/plain")).unwrap();
    match read_message(&mut s) {
        // Placed by its id, then refused by the configuration in force: 23514.
        Some(DataMessage::Reply(Reply::Failed { code, .. })) => assert_eq!(code, "23514"),
        other => panic!("expected the content check's refusal, got {other:?}"),
    }
    let mut bad = request(1, Share::Fragments);
    bad[12] ^= 0x01;
    s.write_all(&bad).unwrap();
    assert!(closed(&mut s), "a bad checksum must close the connection");
    // A length over the frame limit.
    let mut s = dial(&node);
    s.write_all(&startup()).unwrap();
    s.write_all(&hello("limits", 9)).unwrap();
    assert!(matches!(read_message(&mut s), Some(DataMessage::Hello(_))));
    s.write_all(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).unwrap();
    assert!(closed(&mut s), "an oversize frame must close the connection");
    // The node is fine.
    let rows = simple_rows(&client.simple_query("SELECT 1").await.unwrap());
    assert_eq!(rows, [[Some("1".to_owned())]]);
    assert!(node.is_running());
    node.stop();
}

// Checks a single node refuses a data connection with a FATAL error (it has no cluster).
#[test]
fn e2e_single_node_refuses_data_connections() {
    let mut node = Node::start();
    let mut s = dial(&node);
    s.write_all(&startup()).unwrap();
    let mut first = [0u8; 1];
    s.read_exact(&mut first).unwrap();
    assert_eq!(first[0], b'E', "an ErrorResponse");
    node.stop();
}
