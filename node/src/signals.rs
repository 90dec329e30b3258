//! SIGINT and SIGTERM start a graceful shutdown; a second one ends the process at once. A
//! cluster data node hands its fragments off before the shutdown starts
//! (`cluster::control::drain_before_exit`).
//!
//! glommio has no signal support, so a plain thread waits for signals and fires the
//! runtime's [`Shutdown`](crate::runtime::Shutdown) broadcast. Ending at once on the second
//! signal is safe for data: every acknowledged write is already durable, and recovery handles
//! whatever was in flight.

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::runtime::Shutdown;

/// Starts the signal thread. It fires `shutdown` on the first SIGINT/SIGTERM and exits the
/// process with status 130 on the second.
pub fn install(shutdown: Shutdown) -> std::io::Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("tessera-signals".into()).spawn(move || {
        let mut seen = 0u32;
        for signal in signals.forever() {
            seen += 1;
            if seen == 1 {
                tracing::info!(signal, "shutdown requested: finishing in-flight work");
                // A cluster data node first hands its fragments off (bounded), serving
                // meanwhile; elsewhere this returns at once. Its own thread, so a second
                // signal still ends the process at once.
                let after_drain = shutdown.clone();
                let drain =
                    std::thread::Builder::new().name("tessera-drain".into()).spawn(move || {
                        crate::cluster::control::drain_before_exit();
                        after_drain.trigger();
                    });
                if let Err(e) = drain {
                    tracing::warn!("cannot start the drain thread ({e}): shutting down now");
                    shutdown.trigger();
                }
            } else {
                tracing::warn!(signal, "second signal: exiting without waiting");
                std::process::exit(130);
            }
        }
    })?;
    Ok(())
}
