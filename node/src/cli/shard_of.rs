//! `tessera shard-of <id>...`: where each document lives (SHARDING.md §2).
//!
//! Prints one line per id: `<id>\t<shard>`, or `<id>\terror: <reason>`. With `--config FILE`
//! and `--doc JSON`, an id ending in `$` gets its content-based assignment:
//! `<id>\t<shard>\t<final id>` (the id the document would be stored under). The exit status
//! is 0 when every id has a shard, 1 when any id errored, 2 when the arguments are unusable
//! (unreadable configuration file, invalid configuration or document).

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use router::{IdError, Placement, ShardingConfig};

/// Arguments of `tessera shard-of`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Document ids, e.g. 'orders/2-A$customers/1-A'. Quote them: `$` is special to shells.
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<OsString>,
    /// A collection's content-based sharding configuration (JSON file, e.g.
    /// {"Fields": ["Customer"], "Range": 1000}), used to assign ids that end with `$`.
    #[arg(long, value_name = "FILE", requires = "doc")]
    pub config: Option<PathBuf>,
    /// The document (JSON text) whose content places ids that end with `$`.
    #[arg(long, value_name = "JSON", requires = "config")]
    pub doc: Option<String>,
}

/// Content needed to assign trailing-`$` ids.
struct Content {
    config: ShardingConfig,
    doc: serde_json::Value,
}

/// Runs the subcommand, printing to stdout.
pub fn main(args: &Args) -> ExitCode {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match run(args, &mut out) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            let _ = out.flush();
            eprintln!("tessera shard-of: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Prints one line per id to `out`; `Ok(true)` when every id has a shard.
pub fn run(args: &Args, out: &mut impl Write) -> anyhow::Result<bool> {
    let content = match (&args.config, &args.doc) {
        (Some(path), Some(doc)) => Some(load_content(path, doc)?),
        _ => None,
    };
    let mut all_ok = true;
    for id in &args.ids {
        let bytes = id.as_encoded_bytes();
        let shown = id.to_string_lossy();
        match place(bytes, content.as_ref()) {
            Ok(line) => writeln!(out, "{shown}\t{line}")?,
            Err(reason) => {
                all_ok = false;
                writeln!(out, "{shown}\terror: {reason}")?;
            }
        }
    }
    out.flush()?;
    Ok(all_ok)
}

fn load_content(path: &std::path::Path, doc: &str) -> anyhow::Result<Content> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading configuration {}", path.display()))?;
    let config = ShardingConfig::parse(&text)
        .with_context(|| format!("configuration {}", path.display()))?;
    let doc = serde_json::from_str(doc).context("--doc is not valid JSON")?;
    Ok(Content { config, doc })
}

/// The text after the id on its line, or the reason the id has no shard.
fn place(id: &[u8], content: Option<&Content>) -> Result<String, String> {
    match router::shard_of_bytes(id) {
        Ok(Placement::Hashed(shard) | Placement::Explicit(shard)) => Ok(shard.to_string()),
        Ok(Placement::Content) => {
            let Some(content) = content else {
                return Err(format!(
                    "{}; pass --config FILE and --doc JSON to see its assignment",
                    IdError::NeedsContent
                ));
            };
            // shard_of_bytes accepted it, so it is UTF-8.
            let text = String::from_utf8_lossy(id);
            match router::assign(&content.config, &text, &content.doc) {
                Ok((final_id, shard)) => Ok(format!("{shard}\t{final_id}")),
                Err(e) => Err(e.to_string()),
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(ids: &[&str]) -> (bool, String) {
        let args = Args { ids: ids.iter().map(OsString::from).collect(), config: None, doc: None };
        let mut out = Vec::new();
        let ok = run(&args, &mut out).expect("writing to a Vec");
        (ok, String::from_utf8(out).expect("UTF-8 output"))
    }

    // Checks the output format and the status for a good and a bad id.
    #[test]
    fn formats_lines() {
        assert_eq!(
            lines(&["orders/2-A$customers/1-A"]),
            (true, "orders/2-A$customers/1-A\t982173\n".to_owned())
        );
        let (ok, text) = lines(&["x$@", "users/1"]);
        assert!(!ok);
        assert!(text.starts_with("x$@\terror: "));
        assert!(text.ends_with("users/1\t1005385\n"));
        let (ok, text) = lines(&["orders/1-A$"]);
        assert!(!ok);
        assert!(text.contains("--config"));
    }
}
