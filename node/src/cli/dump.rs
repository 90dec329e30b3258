//! `tessera dump --data-dir D [--collection C] [--shard-range A..B]`: every document of a
//! stopped node's data directory (or a backup) as JSON lines,
//! `{"collection","id","shard","version","doc"}`, in fragment (shard) order, streamed to
//! stdout. Transactions prepared without a Commit record in a fragment are shown when the
//! coordinator's journal holds their COMMIT decision (as recovery would apply it), and left
//! out otherwise. Read-only, with the same lock rule as `verify`. Exit status 0, 1 when a
//! fragment could not be read (the others are still dumped), 2 for unusable arguments.

use std::io::{BufWriter, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use std::collections::BTreeMap;

use router::{FragmentId, ShardRange};
use storage::OfflineFragment;

use crate::engine::{MarkerEvidence, marker};

use super::verify::OfflineDir;

/// Arguments of `tessera dump`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The data directory (of a stopped node) or a backup directory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Only this collection.
    #[arg(long)]
    pub collection: Option<String>,
    /// Only shards in `A..B` (half-open, `0 <= A < B <= 1048576`).
    #[arg(long, value_name = "A..B", value_parser = parse_range)]
    pub shard_range: Option<ShardRange>,
}

/// Parses `A..B`.
pub fn parse_range(text: &str) -> Result<ShardRange, String> {
    let (a, b) = text.split_once("..").ok_or("expected A..B")?;
    let a: u32 = a.trim().parse().map_err(|e| format!("start {a:?}: {e}"))?;
    let b: u32 = b.trim().parse().map_err(|e| format!("end {b:?}: {e}"))?;
    ShardRange::new(a, b)
        .ok_or_else(|| format!("{a}..{b} is empty or past {}", router::SHARD_COUNT))
}

/// Runs the subcommand.
pub fn main(args: &Args) -> ExitCode {
    let dir = match OfflineDir::open(&args.data_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tessera dump: {e}");
            return ExitCode::from(2);
        }
    };
    // A transaction prepared in some fragments whose Commit records are missing (a crash, or
    // a backup cut, during its phase two) is committed when the coordinator's journal says
    // so: the dump shows it whole, as recovery would serve it.
    let decisions = match crate::engine::read_decisions(&args.data_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tessera dump: cannot read the coordinator journal: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One-round commits in doubt are decided from every fragment's log (as recovery does),
    // so every fragment is read once first for its marker evidence.
    let mut evidence = BTreeMap::new();
    for f in &dir.layout().fragments {
        let id = FragmentId::new(f.id);
        let Ok(fragment) = OfflineFragment::open(&dir.fragment_dir(f.id), id) else { continue };
        let Some(range) = ShardRange::new(f.start, f.end) else { continue };
        let mut live = Vec::new();
        fragment.scan(marker::COLLECTION, range, |doc| {
            live.push(doc.id().to_owned());
            ControlFlow::Continue(())
        });
        let e = MarkerEvidence::gather(
            fragment.in_doubt(),
            |txid| fragment.prepared_doc(txid, marker::COLLECTION, &marker::id(txid)),
            live,
        );
        evidence.insert(id, e);
    }
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut ok = true;
    let wanted = args.shard_range.unwrap_or(ShardRange::ALL);
    for f in &dir.layout().fragments {
        let Some(range) = ShardRange::new(f.start.max(wanted.start()), f.end.min(wanted.end()))
        else {
            continue;
        };
        let mut fragment =
            match OfflineFragment::open(&dir.fragment_dir(f.id), FragmentId::new(f.id)) {
                Ok(fragment) => fragment,
                Err(e) => {
                    ok = false;
                    eprintln!("tessera dump: fragment ${} skipped: {e}", f.id);
                    continue;
                }
            };
        let marked = evidence.get(&FragmentId::new(f.id)).map(|e| &e.in_doubt);
        fragment.commit_in_doubt(|txid| match marked.and_then(|m| m.get(&txid)) {
            // A participant not read is no evidence of anything: left out, as recovery
            // refuses to guess.
            Some(participants) => marker::committed(txid, participants, &evidence).unwrap_or(false),
            None => decisions.get(&txid) == Some(&true),
        });
        let collections = match &args.collection {
            Some(c) => vec![c.clone()],
            None => fragment.collections(),
        };
        let collections: Vec<String> =
            collections.into_iter().filter(|c| c != marker::COLLECTION).collect();
        for collection in collections {
            let mut failed = None;
            fragment.scan(&collection, range, |doc| {
                let line = serde_json::json!({
                    "collection": doc.collection(),
                    "id": doc.id(),
                    "shard": doc.shard().get(),
                    "version": doc.version().get(),
                    "doc": doc.doc().to_serde(),
                });
                match writeln!(out, "{line}") {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => {
                        failed = Some(e);
                        ControlFlow::Break(())
                    }
                }
            });
            if let Some(e) = failed {
                // A closed pipe (`| head`) ends the dump quietly.
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("tessera dump: {e}");
                    return ExitCode::FAILURE;
                }
                return ExitCode::SUCCESS;
            }
        }
    }
    if let Err(e) = out.flush()
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("tessera dump: {e}");
        return ExitCode::FAILURE;
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
