//! `tessera serve`: run a node.
//!
//! Start-up order: resolve the configuration, start logging, make sure the address is free,
//! lock the data directory and read (or create) its layout, load the catalog, then start one
//! executor per core. Each executor opens (recovers) its fragments; only when every executor
//! is ready do they start accepting clients, and the ready line is logged. SIGINT/SIGTERM stop
//! accepting, let running statements finish, close the fragments (in-flight commits complete)
//! and exit 0.

use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;

use router::{ExecutorId, NodeId, Owner, ShardMap};

use crate::catalog::Catalog;
use crate::config::{NodeConfig, ServeArgs};
use crate::datadir::{DataDir, FragmentEntry, LAYOUT_FORMAT, Layout};
use crate::engine::{CatalogView, Core, Session, Shared};
use crate::pg::{PgAuth, PgConfig, PgRegistry, ScramCredentials, accept_loop};
use crate::runtime::{self, ExecutorContext, Shutdown};

/// Arguments of `tessera serve`.
#[derive(clap::Args, Debug)]
pub struct Args {
    // Boxed: the cluster flags made the settings large next to other subcommands' arguments.
    #[command(flatten)]
    settings: Box<ServeArgs>,
}

/// Runs the node until it is told to stop. Exit status 0 after a clean shutdown, 1 when it
/// could not start or failed.
pub fn main(args: &Args) -> ExitCode {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let config = match NodeConfig::resolve(&args.settings, cores) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tessera: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A cluster node turns openraft's own per-RPC messages off (see `cluster::log_filter`).
    let filter = match &config.cluster {
        Some(_) => crate::cluster::log_filter(&config.log),
        None => config.log.clone(),
    };
    if let Err(e) = crate::logging::init(&filter) {
        eprintln!("tessera: {e}");
        return ExitCode::FAILURE;
    }
    match serve(&config) {
        Ok(()) => {
            tracing::info!("tessera stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The even layout for a new data directory.
fn new_layout(fragments: u32) -> Layout {
    let map = ShardMap::even(fragments, &[Owner { node: NodeId(0), executor: ExecutorId(0) }]);
    let fragments = match map {
        Ok(map) => map
            .fragments()
            .iter()
            .map(|f| FragmentEntry {
                id: f.id().get(),
                start: f.range().start(),
                end: f.range().end(),
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    Layout { format: LAYOUT_FORMAT, fragments }
}

/// The shard map of a layout, fragment `i` (in shard order) owned by executor `i % executors`.
fn shard_map(layout: &Layout, executors: u32) -> Result<ShardMap, String> {
    let fragments = layout
        .fragments
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let owner = Owner {
                node: NodeId(0),
                executor: ExecutorId(u32::try_from(i).unwrap_or(0) % executors),
            };
            let range = router::ShardRange::new(f.start, f.end)
                .ok_or_else(|| format!("layout has an invalid range [{}, {})", f.start, f.end))?;
            Ok(router::Fragment::new(router::FragmentId::new(f.id), range, owner))
        })
        .collect::<Result<Vec<_>, String>>()?;
    ShardMap::new(fragments, router::Epoch(1))
        .map_err(|e| format!("layout is not a valid shard map: {e}"))
}

/// Whether `addr` can be listened on by glommio's SO_REUSEPORT listener without sharing it with
/// another process: a probe bound with SO_REUSEADDR and SO_REUSEPORT (as glommio's own
/// listener; a plain bind would fail for a minute after a restart, on the TIME_WAIT of a
/// connection the last run closed first, since those sockets inherit only SO_REUSEPORT), then
/// a connect, which a listener already there (another node, same user) answers.
fn probe_listen(addr: std::net::SocketAddr) -> std::io::Result<()> {
    use socket2::{Domain, Socket, Type};
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    probe.set_reuse_address(true)?;
    probe.set_reuse_port(true)?;
    probe.bind(&addr.into())?;
    drop(probe);
    let connect_to = match addr.ip() {
        ip if ip.is_unspecified() && addr.is_ipv4() => {
            std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, addr.port()))
        }
        ip if ip.is_unspecified() => {
            std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port()))
        }
        _ => addr,
    };
    match std::net::TcpStream::connect_timeout(&connect_to, std::time::Duration::from_secs(1)) {
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "Address already in use (another process accepts connections there)",
        )),
        Err(_) => Ok(()),
    }
}

