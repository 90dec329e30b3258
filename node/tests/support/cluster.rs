//! What the multi-node tests share: polling a cluster condition with a deadline, simple
//! queries that answer rows or `SQLSTATE: message`, and a cluster run by `scripts/cluster.sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::{Node, repo_root, simple_rows};

/// How long a cluster change may take before the test fails with the logs: a bound that turns
/// a hang into a failure, never a synchronisation delay.
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(180);
/// Pause between two polls (polling, not synchronisation).
pub const POLL_EVERY: Duration = Duration::from_millis(100);

/// Polls `check` every [`POLL_EVERY`] until it gives a value; after [`CLUSTER_DEADLINE`] the
/// test fails with `what` and `logs()`.
pub async fn poll_until<T, F, Fut>(what: &str, logs: impl Fn() -> String, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("{what}: not reached in {CLUSTER_DEADLINE:?}\nlogs:\n{}", logs());
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// [`poll_until`] failing with the logs of `nodes`.
pub async fn wait_for<T, F, Fut>(nodes: &[&Node], what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let logs = || nodes.iter().map(|n| n.log_text()).collect::<Vec<_>>().join("\n-----\n");
    poll_until(what, logs, check).await
}

/// Runs the write `sql` through `client` until it is applied. 40001 (a fragment it touches is
/// being handed off, split or merged; nothing was applied) is retried, as its message asks a
/// client to; any other error fails the test with the logs of `nodes`.
pub async fn write_retrying(nodes: &[&Node], client: &tokio_postgres::Client, sql: &str) {
    let retryable = Some(&tokio_postgres::error::SqlState::T_R_SERIALIZATION_FAILURE);
    wait_for(nodes, "a write applied", || async {
        match client.simple_query(sql).await {
            Ok(_) => Some(()),
            Err(e) if e.code() == retryable => None,
            Err(e) => {
                let logs = nodes.iter().map(|n| n.log_text()).collect::<Vec<_>>();
                panic!("{sql:.80}: {e}\nlogs:\n{}", logs.join("\n-----\n"))
            }
        }
    })
    .await;
}

/// Runs `sql` on a fresh connection to `conn` (simple protocol): the rows as text, or the
/// error as `SQLSTATE: message`.
pub async fn query(conn: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let (client, connection) =
        tokio_postgres::connect(conn, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let messages = client.simple_query(sql).await.map_err(|e| {
        let code = e.code().map(|c| c.code().to_owned()).unwrap_or_default();
        let message = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
        format!("{code}: {message}")
    })?;
    Ok(simple_rows(&messages))
}

/// The rows of `sql` run on `node`, or `None` if it did not answer or failed.
pub async fn simple(node: &Node, sql: &str) -> Option<Vec<Vec<Option<String>>>> {
    query(&node.conn_str(), sql).await.ok()
}

/// The fragments `node` has open itself (`SHOW local_fragments`), with their documents.
pub async fn local_fragments(node: &Node) -> Option<BTreeMap<String, u64>> {
    let rows = simple(node, "SHOW local_fragments").await?;
    Some(
        rows.iter()
            .map(|r| (r[0].clone().unwrap(), r[3].as_deref().unwrap().parse().unwrap()))
            .collect(),
    )
}

/// Waits until each of `nodes` sees `fragments` fragments served, by `owners` nodes (SHOW
/// FRAGMENTS from each).
pub async fn wait_served(nodes: &[&Node], fragments: usize, owners: usize) {
    for node in nodes {
        wait_for(nodes, "every fragment served", || async {
            let rows = simple(node, "SHOW FRAGMENTS").await?;
            let seen: BTreeSet<String> = rows
                .iter()
                .filter_map(|r| {
                    r[2].as_deref().and_then(|o| o.split(' ').nth(1)).map(str::to_owned)
                })
                .collect();
            (rows.len() == fragments && seen.len() == owners).then_some(())
        })
        .await;
    }
}

/// The shard ranges of the fragments owned by node `owner`, from `client`'s SHOW FRAGMENTS.
pub async fn ranges_owned_by(client: &tokio_postgres::Client, owner: u32) -> Vec<(u32, u32)> {
    let rows = simple_rows(&client.simple_query("SHOW FRAGMENTS").await.unwrap());
    let prefix = format!("node {owner} ");
    let ranges: Vec<(u32, u32)> = rows
        .iter()
        .filter(|r| r[2].as_deref().unwrap().starts_with(&prefix))
        .map(|r| {
            let range = r[1].as_deref().unwrap().trim_matches(|c| c == '[' || c == ')');
            let (a, b) = range.split_once(", ").unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert!(!ranges.is_empty(), "node {owner} owns no fragment: {rows:?}");
    ranges
}

/// A document id (`<salt>/<n>`) that lands in a fragment owned by node `owner`, from
/// `client`'s SHOW FRAGMENTS.
pub async fn id_owned_by(client: &tokio_postgres::Client, owner: u32, salt: &str) -> String {
    let ranges = ranges_owned_by(client, owner).await;
    (0..100_000)
        .map(|i| format!("{salt}/{i}"))
        .find(|id| {
            let shard = router::shard_of(id).unwrap().shard().unwrap().get();
            ranges.iter().any(|(a, b)| (*a..*b).contains(&shard))
        })
        .unwrap()
}

/// Nodes a [`ScriptCluster`] may run: ports are reserved for this many.
pub const SCRIPT_NODES: u16 = 4;

/// A base port whose derived ports (`base + 10 * i + 0..3` for nodes 1..=4) were all free a
/// moment ago. Chosen below Linux's ephemeral range (32768 and up): a node restarted on the
/// same port must not find it taken as the local port of some other process's outgoing
/// connection.
fn free_base_port() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    for attempt in 0..256u32 {
        let slot = seed.wrapping_add(attempt.wrapping_mul(7919)) % 2_000;
        let base = 10_000 + u16::try_from(slot).expect("small") * 10;
        let ports = (1..=SCRIPT_NODES).flat_map(|i| (0..3).map(move |k| base + 10 * i + k));
        let held: Vec<_> = ports.map(|p| TcpListener::bind(("127.0.0.1", p))).collect();
        if held.iter().all(Result::is_ok) {
            return base;
        }
    }
    panic!("no free block of ports found");
}

/// A cluster run by `scripts/cluster.sh` with the test's binary, a private directory and base
/// port; stopped (by the script) when dropped.
pub struct ScriptCluster {
    dir: PathBuf,
    base: u16,
    name: String,
    fragments: usize,
}

impl ScriptCluster {
    /// A cluster named `name` (also its directory's prefix) of `fragments` fragments.
    pub fn new(name: &str, fragments: usize) -> ScriptCluster {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cluster-{name}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("remove a stale dir");
        }
        ScriptCluster { dir, base: free_base_port(), name: name.to_owned(), fragments }
    }

    /// Runs the script with `args`.
    pub fn script(&self, args: &[&str]) -> Output {
        Command::new("bash")
            .arg(repo_root().join("scripts/cluster.sh"))
            .args(args)
            .env("TESSERA_BIN", env!("CARGO_BIN_EXE_tessera"))
            .env("TESSERA_CLUSTER_DIR", &self.dir)
            .env("TESSERA_CLUSTER_BASE_PORT", self.base.to_string())
            .env("TESSERA_CLUSTER_NAME", &self.name)
            .env("TESSERA_CLUSTER_FRAGMENTS", self.fragments.to_string())
            .output()
            .expect("run scripts/cluster.sh")
    }

    /// Runs the script and fails the test (with every node's log) if it fails; its stdout.
    pub fn run(&self, args: &[&str]) -> String {
        let out = self.script(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "cluster.sh {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        stdout
    }

    /// Every node's log.
    pub fn logs(&self) -> String {
        (1..=SCRIPT_NODES)
            .map(|i| {
                let log = self.dir.join(format!("node{i}/log"));
                format!("--- node {i}:\n{}", std::fs::read_to_string(log).unwrap_or_default())
            })
            .collect()
    }

    /// Node `node`'s PostgreSQL port.
    pub fn pg_port(&self, node: u16) -> u16 {
        self.base + 10 * node
    }

    /// A tokio-postgres connection string for node `node`.
    pub fn conn_str(&self, node: u16) -> String {
        format!(
            "host=127.0.0.1 port={} user=tessera dbname=tessera connect_timeout=5",
            self.pg_port(node)
        )
    }

    /// Node `node`'s pid (from the script's pid file).
    pub fn pid(&self, node: u16) -> i32 {
        let text = std::fs::read_to_string(self.dir.join(format!("node{node}/pid"))).unwrap();
        text.trim().parse().unwrap()
    }
}

impl Drop for ScriptCluster {
    fn drop(&mut self) {
        let _ = self.script(&["stop"]);
    }
}

/// The flags of node `id` of cluster `name`: `--cluster-name`, `--node-id`, `--peer-listen` on
/// loopback port `peer`, `--join` the seed's peer port `join` (none for the seed), then `more`.
pub fn cluster_args(
    name: &str,
    id: u32,
    peer: u16,
    join: Option<u16>,
    more: &[&str],
) -> Vec<String> {
    let mut args = vec![
        "--cluster-name".to_owned(),
        name.to_owned(),
        "--node-id".to_owned(),
        id.to_string(),
        "--peer-listen".to_owned(),
        format!("127.0.0.1:{peer}"),
    ];
    if let Some(j) = join {
        args.push("--join".to_owned());
        args.push(format!("127.0.0.1:{j}"));
    }
    args.extend(more.iter().map(|m| (*m).to_owned()));
    args
}

/// Waits until `node` has logged a line containing `needle` at least `times` times. The log
/// reaches the test through a reader thread, so a line written just before a reply may
/// arrive just after it: tests that read the log right after a statement wait for it here.
pub async fn wait_for_log(node: &Node, needle: &str, times: usize) {
    let what = format!("{times} log lines with {needle:?}");
    poll_until(
        &what,
        || node.log_text(),
        || async {
            (node.log_lines().iter().filter(|l| l.contains(needle)).count() >= times).then_some(())
        },
    )
    .await;
}

/// The first column of `sql`'s rows on `client` (a connection to `node`).
async fn ids_of(client: &tokio_postgres::Client, node: &Node, sql: &str) -> Vec<String> {
    let messages = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:.60} through {}: {e}", node.conn_str()));
    simple_rows(&messages).into_iter().map(|r| r[0].clone().unwrap()).collect()
}

/// Ids per point-read query of [`check_documents`].
const CHECK_IDS_PER_QUERY: usize = 200;

/// Checks every id of `acked` is read exactly once through every node (regions forward, so
/// each answers for the whole cluster): by a scan of `notes`, which must hold no id twice,
/// and by point reads (`id() IN (…)`, routed to each id's owner) over one connection per
/// node. Then that the fragments' stored copies (`per_node`, from `SHOW local_fragments`)
/// hold `acked` plus at most `maybe` (attempts without an answer).
pub async fn check_documents(
    nodes: &[&Node],
    per_node: &[BTreeMap<String, u64>],
    acked: &BTreeSet<String>,
    maybe: &BTreeSet<String>,
) {
    for node in nodes {
        let client = node.connect().await;
        let mut seen = BTreeMap::new();
        for id in ids_of(&client, node, "SELECT id() FROM notes").await {
            *seen.entry(id).or_insert(0u32) += 1;
        }
        for id in acked {
            assert_eq!(seen.get(id), Some(&1), "document {id} through {}", node.conn_str());
        }
        assert!(
            seen.values().all(|n| *n == 1),
            "a document read twice through {}",
            node.conn_str()
        );
        let ids: Vec<&String> = acked.iter().collect();
        for batch in ids.chunks(CHECK_IDS_PER_QUERY) {
            let list: Vec<String> =
                batch.iter().map(|id| format!("'{}'", id.replace('\'', "''"))).collect();
            let sql = format!("SELECT id() FROM notes WHERE id() IN ({})", list.join(", "));
            let mut got = ids_of(&client, node, &sql).await;
            got.sort();
            let want: Vec<String> = batch.iter().map(|id| (*id).clone()).collect();
            assert_eq!(got, want, "point reads through {}", node.conn_str());
        }
    }
    let stored: u64 = per_node.iter().flat_map(|m| m.values()).sum();
    let stored = usize::try_from(stored).unwrap();
    assert!(
        stored >= acked.len() && stored <= acked.len() + maybe.len(),
        "{stored} documents stored, {} acknowledged, {} unknown",
        acked.len(),
        maybe.len()
    );
}
