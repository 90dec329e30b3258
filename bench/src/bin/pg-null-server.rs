//! `pg-null-server`: a PostgreSQL-protocol server that answers every query with one canned
//! row and does no other work (`bench::null_server`). It measures the ceiling any server can
//! reach on this machine; `scripts/bench-ceiling.sh` runs pgbench against it. With
//! `--durable DIR` every write statement is answered only after a group-committed fdatasync
//! of a log in DIR that covers it: the durable-write ceiling.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use bench::limits::NULL_LOG_BYTES;
use bench::null_server::{Durable, Flavor, Logs, spawn_durable};
use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Model {
    /// One blocking thread per connection (PostgreSQL's model).
    Threads,
    /// `--loops` event loops on epoll.
    Epoll,
    /// `--loops` glommio executors (io_uring; Tessera's model).
    Glommio,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogLayout {
    /// One log per epoll loop or glommio executor (threads: one log anyway).
    PerLoop,
    /// One log for the whole server (threads and epoll models).
    One,
}

/// A null PostgreSQL-protocol server: startup (trust), then one canned row for every query.
#[derive(Debug, Parser)]
#[command(name = "pg-null-server", version)]
struct Cli {
    /// Address to listen on (port 0: any free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// I/O model.
    #[arg(long, value_enum, default_value = "threads")]
    model: Model,
    /// Event loops of the epoll model, executors of the glommio model.
    #[arg(long, default_value_t = 1)]
    loops: usize,
    /// Make write statements (INSERT, UPDATE, DELETE) durable in log files in this directory
    /// (created if missing; 64 MiB per log, zero-filled at start) before answering them.
    #[arg(long)]
    durable: Option<PathBuf>,
    /// With --durable: one log per loop or executor, or one for the server.
    #[arg(long, value_enum, default_value = "per-loop")]
    logs: LogLayout,
    /// With --durable: the threads and epoll models write their logs with O_DIRECT rather
    /// than buffered (glommio always does).
    #[arg(long)]
    direct: bool,
    /// With --durable: group commits a glommio log may have in flight at once (Tessera's
    /// executors allow 2); 1 makes writers that arrive during a sync wait for the next group.
    #[arg(long, default_value_t = 1)]
    syncs_in_flight: usize,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let flavor = match cli.model {
        Model::Threads => Flavor::Threads,
        Model::Epoll => Flavor::Epoll { loops: cli.loops },
        Model::Glommio => Flavor::Glommio { executors: cli.loops },
    };
    let logs = match cli.logs {
        LogLayout::PerLoop => Logs::PerLoop,
        LogLayout::One => Logs::One,
    };
    let durable = cli.durable.map(|dir| Durable {
        dir,
        logs,
        direct: cli.direct,
        syncs_in_flight: cli.syncs_in_flight,
        log_bytes: NULL_LOG_BYTES,
    });
    let spawned = spawn_durable(cli.listen, flavor, durable.as_ref())
        .with_context(|| format!("listening on {}", cli.listen))?;
    let bound = spawned.addr;
    match &durable {
        Some(d) => eprintln!(
            "ready: listening on {bound} ({flavor:?}, durable {:?}{} in {})",
            d.logs,
            if d.direct { ", O_DIRECT" } else { "" },
            d.dir.display()
        ),
        None => eprintln!("ready: listening on {bound} ({flavor:?})"),
    }
    // The server threads run until the process is killed.
    loop {
        std::thread::park();
    }
}
