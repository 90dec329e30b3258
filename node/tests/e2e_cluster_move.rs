//! `ALTER FRAGMENT $n MOVE TO NODE m` on a cluster of two data nodes and a proxy (manual
//! allocation, so the coordinator plans nothing itself): a move asked through any node is
//! planned by the coordinator (asking again is refused: it is recorded), and each refusal has
//! its SQLSTATE: unknown fragment or node 42704, proxy target 42809, already owner or moving
//! 55000, syntax 42601, not a cluster 0A000, no coordinator reachable 57P03.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::time::Instant;

use support::cluster::{
    CLUSTER_DEADLINE, POLL_EVERY, cluster_args, local_fragments, simple, wait_for,
};
use support::{Node, NodeOptions, free_loopback_port, simple_rows, sqlstate};

const FRAGMENTS: u32 = 4;

/// `--move-target-silent-ms` of these nodes: short, so the test of a move to a killed node
/// waits two seconds, not the default minute.
const MOVE_TARGET_SILENT_MS: &str = "2000";

fn options(id: u32, role: &str, peer: u16, join: Option<u16>) -> NodeOptions {
    let more = [
        "--min-members",
        "2",
        "--allocation",
        "manual",
        "--role",
        role,
        "--move-target-silent-ms",
        MOVE_TARGET_SILENT_MS,
    ];
    let extra_args = cluster_args("move", id, peer, join, &more);
    NodeOptions { executors: 1, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

/// Runs `sql` on `node`: `Ok` or the SQLSTATE and message.
async fn run(node: &Node, sql: &str) -> Result<(), (String, String)> {
    match node.connect().await.simple_query(sql).await {
        Ok(_) => Ok(()),
        Err(e) => {
            Err((sqlstate(&e), e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default()))
        }
    }
}

/// Runs `sql` on `node`, expecting a refusal with SQLSTATE `want`; returns its message.
async fn refused(node: &Node, sql: &str, want: &str) -> String {
    let (state, message) = run(node, sql).await.expect_err(sql);
    assert_eq!(state, want, "{sql}: {message}");
    message
}

/// Polls until every node shows three members and an allocated map.
async fn wait_formed(nodes: &[Node]) {
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    loop {
        let mut ok = true;
        for n in nodes {
            let rows = match n.connect().await.simple_query("SHOW CLUSTER").await {
                Ok(m) => simple_rows(&m),
                Err(_) => Vec::new(),
            };
            ok &= rows.len() == 3
                && rows
                    .iter()
                    .all(|r| r[4].as_deref() == Some("t") && r[7].as_deref() == Some("1"));
        }
        if ok {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = nodes.iter().map(Node::log_text).collect();
            panic!("cluster never formed:\n{}", logs.join("\n-----\n"));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Two data nodes and a proxy (nodes 1, 2, 3), formed: fragments $0 and $2 on node 1, $1 and
/// $3 on node 2. Also the seed's peer port, for a node joining later.
async fn start_formed() -> (Vec<Node>, u16) {
    let ports: Vec<u16> = (0..3).map(|_| free_loopback_port()).collect();
    let mut nodes = vec![
        Node::start_with(options(1, "data", ports[0], None)),
        Node::start_with(options(2, "data", ports[1], Some(ports[0]))),
        Node::start_with(options(3, "proxy", ports[2], Some(ports[0]))),
    ];
    for n in &mut nodes {
        n.expect_log("is unreachable");
    }
    wait_formed(&nodes).await;
    (nodes, ports[0])
}

// Checks ALTER FRAGMENT and ALTER CLUSTER on a single node are 0A000.
#[tokio::test]
async fn alter_fragment_needs_a_cluster() {
    let node = Node::start();
    for sql in ["ALTER FRAGMENT $1 MOVE TO NODE 2", "ALTER CLUSTER REMOVE NODE 2"] {
        let (state, message) = run(&node, sql).await.unwrap_err();
        assert_eq!(state, "0A000", "{sql}: {message}");
        assert!(message.contains("needs a cluster"), "{sql}: {message}");
    }
}

// Checks a move planned through a follower and through the proxy, each refusal's SQLSTATE,
// and 57P03 once no coordinator is reachable.
#[tokio::test]
async fn alter_fragment_plans_moves_and_refuses_with_sqlstates() {
    let (mut nodes, _) = start_formed().await;
    // Manual allocation deals fragments 0..4 to nodes 1, 2, 1, 2.
    assert_eq!(run(&nodes[1], "ALTER FRAGMENT $0 MOVE TO NODE n2").await, Ok(()));
    let m = refused(&nodes[0], "ALTER FRAGMENT $0 MOVE TO NODE 2", "55000").await;
    assert!(m.contains("already planned"), "the plan is recorded: {m}");
    assert_eq!(run(&nodes[2], "alter fragment 2 move to node 2;").await, Ok(()), "via the proxy");
    let m = refused(&nodes[2], "ALTER FRAGMENT $1 MOVE TO NODE 2", "55000").await;
    assert!(m.contains("already owned by node 2"), "{m}");
    refused(&nodes[1], "ALTER FRAGMENT $99 MOVE TO NODE 2", "42704").await;
    refused(&nodes[0], "ALTER FRAGMENT $1 MOVE TO NODE 9", "42704").await;
    refused(&nodes[1], "ALTER FRAGMENT $1 MOVE TO NODE 3", "42809").await;
    refused(&nodes[0], "ALTER FRAGMENT $1 MOVE NODE 1", "42601").await;
    // The extended protocol (parse, bind, execute): `$3` names a fragment, not a parameter.
    let extended = &nodes[1].connect().await;
    assert_eq!(extended.execute("ALTER FRAGMENT $3 MOVE TO NODE 1", &[]).await.unwrap(), 0);
    let e = extended.execute("ALTER FRAGMENT $3 MOVE TO NODE 1", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e}");

    // Without the data nodes no coordinator answers the proxy.
    nodes[1].stop();
    nodes[0].stop();
    let m = refused(&nodes[2], "ALTER FRAGMENT $1 MOVE TO NODE 1", "57P03").await;
    assert!(m.contains("no coordinator reachable"), "{m}");
}

/// Documents loaded for the streamed SELECT below: about 3,500 of about 1 KiB in each of the
/// four fragments, so each fragment is several pages (`STREAM_PAGE_ROWS` is 1,024) and node
/// 1's two fragments are more than the socket buffers hold.
const STREAMED_DOCUMENTS: usize = 14_000;

// Checks a streamed SELECT through the proxy whose fragment moves after some of its rows were
// sent: the rows cannot be taken back, so the statement fails with 40001 (not 08006: the
// connection is fine) and asks to be run again; run again, it returns every document once.
#[tokio::test]
async fn a_fragment_moving_under_a_streamed_select_fails_it_with_40001() {
    use futures_util::StreamExt;
    use tokio_postgres::SimpleQueryMessage;

    let (nodes, _) = start_formed().await;
    let loader = nodes[0].connect().await;
    let pad = "x".repeat(1_000);
    for batch in 0..STREAMED_DOCUMENTS / 100 {
        let values: Vec<String> =
            (0..100).map(|i| format!(r#"('d{batch}-{i}', '{{"pad":"{pad}"}}')"#)).collect();
        let sql = format!("INSERT INTO big VALUES {}", values.join(", "));
        loader.simple_query(&sql).await.unwrap();
    }

    // A client that reads slowly: a small receive buffer, and once the first row is in it
    // reads nothing until the move is done. tokio-postgres stops reading its socket while a
    // response waits to be taken, so the proxy's session fills its send buffer and waits.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    let stream = socket.connect(nodes[2].addr()).await.unwrap();
    let config: tokio_postgres::Config = nodes[2].conn_str().parse().unwrap();
    let (reader, connection) = config.connect_raw(stream, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let rows = reader.simple_query_raw("SELECT id(), pad FROM big").await.unwrap();
    let mut rows = std::pin::pin!(rows);
    let mut seen = 0usize;
    while seen == 0 {
        match rows.next().await {
            Some(Ok(SimpleQueryMessage::Row(_))) => seen += 1,
            Some(Ok(_)) => {}
            other => panic!("the first row did not come: {other:?}"),
        }
    }

    // The proxy reads its fragments by owner, node 1's ($0, $2) first, each page of the next
    // asked for while one is sent: $3, on node 2 and last, has not been asked for yet.
    run(&nodes[1], "ALTER FRAGMENT $3 MOVE TO NODE 1").await.unwrap();
    let node1 = &nodes[0];
    wait_for(&[node1], "fragment $3 on node 1", || async {
        local_fragments(node1).await.filter(|f| f.contains_key("$3")).map(|_| ())
    })
    .await;

    let error = loop {
        match rows.next().await {
            Some(Ok(SimpleQueryMessage::Row(_))) => seen += 1,
            Some(Ok(_)) => {}
            Some(Err(e)) => break e,
            None => panic!("the SELECT ended after {seen} rows without an error"),
        }
    };
    assert_eq!(sqlstate(&error), "40001", "{error}");
    let message = error.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default();
    assert!(message.contains("run the statement again"), "{message}");
    assert!(seen < STREAMED_DOCUMENTS, "{seen} rows before the error");

    // The same session, run again: the new map, every document once.
    let again = simple_rows(&reader.simple_query("SELECT id() FROM big").await.unwrap());
    let ids: std::collections::BTreeSet<String> =
        again.iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!((again.len(), ids.len()), (STREAMED_DOCUMENTS, STREAMED_DOCUMENTS));
}

// Checks an operator's move to a data node that was then killed is dropped once that node has
// not answered for --move-target-silent-ms (2 s here), instead of waiting for it forever: the
// coordinator logs it at WARN, the fragment stays where it was, and a move of it to a node that
// answers is then accepted (55000 "already planned" while the first one stood) and done.
#[tokio::test]
async fn a_move_to_a_node_that_stopped_answering_is_dropped() {
    let (mut nodes, seed) = start_formed().await;
    let mut fourth = Node::start_with(options(4, "data", free_loopback_port(), Some(seed)));
    for n in nodes.iter_mut().chain([&mut fourth]) {
        n.expect_log("is unreachable");
        n.expect_log("handoff failed");
        n.expect_log("coordinator dropped a planned move");
    }
    let first = &nodes[0];
    let members = |reachable: usize| async move {
        let rows = simple(first, "SHOW CLUSTER").await?;
        let up = rows.iter().filter(|r| r[4].as_deref() == Some("t")).count();
        (rows.len() == 4 && up == reachable).then_some(())
    };
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "node 4 a reachable member", || members(4)).await;
    fourth.kill9();
    wait_for(&all, "node 4 unreachable", || members(3)).await;

    run(first, "ALTER FRAGMENT $1 MOVE TO NODE 4").await.unwrap();
    wait_for(&all, "the move to node 4 dropped", || async {
        all.iter()
            .any(|n| n.log_text().contains("coordinator dropped a planned move"))
            .then_some(())
    })
    .await;
    let owner = local_fragments(&nodes[1]).await.unwrap();
    assert!(owner.contains_key("$1"), "$1 stayed on node 2: {owner:?}");

    run(first, "ALTER FRAGMENT $1 MOVE TO NODE 1").await.unwrap();
    wait_for(&all, "$1 moved to node 1", || async {
        local_fragments(first).await.filter(|f| f.contains_key("$1")).map(|_| ())
    })
    .await;

    // The operator forgets the dead node, so node 2 stopping can hand its last fragment to
    // node 1 (with node 4 still a voter, node 1 alone would have no quorum).
    run(first, "ALTER CLUSTER REMOVE NODE 4").await.unwrap();
    nodes[1].stop();
    nodes[0].stop();
}
