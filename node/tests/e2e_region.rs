//! The cluster's data path (issue #7, regions): nodes serve the fragments of the replicated
//! shard map, statements for fragments without a location wait in bounded buffers, and every
//! node serves every document by forwarding each remote node's share to its owner. Every
//! wait polls until a deadline (polling, not synchronisation).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};

use support::cluster::{cluster_args, id_owned_by, simple, wait_for};
use support::{Node, NodeOptions, free_loopback_port, simple_rows, sqlstate};

const FRAGMENTS: u32 = 6;

fn options(id: u32, peer: u16, join: Option<u16>, executors: u32, more: &[&str]) -> NodeOptions {
    let extra_args = cluster_args("region", id, peer, join, more);
    NodeOptions { executors, fragments: FRAGMENTS, extra_args, ..NodeOptions::default() }
}

/// Starts a cluster node; members that stop before it may be reported unreachable (WARN).
fn start(options: NodeOptions) -> Node {
    let mut node = Node::start_with(options);
    node.expect_log("is unreachable");
    node
}

/// (epoch, fragments per node) as `node` shows it in SHOW CLUSTER.
async fn cluster_map(node: &Node) -> Option<(u64, BTreeMap<u32, u64>)> {
    let rows = simple(node, "SHOW CLUSTER").await?;
    let epoch = rows.first()?[7].as_deref()?.parse().ok()?;
    let per_node = rows
        .iter()
        .map(|r| {
            (r[0].as_deref().unwrap().parse().unwrap(), r[8].as_deref().unwrap().parse().unwrap())
        })
        .collect();
    Some((epoch, per_node))
}

/// The fragments node `id` serves itself, from `node`'s cluster-wide SHOW FRAGMENTS
/// (fragment, range, owner `node N executor E`, documents, bytes, state).
async fn fragments_of(node: &Node, id: u32) -> Option<BTreeSet<String>> {
    let rows = simple(node, "SHOW FRAGMENTS").await?;
    let prefix = format!("node {id} ");
    Some(
        rows.iter()
            .filter(|r| r[2].as_deref().unwrap().starts_with(&prefix))
            .map(|r| r[0].clone().unwrap())
            .collect(),
    )
}

/// Statements buffered on `node` (SHOW REGION's `buffered`, summed).
async fn buffered(node: &Node) -> Option<i64> {
    let rows = simple(node, "SHOW REGION").await?;
    Some(rows.iter().map(|r| r[4].as_deref().unwrap().parse::<i64>().unwrap()).sum())
}

/// One document id per fragment of an even map of `FRAGMENTS` (how the coordinator cuts it).
fn one_id_per_fragment() -> Vec<String> {
    let map = router::ShardMap::even(FRAGMENTS, &[router::Owner::new(0, 0)]).unwrap();
    map.fragments()
        .iter()
        .map(|f| {
            (0..100_000)
                .map(|i| format!("docs/f{i}"))
                .find(|id| {
                    let shard = router::shard_of(id).unwrap().shard().unwrap();
                    f.range().contains(shard)
                })
                .unwrap()
        })
        .collect()
}

// Checks step 1 of the data path: once the coordinator allocates the map, each data node opens
// exactly the fragments the map gives it (created empty), on as many executors as it runs, the
// fragments of all data nodes are every fragment once, and a proxy opens none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_nodes_open_the_fragments_the_map_gives_them() {
    let seed_port = free_loopback_port();
    let mut first = start(options(1, seed_port, None, 2, &["--min-members", "2"]));
    let mut proxy =
        start(options(3, free_loopback_port(), Some(seed_port), 1, &["--role", "proxy"]));
    // Before min-members, nothing is allocated and nothing is open.
    assert_eq!(simple(&first, "SHOW FRAGMENTS").await.unwrap(), Vec::<Vec<Option<String>>>::new());
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), 1, &[]));
    let nodes = [&first, &second, &proxy];
    let (epoch, per_node) = wait_for(&nodes, "an allocated map", || async {
        let m = cluster_map(&first).await?;
        (m.0 > 0 && m.1.len() == 3).then_some(m)
    })
    .await;
    assert!(epoch >= 1);
    let mut all = BTreeSet::new();
    for (id, node) in [(1u32, &first), (2, &second), (3, &proxy)] {
        let want = per_node[&id];
        let open = wait_for(&nodes, "a node's fragments open", || async {
            let open = fragments_of(node, id).await?;
            (open.len() as u64 == want).then_some(open)
        })
        .await;
        if id == 3 {
            assert!(open.is_empty(), "a proxy opens no fragment");
        }
        for f in &open {
            assert!(all.insert(f.clone()), "fragment {f} open on two nodes");
        }
    }
    assert_eq!(all.len(), FRAGMENTS as usize, "every fragment open exactly once: {all:?}");
    // The first node spreads its fragments over its two executors, as the map says.
    let rows = simple(&first, "SHOW FRAGMENTS").await.unwrap();
    let executors: BTreeSet<String> =
        rows.iter().filter_map(|r| r[2].clone().filter(|o| o.starts_with("node 1 "))).collect();
    if per_node[&1] >= 2 {
        assert_eq!(executors.len(), 2, "{rows:?}");
    }
    for n in [&mut first, &mut second, &mut proxy] {
        n.stop();
    }
}

