//! `tessera backup --to DIR`: asks a running node (over the PostgreSQL protocol, password
//! supported) to take a consistent backup into `DIR`, a directory on the node's machine that
//! is missing or empty. The node takes the cut and copies (see `engine::backup`); this prints
//! the files and bytes written. Exit status 0 on success, 1 when the node refused or failed,
//! 2 when the node cannot be reached.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::pg_client::{ClientError, SimpleClient};
use crate::engine::backup::BACKUP_SETTING;

/// How long the client waits for any answer. A backup's copy runs inside one statement, so
/// this bounds the whole copy: a day.
pub const BACKUP_STATEMENT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Arguments of `tessera backup`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory to write the backup to (missing or empty; resolved on the node's machine,
    /// relative paths against this command's working directory).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// The node's PostgreSQL address.
    #[arg(long, env = "TESSERA_LISTEN", default_value = crate::config::LISTEN_DEFAULT)]
    pub addr: String,
    /// User name to log in as.
    #[arg(long, default_value = "tessera")]
    pub user: String,
    /// The node's password, if it has one.
    #[arg(long, env = "TESSERA_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
}

/// Runs the subcommand.
pub fn main(args: &Args) -> ExitCode {
    let to = if args.to.is_absolute() {
        args.to.clone()
    } else {
        match std::env::current_dir() {
            Ok(cwd) => cwd.join(&args.to),
            Err(e) => {
                eprintln!("tessera backup: cannot resolve {}: {e}", args.to.display());
                return ExitCode::from(2);
            }
        }
    };
    let password = args.password.as_deref().filter(|p| !p.is_empty());
    let mut client =
        match SimpleClient::connect(&args.addr, &args.user, password, BACKUP_STATEMENT_TIMEOUT) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("tessera backup: cannot connect to {}: {e}", args.addr);
                return ExitCode::from(2);
            }
        };
    let quoted = to.to_string_lossy().replace('\'', "''");
    eprintln!("tessera backup: backing up the node at {} into {}", args.addr, to.display());
    let result = client.simple_query(&format!("SET {BACKUP_SETTING} = '{quoted}'"));
    client.close();
    match result {
        Ok(r) => {
            let mut words = r.tag.split_whitespace().skip(1);
            let files = words.next().unwrap_or("?");
            let bytes = words.next().unwrap_or("?");
            println!("backup complete: {files} files, {bytes} bytes in {}", to.display());
            ExitCode::SUCCESS
        }
        Err(e @ ClientError::Server { .. }) => {
            eprintln!("tessera backup: the node refused: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("tessera backup: {e}");
            ExitCode::FAILURE
        }
    }
}
