//! `tessera`: the server binary and its operator commands. One `Command` variant per
//! subcommand; each lives in its own module under `node::cli`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Tessera, a sharded document store that speaks the PostgreSQL protocol.
#[derive(Parser, Debug)]
#[command(name = "tessera", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the shard of each document id (`<id>\t<shard>`), or why it has none.
    ShardOf(node::cli::shard_of::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::ShardOf(args) => node::cli::shard_of::main(&args),
    }
}