async fn connect(node: &Node) -> tokio_postgres::Client {
    node.connect().await
}

// Checks the region end to end on two data nodes and a proxy: the two Akka scenarios (first
// requests, made before min-members is reached, for fragments that end up local and remote to
// the node asked, and a read on the proxy: buffered, then served once the second node joins),
// every document written through any node readable through every node exactly once, exact
// aggregates over all nodes, the proxy writing and updating, parameters forwarded, a write
// spanning nodes committed as one transaction and a transaction block reading every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_buffered_then_served_through_every_node() {
    let seed_port = free_loopback_port();
    let mut first = start(options(1, seed_port, None, 2, &["--min-members", "2"]));
    let mut proxy =
        start(options(3, free_loopback_port(), Some(seed_port), 1, &["--role", "proxy"]));
    // First requests before any fragment is allocated: one per future fragment on the first
    // node, a count on the proxy. They wait in the region buffers.
    let ids = one_id_per_fragment();
    let mut early = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let client = connect(&first).await;
        let sql = format!("INSERT INTO docs VALUES ('{id}', '{{\"n\": {i}, \"g\": \"early\"}}')");
        early.push(tokio::spawn(async move { client.simple_query(&sql).await.map(|_| ()) }));
    }
    let proxy_client = connect(&proxy).await;
    let proxy_count = tokio::spawn(async move {
        proxy_client
            .query_one("SELECT count(*) FROM docs WHERE g::text = 'early'", &[])
            .await
            .map(|r| r.get::<_, i64>(0))
    });
    let want = ids.len() as i64;
    wait_for(&[&first, &proxy], "the first node buffers its first requests", || async {
        (buffered(&first).await? == want).then_some(())
    })
    .await;
    wait_for(&[&first, &proxy], "the proxy buffers its first request", || async {
        (buffered(&proxy).await? == 1).then_some(())
    })
    .await;
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), 1, &[]));
    for task in early {
        task.await.unwrap().unwrap();
    }
    let counted = proxy_count.await.unwrap().unwrap();
    assert!((0..=want).contains(&counted), "a count between none and all: {counted}");
    // Both scenarios happened: the first node owns some of those fragments and not others.
    let mine = fragments_of(&first, 1).await.unwrap();
    assert!(!mine.is_empty() && mine.len() < FRAGMENTS as usize, "{mine:?}");
    assert_eq!(buffered(&first).await.unwrap(), 0);

    // Writes through every node, reads through every node.
    let clients = [connect(&first).await, connect(&second).await, connect(&proxy).await];
    let mut expected_sum = (0..ids.len() as i64).sum::<i64>();
    for i in 0..60_i64 {
        let c = &clients[usize::try_from(i).unwrap() % 3];
        let g = if i % 2 == 0 { "even" } else { "odd" };
        let insert = format!("INSERT INTO docs VALUES ($1, '{{\"n\": {i}, \"g\": \"{g}\"}}')");
        c.execute(insert.as_str(), &[&format!("docs/{i}")]).await.unwrap();
        expected_sum += i;
    }
    let total = 60 + ids.len() as i64;
    for (k, c) in clients.iter().enumerate() {
        let row = c.query_one("SELECT count(*), sum(n::int8) FROM docs", &[]).await.unwrap();
        assert_eq!(
            (row.get::<_, i64>(0), row.get::<_, i64>(1)),
            (total, expected_sum),
            "via client {k}"
        );
        let ids_seen: Vec<String> = c
            .query("SELECT id() FROM docs ORDER BY id()", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let distinct: BTreeSet<&String> = ids_seen.iter().collect();
        assert_eq!(distinct.len(), ids_seen.len(), "no document twice via client {k}");
        assert_eq!(ids_seen.len() as i64, total);
        let groups = simple_rows(
            &c.simple_query("SELECT g::text, count(*), min(n::int8), max(n::int8) FROM docs GROUP BY 1 ORDER BY 1")
                .await
                .unwrap(),
        );
        assert_eq!(groups.len(), 3, "{groups:?}");
        // Each node's distinct values cross the wire as sets, so one counts once.
        let row = c.query_one("SELECT count(DISTINCT g) FROM docs", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 3, "via client {k}");
        // n is 0..60 once each, plus the early documents' 0..ids.len(): each value once.
        let row = c.query_one("SELECT sum(DISTINCT n::int8) FROM docs", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), (0..60).sum::<i64>(), "via client {k}");
        let limited =
            c.query("SELECT id() FROM docs ORDER BY n::int8 DESC LIMIT 3", &[]).await.unwrap();
        let top: Vec<String> = limited.iter().map(|r| r.get(0)).collect();
        assert_eq!(top, ["docs/59", "docs/58", "docs/57"], "via client {k}");
        for i in [0_i64, 17, 59] {
            let n: i64 = c
                .query_one("SELECT n::int8 FROM docs WHERE id() = $1", &[&format!("docs/{i}")])
                .await
                .unwrap()
                .get(0);
            assert_eq!(n, i);
        }
    }
    // The proxy updates and deletes documents wherever they live.
    for i in 0..10_i64 {
        let n = clients[2]
            .execute("UPDATE docs SET n = 1000 WHERE id() = $1", &[&format!("docs/{i}")])
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    let deleted = clients[2].execute("DELETE FROM docs WHERE id() = 'docs/10'", &[]).await.unwrap();
    assert_eq!(deleted, 1);
    let row =
        clients[1].query_one("SELECT count(*) FROM docs WHERE n::int8 = 1000", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 10);
    let row = clients[0].query_one("SELECT count(*) FROM docs", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), total - 1);
    // Inspection agrees from every node: documents per fragment (SHOW FRAGMENTS, remote ones
    // asked from their owners), per node (SHOW CLUSTER) and per collection (SHOW COLLECTIONS,
    // every owner asked; the proxy owns nothing) add up to every document.
    for c in &clients {
        let fragments = simple_rows(&c.simple_query("SHOW FRAGMENTS").await.unwrap());
        let docs: i64 =
            fragments.iter().map(|r| r[3].as_deref().unwrap().parse::<i64>().unwrap()).sum();
        assert_eq!(docs, total - 1, "{fragments:?}");
        assert!(fragments.iter().all(|r| r[5].as_deref() == Some("active")), "{fragments:?}");
        let members = simple_rows(&c.simple_query("SHOW CLUSTER").await.unwrap());
        let docs: i64 =
            members.iter().map(|r| r[10].as_deref().unwrap().parse::<i64>().unwrap()).sum();
        assert_eq!(docs, total - 1, "{members:?}");
        let collections = simple_rows(&c.simple_query("SHOW COLLECTIONS").await.unwrap());
        let want = [Some("docs".to_owned()), Some((total - 1).to_string()), None];
        assert_eq!(collections, [want], "{collections:?}");
    }

    // The collection catalog is replicated: a configuration made through one node is in force
    // on every node when the statement returns (documents placed by content through another
    // node, a document outside its content block refused through any, reads routed by it
    // everywhere); changes and removal follow, through any node.
    clients[0]
        .batch_execute(r#"CREATE TABLE inv () WITH (sharding = '{"Fields": ["Customer"]}')"#)
        .await
        .unwrap();
    let config = router::ShardingConfig::parse(r#"{"Fields": ["Customer"]}"#).unwrap();
    let shown = r#"{"Fields":["Customer"],"Range":1,"Mutable":false}"#;
    for (k, c) in clients.iter().enumerate() {
        let rows = simple_rows(&c.simple_query("SHOW SHARDING inv").await.unwrap());
        let row = [Some("inv".to_owned()), Some(shown.to_owned()), Some("in force".to_owned())];
        assert_eq!(rows, [row], "via client {k}");
        let doc = serde_json::json!({"Customer": format!("customers/{k}")});
        let (want, _) = router::assign(&config, &format!("inv/{k}$"), &doc).unwrap();
        let id: String = c
            .query_one(&format!("INSERT INTO inv VALUES ('inv/{k}$', '{doc}') RETURNING id()"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(id, want, "placed by content via client {k}");
        let err = c
            .batch_execute(r#"INSERT INTO inv VALUES ('inv/plain', '{"Customer": "customers/9"}')"#)
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&err), "23514", "validated via client {k}: {err}");
        let err = c
            .batch_execute("CREATE TABLE inv () WITH (sharding = '{\"Fields\": [\"x\"]}')")
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&err), "42P07", "{err}");
    }
    for (k, c) in clients.iter().enumerate() {
        let plan = simple_rows(
            &c.simple_query(r#"EXPLAIN SELECT id() FROM inv WHERE "Customer" = 'customers/1'"#)
                .await
                .unwrap(),
        );
        assert_eq!(plan[1], [Some("  Route: Single".to_owned())], "routed via client {k}");
        let found = simple_rows(
            &c.simple_query(
                r#"SELECT count(*) FROM inv WHERE doc() @> '{"Customer": "customers/1"}'"#,
            )
            .await
            .unwrap(),
        );
        assert_eq!(found, [[Some("1".to_owned())]], "via client {k}");
    }
    clients[1]
        .batch_execute(r#"ALTER TABLE inv SET (sharding = '{"Fields": ["Customer"], "Range": 4}')"#)
        .await
        .unwrap();
    let err = clients[2]
        .batch_execute(r#"ALTER TABLE inv SET (sharding = '{"Fields": ["Customer"], "Range": 6}')"#)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "Range grows by whole multiples only: {err}");
    for c in &clients {
        let rows = simple_rows(&c.simple_query("SHOW SHARDING inv").await.unwrap());
        assert_eq!(
            rows[0][1].as_deref(),
            Some(r#"{"Fields":["Customer"],"Range":4,"Mutable":false}"#)
        );
        let found = c
            .query_one("SELECT count(*) FROM inv WHERE \"Customer\" = 'customers/2'", &[])
            .await
            .unwrap();
        assert_eq!(
            found.get::<_, i64>(0),
            1,
            "a document placed under Range 1 is in its Range 4 block"
        );
    }
    // verify_sharding reads every node's fragments: a document let in while Mutable was true
    // is listed through every node once Mutable is false again.
    let loose = r#"{"Fields": ["Customer"], "Range": 4, "Mutable": true}"#;
    clients[0].batch_execute(&format!("ALTER TABLE inv SET (sharding = '{loose}')")).await.unwrap();
    clients[1]
        .batch_execute(r#"INSERT INTO inv VALUES ('inv/loose', '{"Customer": "customers/9"}')"#)
        .await
        .unwrap();
    let strict = r#"{"Fields": ["Customer"], "Range": 4}"#;
    clients[2]
        .batch_execute(&format!("ALTER TABLE inv SET (sharding = '{strict}')"))
        .await
        .unwrap();
    for c in &clients {
        let rows =
            simple_rows(&c.simple_query("SELECT * FROM verify_sharding('inv')").await.unwrap());
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0][0].as_deref(), Some("inv/loose"));
    }
    clients[2].batch_execute("DROP TABLE inv").await.unwrap();
    for c in &clients {
        assert!(simple_rows(&c.simple_query("SHOW SHARDING inv").await.unwrap()).is_empty());
        let row = c.query_one("SELECT count(*) FROM inv", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 0);
    }
    for c in &clients {
        c.batch_execute("CREATE TABLE plain ()").await.unwrap();
    }

    // COPY through the proxy: every batch is forwarded to the owners of its rows, and COPY
    // TO from a data node reads the other node's fragments too.
    let mut input = String::new();
    for i in 0..1_200 {
        input.push_str(&format!("copied/{i}\t{{\"n\": {i}}}\n"));
    }
    let sink = clients[2].copy_in::<_, bytes::Bytes>("COPY copied FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    futures_util::SinkExt::send(&mut sink, bytes::Bytes::from(input)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 1_200);
    let out = clients[0].copy_out("COPY copied (id) TO STDOUT").await.unwrap();
    let chunks: Vec<_> = futures_util::StreamExt::collect(out).await;
    let lines: BTreeSet<String> =
        chunks.into_iter().map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap()).collect();
    assert_eq!(lines.len(), 1_200);
    assert!(lines.contains("copied/1199\n"), "one CopyData per row");
    for c in &clients {
        let row = c.query_one("SELECT count(*) FROM copied", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 1_200);
    }
    // TRUNCATE through the proxy: each round is forwarded to both data nodes as its text.
    clients[2].batch_execute("TRUNCATE copied").await.unwrap();
    for c in &clients {
        let row = c.query_one("SELECT count(*) FROM copied", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 0);
    }

    // A write over fragments of several nodes is a cross-node transaction of one statement,
    // and a transaction block reads every node's fragments (see e2e_xnode for the rest).
    let deleted = clients[0].execute("DELETE FROM docs WHERE n::int8 = 1000", &[]).await.unwrap();
    assert_eq!(deleted, 10);
    clients[2].batch_execute("BEGIN").await.unwrap();
    let row = clients[2].query_one("SELECT count(*) FROM docs", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), total - 11);
    clients[2].batch_execute("ROLLBACK").await.unwrap();
    drop(clients);
    for n in [&mut first, &mut second, &mut proxy] {
        n.stop();
    }
}

// Checks what a crash and restarts do to the data path: with the owner of some fragments
// killed, the other node still serves its own documents and a statement needing the dead
// node's fragments fails with a clear 08006 naming it; once it is back, everything is served
// again; after a restart of every node, each reopens the fragments the recovered map gives it
// with every acknowledged document, readable through both nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_crashed_owner_is_unavailable_then_served_after_restart() {
    let seed_port = free_loopback_port();
    // Stopping both nodes is a full-cluster restart: no handoff on SIGTERM, each keeps its own.
    let keep = ["--handoff-on-shutdown", "false"];
    let mut first =
        start(options(1, seed_port, None, 1, &["--min-members", "2", keep[0], keep[1]]));
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), 1, &keep));
    let c1 = connect(&first).await;
    let c2 = connect(&second).await;
    for i in 0..40 {
        let c = if i % 2 == 0 { &c1 } else { &c2 };
        c.execute(&format!("INSERT INTO notes VALUES ('n/{i}', '{{\"i\": {i}}}')"), &[])
            .await
            .unwrap();
    }
    let local = id_owned_by(&c1, 1, "local").await;
    c1.batch_execute(&format!("INSERT INTO notes VALUES ('{local}', '{{}}')")).await.unwrap();
    drop(c2);
    second.kill9();
    let row = c1.query_one("SELECT count(*) FROM notes WHERE id() = $1", &[&local]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 1, "this node's own documents are served");
    let err = c1.query_one("SELECT count(*) FROM notes", &[]).await.unwrap_err();
    assert_eq!(support::sqlstate(&err), "08006", "{err}");
    let message = err.as_db_error().unwrap().message().to_owned();
    assert!(message.contains("node 2"), "{message}");
    // SHOW COLLECTIONS still answers, with the counts unknown rather than this node's alone.
    let collections = simple_rows(&c1.simple_query("SHOW COLLECTIONS").await.unwrap());
    assert_eq!(collections, [[Some("notes".to_owned()), None, None]], "{collections:?}");
    second.start_again();
    let total = wait_for(&[&first, &second], "the owner back", || async {
        let rows = simple(&first, "SELECT count(*) FROM notes").await?;
        rows[0][0].as_deref()?.parse::<i64>().ok().filter(|n| *n == 41)
    })
    .await;
    assert_eq!(total, 41);
    // A configuration is the replicated catalog's: it survives a full restart on both nodes.
    c1.batch_execute(r#"CREATE TABLE kept () WITH (sharding = '{"Fields": ["k"], "Range": 8}')"#)
        .await
        .unwrap();
    drop(c1);
    first.stop();
    second.stop();
    first.start_again();
    second.start_again();
    for node in [&first, &second] {
        let shown =
            wait_for(&[&first, &second], "the configuration after a full restart", || async {
                let rows = simple(node, "SHOW SHARDING kept").await?;
                rows.first()?[1].clone()
            })
            .await;
        assert_eq!(shown, r#"{"Fields":["k"],"Range":8,"Mutable":false}"#);
        let n = wait_for(&[&first, &second], "every document after a full restart", || async {
            let rows = simple(node, "SELECT count(*), sum(i::int8) FROM notes").await?;
            let n = rows[0][0].as_deref()?.parse::<i64>().ok()?;
            let sum = rows[0][1].as_deref()?.parse::<i64>().ok()?;
            (n == 41).then_some(sum)
        })
        .await;
        assert_eq!(n, (0..40).sum::<i64>());
    }
    // Writes forwarded to an owner that restarted meanwhile (its old data connections in the
    // pool are closed: the region drops them, `forward::tests::unit_pool_drops_closed_connections`).
    let c1 = connect(&first).await;
    let remote = id_owned_by(&c1, 2, "pooled").await;
    c1.execute(&format!("INSERT INTO notes VALUES ('{remote}', '{{}}')"), &[]).await.unwrap();
    second.restart();
    wait_for(&[&first, &second], "node 2 serving again", || async {
        let rows = simple(&second, "SELECT count(*) FROM notes").await?;
        rows[0][0].as_deref()?.parse::<i64>().ok().filter(|n| *n == 42)
    })
    .await;
    // The harness gives a restarted node a new client port: wait until node 1 knows it.
    let addr = second.addr().to_string();
    wait_for(&[&first, &second], "node 1 knows node 2's new address", || async {
        let rows = simple(&first, "SHOW CLUSTER").await?;
        rows.iter()
            .any(|r| r[0].as_deref() == Some("2") && r[3].as_deref() == Some(addr.as_str()))
            .then_some(())
    })
    .await;
    let again = id_owned_by(&c1, 2, "again").await;
    c1.execute(&format!("INSERT INTO notes VALUES ('{again}', '{{}}')"), &[]).await.unwrap();
    let row = c1.query_one("SELECT count(*) FROM notes", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 43);
    drop(c1);
    first.stop();
    second.stop();
}

// Checks a configuration change waits for every member: with the proxy down, CREATE TABLE
// … WITH commits through a data node but stays pending, so the statement returns with a
// WARNING after its bound; meanwhile every data node already refuses a document outside its
// content block but routes content predicates to every fragment. Once the proxy is back and
// has installed it, the coordinator puts it in force and every node, the proxy included,
// routes by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_configuration_is_in_force_once_every_member_has_it() {
    let seed_port = free_loopback_port();
    let mut first = start(options(1, seed_port, None, 1, &["--min-members", "2"]));
    let mut second = start(options(2, free_loopback_port(), Some(seed_port), 1, &[]));
    let mut proxy =
        start(options(3, free_loopback_port(), Some(seed_port), 1, &["--role", "proxy"]));
    let nodes = [&first, &second, &proxy];
    wait_for(&nodes, "an allocated map with three members", || async {
        let m = cluster_map(&first).await?;
        (m.0 > 0 && m.1.len() == 3).then_some(())
    })
    .await;
    proxy.stop();
    let (c1, notices) = first.connect_with_notices().await;
    c1.batch_execute(r#"CREATE TABLE held () WITH (sharding = '{"Fields": ["Customer"]}')"#)
        .await
        .unwrap();
    let warning = notices.try_recv().expect("a warning that the change is not in force yet");
    assert!(warning.contains("not yet installed on every member"), "{warning}");
    let explain = r#"EXPLAIN SELECT id() FROM held WHERE "Customer" = 'customers/1'"#;
    let c2 = connect(&second).await;
    for c in [&c1, &c2] {
        let err = c
            .batch_execute(
                r#"INSERT INTO held VALUES ('held/plain', '{"Customer": "customers/1"}')"#,
            )
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&err), "23514", "validated while pending: {err}");
        let plan = simple_rows(&c.simple_query(explain).await.unwrap());
        assert_eq!(plan[1], [Some("  Route: Scatter".to_owned())], "not routed while pending");
        let shown = simple_rows(&c.simple_query("SHOW SHARDING held").await.unwrap());
        assert_eq!(shown[0][2].as_deref(), Some("pending"), "{shown:?}");
    }
    let err = c2
        .batch_execute(
            r#"ALTER TABLE held SET (sharding = '{"Fields": ["Customer"], "Mutable": true}')"#,
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000", "one change at a time: {err}");
    proxy.start_again();
    let nodes = [&first, &second, &proxy];
    for node in nodes {
        let routed = wait_for(&nodes, "the configuration in force", || async {
            let rows = simple(node, explain).await?;
            let route = rows.get(1)?[0].clone()?;
            (route == "  Route: Single").then_some(route)
        })
        .await;
        assert_eq!(routed, "  Route: Single");
        let shown = simple(node, "SHOW SHARDING held").await.unwrap();
        assert_eq!(shown[0][2].as_deref(), Some("in force"), "{shown:?}");
    }
    for n in [&mut first, &mut second, &mut proxy] {
        n.stop();
    }
}
