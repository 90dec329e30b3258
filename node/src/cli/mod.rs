//! Operator subcommands of the `tessera` binary, one module per subcommand. `main.rs` holds
//! only the `Command` enum and dispatch.

pub mod shard_of;
