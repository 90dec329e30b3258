//! Logging setup: `tracing` to stderr with a filter from `--log` / `TESSERA_LOG`.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. A filter that does not parse is an error naming it, so a
/// typo does not silently turn logging off.
pub fn init(filter: &str) -> Result<(), String> {
    let filter =
        EnvFilter::try_new(filter).map_err(|e| format!("log filter {filter:?} is invalid: {e}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))
}
