//! Error enums of the load generator, one per operation family.

use std::path::PathBuf;

/// A command line or run configuration that cannot be used. Reported before any connection opens.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `--target` is not `flavor=connection-string`.
    #[error(
        "target {spec:?}: expected FLAVOR=CONNECTION_STRING, e.g. postgres=postgres://user@127.0.0.1:5432/db"
    )]
    TargetSyntax {
        /// What the user gave.
        spec: String,
    },
    /// The flavor before `=` is not one we know.
    #[error("target {spec:?}: unknown flavor {flavor:?} (known: tessera, postgres)")]
    UnknownFlavor {
        /// What the user gave.
        spec: String,
        /// The unknown flavor.
        flavor: String,
    },
    /// The connection string does not parse.
    #[error("target {spec:?}: bad connection string: {source}")]
    ConnectionString {
        /// What the user gave.
        spec: String,
        /// The parser's complaint.
        source: tokio_postgres::Error,
    },
    /// Two targets have the same name.
    #[error("target name {name:?} is used twice; name them NAME:FLAVOR=... to tell them apart")]
    DuplicateTarget {
        /// The repeated name.
        name: String,
    },
    /// A workload name we do not know.
    #[error("unknown workload {name:?} (known: {known})")]
    UnknownWorkload {
        /// What the user gave.
        name: String,
        /// Every known name, comma-separated.
        known: String,
    },
    /// A duration like `10s` that does not parse.
    #[error(
        "bad duration {text:?}: expected a number followed by ms, s or m (e.g. 500ms, 10s, 2m)"
    )]
    Duration {
        /// What the user gave.
        text: String,
    },
    /// A value outside its limit (see `limits.rs`).
    #[error("{what} = {value} is outside {min}..={max}")]
    Limit {
        /// The setting.
        what: &'static str,
        /// The value given.
        value: u64,
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// A workload that needs more documents than the data set has.
    #[error("workload {workload} reads existing documents; give --docs N with N >= {min}")]
    NeedsDocuments {
        /// The workload.
        workload: &'static str,
        /// Fewest documents it needs.
        min: u64,
    },
}

/// Writing results to disk failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// Creating a directory or writing a file failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Encoding a histogram log failed.
    #[error("writing the histogram log {path}: {message}")]
    HistogramLog {
        /// The file.
        path: PathBuf,
        /// The encoder's complaint.
        message: String,
    },
    /// Serialising run.json failed.
    #[error("serialising {path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
}

/// A node's `SHOW FRAGMENTS` that does not describe a usable layout.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A `shards` value that is not `[start, end)`.
    #[error("SHOW FRAGMENTS: shard range {text:?} is not [start, end)")]
    Range {
        /// The value.
        text: String,
    },
    /// Ranges that leave a gap, overlap, or do not reach the last shard.
    #[error("SHOW FRAGMENTS: range {text} does not continue at shard {expected_start}")]
    Coverage {
        /// The offending range (or `(end)`).
        text: String,
        /// Where the next range had to start.
        expected_start: u32,
    },
}
