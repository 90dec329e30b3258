//! `tessera`: the server binary and its operator commands.

use clap::Parser;

/// Tessera, a sharded document store that speaks the PostgreSQL protocol.
#[derive(Parser, Debug)]
#[command(name = "tessera", version, about)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
