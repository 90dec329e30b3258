//! `tessera`: the server binary and its operator commands. One `Command` variant per
//! subcommand; each lives in its own module under `node::cli`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: each executor thread allocates and frees from its own heap.
/// glibc's malloc/free (with `malloc_consolidate` and `unlink_chunk`) were about a tenth of an
/// executor's CPU under cross-fragment transfers (BENCHMARKS.md, session 7).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tessera, a sharded document store that speaks the PostgreSQL protocol.
#[derive(Parser, Debug)]
#[command(name = "tessera", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a node: accept PostgreSQL clients and serve the data directory.
    Serve(node::cli::serve::Args),
    /// Print the shard of each document id (`<id>\t<shard>`), or why it has none.
    ShardOf(node::cli::shard_of::Args),
    /// Back up a running node into a new directory (consistent, writers keep going).
    Backup(node::cli::backup::Args),
    /// Check a backup and copy it into a new data directory.
    Restore(node::cli::restore::Args),
    /// Check every segment of a stopped node's data directory (or a backup), read-only.
    Verify(node::cli::verify::Args),
    /// Print the documents of a stopped node's data directory (or a backup) as JSON lines.
    Dump(node::cli::dump::Args),
    /// Operator actions on a stopped cluster (wipe-coordinator).
    Admin(node::cli::admin::Args),
}

fn main() -> ExitCode {
    huge_pages_only_where_advised();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => node::cli::serve::main(&args),
        Command::ShardOf(args) => node::cli::shard_of::main(&args),
        Command::Backup(args) => node::cli::backup::main(&args),
        Command::Restore(args) => node::cli::restore::main(&args),
        Command::Verify(args) => node::cli::verify::main(&args),
        Command::Dump(args) => node::cli::dump::main(&args),
        Command::Admin(args) => node::cli::admin::main(&args),
    }
}

/// Keeps transparent huge pages to the log's staged segments (`storage::hugepages`), for this
/// process and the threads it starts. Elsewhere they cost: an executor's index table, freshly
/// doubled and touched at random 2 MiB page by 2 MiB page, zeroed each on first touch on the
/// executor's thread: the storage bench saw waves of 0.1-0.3 s (one ack of 0.7-1.05 s per run)
/// and 17% of its CPU in `clear_page_erms` (BENCHMARKS.md, session 7, branch s7-ack). A failure
/// leaves the system's setting in force.
fn huge_pages_only_where_advised() {
    if let Err(e) = storage::hugepages::only_where_advised() {
        eprintln!("tessera: could not keep transparent huge pages to the log's segments: {e}");
    }
}
