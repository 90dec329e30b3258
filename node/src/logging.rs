//! Logging setup: `tracing` to stderr with a filter from `--log` / `TESSERA_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. A filter that does not parse is an error naming it, so a
/// typo does not silently turn logging off.
pub fn init(filter: &str) -> Result<(), String> {
    let mut filter =
        EnvFilter::try_new(filter).map_err(|e| format!("log filter {filter:?} is invalid: {e}"))?;
    // storage keeps segment writes off glommio's IOPOLL ring by making glommio's iopoll probe
    // fail once per executor (`storage::disk`); glommio reports that failure at ERROR from
    // `glommio::reactor`, whose only ERROR it is. It is expected, so it is not shown.
    if let Ok(quiet) = "glommio::reactor=off".parse() {
        filter = filter.add_directive(quiet);
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, and never when NO_COLOR is set
        // (https://no-color.org): logs piped to files and tests stay plain text.
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_target(false)
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))
}
