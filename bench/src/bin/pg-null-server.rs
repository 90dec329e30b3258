//! `pg-null-server`: a PostgreSQL-protocol server that answers every query with one canned
//! row and does no other work (`bench::null_server`). It measures the ceiling any server can
//! reach on this machine; `scripts/bench-ceiling.sh` runs pgbench against it.

use std::net::SocketAddr;

use anyhow::Context;
use bench::null_server::{Flavor, spawn};
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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let flavor = match cli.model {
        Model::Threads => Flavor::Threads,
        Model::Epoll => Flavor::Epoll { loops: cli.loops },
        Model::Glommio => Flavor::Glommio { executors: cli.loops },
    };
    let bound =
        spawn(cli.listen, flavor).with_context(|| format!("listening on {}", cli.listen))?;
    eprintln!("ready: listening on {bound} ({flavor:?})");
    // The server threads run until the process is killed.
    loop {
        std::thread::park();
    }
}
