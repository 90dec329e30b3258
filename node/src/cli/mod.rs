//! Operator subcommands of the `tessera` binary, one module per subcommand. `main.rs` holds
//! only the `Command` enum and dispatch.

pub mod admin;
pub mod backup;
pub mod dump;
pub mod pg_client;
pub mod restore;
pub mod serve;
pub mod shard_of;
pub mod verify;
