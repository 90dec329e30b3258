//! `tessera restore --from DIR --data-dir D`: checks a backup (manifest, every file's size and
//! block checksums) and refuses a damaged one naming the file and the offset of the first bad
//! block; then copies it into `D`, which must be missing or empty, and checks the copies
//! again. `tessera serve --data-dir D` then recovers it like any data directory. Exit status
//! 0 on success, 1 for a damaged backup or a failed copy, 2 for an unusable destination.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::engine::backup::{self, Manifest};

/// Arguments of `tessera restore`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The backup directory (written by `tessera backup`).
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// The new data directory (missing or empty).
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
}

/// Runs the subcommand.
pub fn main(args: &Args) -> ExitCode {
    match std::fs::read_dir(&args.data_dir).map(|mut entries| entries.next().is_some()) {
        Ok(true) => {
            eprintln!(
                "tessera restore: {} is not empty; restore into a new directory",
                args.data_dir.display()
            );
            return ExitCode::from(2);
        }
        Ok(false) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            eprintln!("tessera restore: cannot read {}: {e}", args.data_dir.display());
            return ExitCode::from(2);
        }
    }
    let manifest = match backup::verify_backup(&args.from) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("tessera restore: the backup is damaged, nothing restored: {e}");
            return ExitCode::FAILURE;
        }
    };
    match copy(&args.from, &args.data_dir, &manifest) {
        Ok(bytes) => {
            println!(
                "restored {} files, {bytes} bytes ({} fragments) into {}",
                manifest.files.len(),
                manifest.fragments.len(),
                args.data_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tessera restore: {e}");
            ExitCode::FAILURE
        }
    }
}

fn copy(from: &Path, to: &Path, manifest: &Manifest) -> Result<u64, String> {
    let mut bytes = 0;
    for f in &manifest.files {
        let source = from.join(&f.path);
        let target = to.join(&f.path);
        let parent = target.parent().unwrap_or(to);
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        std::fs::copy(&source, &target).map_err(|e| {
            format!("cannot copy {} to {}: {e}", source.display(), target.display())
        })?;
        std::fs::File::open(&target)
            .and_then(|file| file.sync_all())
            .map_err(|e| format!("cannot sync {}: {e}", target.display()))?;
        bytes += f.bytes;
    }
    let mut dirs: Vec<PathBuf> = manifest
        .files
        .iter()
        .filter_map(|f| to.join(&f.path).parent().map(Path::to_path_buf))
        .collect();
    dirs.push(to.to_path_buf());
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
    }
    backup::check_files(to, manifest).map_err(|e| format!("the copy does not match: {e}"))?;
    Ok(bytes)
}