fn serve(config: &NodeConfig) -> Result<(), String> {
    // glommio listens with SO_REUSEPORT, which would let a second node share the port
    // silently; a probe first makes "address in use" an error.
    probe_listen(config.listen).map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    if let Some(addr) = config.metrics_listen {
        probe_listen(addr).map_err(|e| format!("metrics endpoint cannot listen on {addr}: {e}"))?;
    }
    let data = DataDir::open(&config.data_dir, || new_layout(config.fragments))
        .map_err(|e| e.to_string())?;
    if !data.created() && data.layout().fragments.len() != config.fragments as usize {
        tracing::info!(
            stored = data.layout().fragments.len(),
            requested = config.fragments,
            "the data directory keeps the fragment count it was created with"
        );
    }
    // Before any fragment opens: the memory their staged segments may take, the files they
    // need, and the clients that fit.
    let fragments = match &config.cluster {
        Some(_) => u64::from(config.fragments),
        None => data.layout().fragments.len() as u64,
    };
    crate::staged_memory::check(fragments, config.segment_bytes)?;
    let files = crate::open_files::settle(
        fragments,
        u64::from(config.executors),
        config.cluster.is_some(),
    )?;
    let map = shard_map(data.layout(), config.executors)?;
    let catalog = Catalog::load(data.root()).map_err(|e| e.to_string())?;
    if config.cluster.is_some() && !catalog.collections.is_empty() {
        // A cluster's configurations are the coordinator's replicated catalog; this node's
        // own would be ignored, and its documents were placed and validated by them.
        let names: Vec<&str> = catalog.collections.keys().map(String::as_str).collect();
        return Err(format!(
            "{} holds content sharding configurations of its own (collections {}); a cluster \
             node takes them from the cluster's replicated catalog instead. Serve this data \
             directory without --cluster-name",
            data.root().join("catalog.json").display(),
            names.join(", ")
        ));
    }
    // A cluster node starts from an empty catalog at version 0 and installs the replicated
    // one (`cluster::region`), whatever version its own file reached.
    let catalog = match config.cluster {
        Some(_) => CatalogView::new(Catalog {
            format: crate::catalog::CATALOG_FORMAT,
            ..Catalog::default()
        })?,
        None => CatalogView::new(catalog)?,
    };
    // A cluster node follows the replicated map (`cluster::region`): it opens no fragment
    // here; layout.json decides only on a single node.
    let shared = Arc::new(match &config.cluster {
        Some(c) => Shared::new_cluster(NodeId(c.node_id), data.root().to_owned(), catalog),
        None => Shared::new(map, data.root().to_owned(), catalog),
    });
    // Two-phase-commit decisions, before any executor opens (and so recovers) a fragment.
    let decisions = crate::engine::read_decisions(data.root())
        .map_err(|e| format!("cannot read the coordinator journal: {e}"))?;
    shared.txn.install_recovered(decisions);
    shared.txn.expect_executors(config.executors as usize);
    let auth = match &config.password {
        None => PgAuth::Trust,
        Some(p) => {
            PgAuth::Scram(ScramCredentials::from_password(p).map_err(|e| format!("password: {e}"))?)
        }
    };
    // A cluster node's PostgreSQL listener also takes the peers' data connections (region
    // forwarding, `cluster::forward`).
    let peer_data = config
        .cluster
        .as_ref()
        .map(|_| crate::cluster::forward::serve_data_connection as crate::pg::PeerDataHook);
    let pg = PgConfig { auth, idle_timeout: config.idle_timeout, peer_data, ..PgConfig::default() };
    let registry = Arc::new(PgRegistry::new(files.connections));
    let shutdown = Shutdown::new();
    crate::signals::install(shutdown.clone()).map_err(|e| format!("cannot handle signals: {e}"))?;

    let owned: Vec<Vec<_>> = (0..config.executors)
        .map(|e| {
            shared
                .map()
                .iter()
                .flat_map(|m| m.fragments().iter())
                .filter(|f| f.owner().executor.0 == e)
                .map(|f| (f.id(), f.range(), data.fragment_dir(f.id().get())))
                .collect()
        })
        .collect();
    let owned = Arc::new(owned);
    let listen = config.listen;
    let metrics_listen = config.metrics_listen;
    let slow_statement = config.slow_statement;
    let segment_bytes = config.segment_bytes;
    // Not given: one permit when every executor holds at most one fragment, else two.
    let busiest = owned.iter().map(Vec::len).max().unwrap_or(0);
    let max_syncs = config
        .max_syncs_per_executor
        .unwrap_or(Some(crate::config::default_max_syncs(busiest, config.cluster.is_some())));
    let syncs = match max_syncs {
        Some(n) => format!("max-syncs-per-executor {n}"),
        None => "max-syncs-per-executor 0 (no limit)".to_owned(),
    };
    crate::engine::marker::set_enabled(config.one_round_commits);
    let syncs = match (config.one_round_commits, config.cluster.is_some()) {
        (true, false) => format!("{syncs}, one-round commits"),
        (false, false) => format!("{syncs}, commit decisions in the journal"),
        (_, true) => syncs,
    };
    let fragments = match shared.map() {
        Some(m) => format!("{} fragments", m.len()),
        None => "fragments from the cluster's shard map".to_owned(),
    };
    let summary = format!(
        "tessera {} ready: listening on {listen}, {} executors, {fragments}, {syncs}, data directory {}",
        env!("CARGO_PKG_VERSION"),
        config.executors,
        data.root().display()
    );
    let clustered = shared.clustered;
    let init_shared = Arc::clone(&shared);
    // The cluster's control plane (its own thread, tokio) starts before the executors, so its
    // peer listener is up by the time the ready line is logged.
    let cluster = match &config.cluster {
        Some(c) => Some(
            crate::cluster::control::start(
                c,
                &data.root().join("cluster"),
                config.listen,
                config.executors,
                config.fragments,
            )
            .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let served = runtime::run(
        config.executors as usize,
        shutdown,
        move |ctx: ExecutorContext<Core>| {
            let mine = owned.get(ctx.index.get()).cloned().unwrap_or_default();
            let shared = Arc::clone(&init_shared);
            async move {
                // One gate per executor, shared by its fragments (storage::syncgate).
                let gate = match max_syncs.map(storage::SyncGate::new).transpose() {
                    Ok(gate) => gate,
                    Err(e) => return Err(format!("max-syncs-per-executor: {e}")),
                };
                Core::open(ctx.index, shared, mine, segment_bytes, gate, &ctx.shutdown).await
            }
        },
        move |core: Rc<Core>, ctx: ExecutorContext<Core>| {
            let pg = Rc::new(pg.clone());
            let registry = Arc::clone(&registry);
            let summary = summary.clone();
            async move {
                core.metrics().set_slow_threshold(slow_statement);
                if ctx.index.get() == 0
                    && let Some(addr) = metrics_listen
                {
                    match glommio::net::TcpListener::bind(addr) {
                        Ok(l) => {
                            tracing::info!("metrics endpoint on http://{addr}/metrics");
                            let (core, mesh) = (Rc::clone(&core), ctx.mesh.clone());
                            let scrape = move || {
                                let (core, mesh) = (Rc::clone(&core), mesh.clone());
                                async move {
                                    let snapshots = crate::metrics::collect(&core, &mesh).await;
                                    crate::metrics::render_set(&snapshots).to_prometheus()
                                }
                            };
                            let shutdown = ctx.shutdown.clone();
                            let stop = async move { shutdown.wait().await };
                            glommio::spawn_local(crate::metrics::http::serve(l, scrape, stop))
                                .detach();
                        }
                        Err(e) => {
                            tracing::error!("metrics endpoint cannot listen on {addr}: {e}");
                            ctx.shutdown.trigger();
                            return;
                        }
                    }
                }
                let listener = match glommio::net::TcpListener::bind(listen) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("{} cannot listen on {listen}: {e}", ctx.index);
                        ctx.shutdown.trigger();
                        return;
                    }
                };
                if ctx.index.get() == 0 {
                    tracing::info!("{summary}");
                }
                core.start(&ctx);
                if clustered {
                    // The coordinator's `--rebalance-load bytes` reads these reports.
                    glommio::spawn_local(crate::cluster::load::publish_loop(
                        Rc::clone(&core),
                        ctx.shutdown.clone(),
                    ))
                    .detach();
                }
                if clustered {
                    crate::cluster::region::start(&core, &ctx);
                    crate::cluster::forward::install(&core, &ctx);
                    crate::cluster::handoff_host::start(&core, &ctx);
                }
                let session_ctx = ctx.clone();
                let make_session = move || Session::new(Rc::clone(&core), session_ctx.clone());
                accept_loop(listener, pg, registry, make_session, ctx.shutdown.wait()).await;
            }
        },
        |core: Rc<Core>, _ctx| async move { core.close().await },
    )
    .map_err(|e| e.to_string());
    if let Some(cluster) = cluster {
        cluster.stop();
    }
    served?;
    drop(data);
    Ok(())
}
