//! Targets, workloads and run settings, parsed and checked against `limits.rs`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use crate::error::ConfigError;
use crate::limits;

/// Which SQL dialect a target speaks (see `sql.rs` for the statements of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// A Tessera node: collections of JSON documents, `id()` and top-level fields as columns.
    Tessera,
    /// PostgreSQL: a table `(id text primary key, doc jsonb)` with an expression index.
    Postgres,
}

impl Flavor {
    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Tessera => "tessera",
            Flavor::Postgres => "postgres",
        }
    }
}

/// One server to measure: a name for the results, its flavor and how to connect.
#[derive(Clone, Debug)]
pub struct Target {
    name: String,
    flavor: Flavor,
    config: tokio_postgres::Config,
    /// The connection string with any password removed, for results and logs.
    display: String,
}

impl Target {
    /// The name used in tables, file names and plots.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The SQL dialect.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }
    /// How to connect.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }
    /// The connection string without its password.
    pub fn display(&self) -> &str {
        &self.display
    }
}

impl FromStr for Target {
    type Err = ConfigError;

    /// Parses `FLAVOR=CONNSTR` or `NAME:FLAVOR=CONNSTR`.
    fn from_str(spec: &str) -> Result<Self, ConfigError> {
        let syntax = || ConfigError::TargetSyntax { spec: spec.to_owned() };
        let (head, conn) = spec.split_once('=').ok_or_else(syntax)?;
        let (name, flavor_text) = match head.split_once(':') {
            Some((name, flavor)) => (name, flavor),
            None => (head, head),
        };
        let name_ok = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok || conn.is_empty() {
            return Err(syntax());
        }
        let flavor = match flavor_text {
            "tessera" => Flavor::Tessera,
            "postgres" | "postgresql" => Flavor::Postgres,
            other => {
                return Err(ConfigError::UnknownFlavor {
                    spec: spec.to_owned(),
                    flavor: other.to_owned(),
                });
            }
        };
        let config = tokio_postgres::Config::from_str(conn)
            .map_err(|source| ConfigError::ConnectionString { spec: redact(spec), source })?;
        Ok(Target { name: name.to_owned(), flavor, config, display: redact(conn) })
    }
}

/// Removes a password from a URL-style connection string (`user:secret@host` -> `user:***@host`)
/// and from a key-value one (`password=secret` -> `password=***`).
pub fn redact(conn: &str) -> String {
    let mut out = conn.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end =
            out[rest_start..].find(['/', '?']).map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(rest_start + colon + 1..rest_start + at, "***");
            }
        }
    }
    let mut redacted = String::with_capacity(out.len());
    for (i, word) in out.split(' ').enumerate() {
        if i > 0 {
            redacted.push(' ');
        }
        match word.split_once('=') {
            Some((key, _)) if key == "password" => {
                redacted.push_str(key);
                redacted.push_str("=***");
            }
            _ => redacted.push_str(word),
        }
    }
    redacted
}

/// One kind of operation mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Read one document by id, keys uniform.
    PointRead,
    /// Insert a new document with a fresh id.
    Insert,
    /// Insert-or-update a document with an existing id, keys uniform.
    Upsert,
    /// Query by the content-sharding field (`customer`): one fragment in Tessera.
    ContentQuery,
    /// Query by an unindexed, unrouted field (`tag`): every fragment in Tessera.
    ScatterQuery,
    /// BEGIN, two updates of documents of one customer (one shard), COMMIT.
    SingleFragmentTxn,
    /// BEGIN, two updates of two documents on fragments of different executors, COMMIT
    /// (`layout.rs` says how the pairs are chosen).
    CrossFragmentTransfer,
    /// `SingleFragmentTxn` with its four statements pipelined: sent together, answered
    /// together, one round trip per transaction (what a client that batches its statements
    /// pays; the transaction is the same).
    PipelinedTxn,
    /// One autocommit UPDATE of one random document's balance: the single-row durable write
    /// a transaction is compared with.
    AutocommitWrite,
    /// BEGIN, the `AutocommitWrite` UPDATE, COMMIT, one statement at a time: what the
    /// transaction machinery adds to one write (issue 5's 1.2x goal, like for like).
    SingleWriteTxn,
    /// `SingleWriteTxn` sent as one simple Query message (`BEGIN; UPDATE ...; COMMIT`, the id
    /// a literal): one round trip, as `AutocommitWrite`.
    QueryWriteTxn,
    /// The `AutocommitWrite` UPDATE as one simple Query message, the id a literal: what
    /// `QueryWriteTxn` is compared with like for like (both are parsed on every execution,
    /// where the prepared `AutocommitWrite` is not).
    QueryWrite,
    /// The two UPDATEs of a `SingleFragmentTxn` as two autocommit statements: the same
    /// writes without a transaction, what the transfer is compared with.
    TwoWriteAutocommit,
    /// `SingleFragmentTxn` sent as one simple Query message (`BEGIN; UPDATE ...; UPDATE ...;
    /// COMMIT`, ids as literals): one round trip and, in Tessera, one block shipped whole.
    QueryTxn,
    /// YCSB A: 50 % reads, 50 % updates, zipfian keys.
    YcsbA,
    /// YCSB B: 95 % reads, 5 % updates, zipfian keys.
    YcsbB,
    /// YCSB C: 100 % reads, zipfian keys.
    YcsbC,
}

impl Workload {
    /// Every workload, in the order a full suite runs them.
    pub const ALL: [Workload; 17] = [
        Workload::PointRead,
        Workload::Insert,
        Workload::Upsert,
        Workload::ContentQuery,
        Workload::ScatterQuery,
        Workload::SingleFragmentTxn,
        Workload::CrossFragmentTransfer,
        Workload::PipelinedTxn,
        Workload::AutocommitWrite,
        Workload::SingleWriteTxn,
        Workload::QueryWriteTxn,
        Workload::QueryWrite,
        Workload::TwoWriteAutocommit,
        Workload::QueryTxn,
        Workload::YcsbA,
        Workload::YcsbB,
        Workload::YcsbC,
    ];

    /// The name used on the command line, in file names and tables.
    pub fn name(self) -> &'static str {
        match self {
            Workload::PointRead => "point-read",
            Workload::Insert => "insert",
            Workload::Upsert => "upsert",
            Workload::ContentQuery => "content-query",
            Workload::ScatterQuery => "scatter-query",
            Workload::SingleFragmentTxn => "single-fragment-txn",
            Workload::CrossFragmentTransfer => "cross-fragment-transfer",
            Workload::PipelinedTxn => "pipelined-txn",
            Workload::AutocommitWrite => "autocommit-write",
            Workload::SingleWriteTxn => "single-write-txn",
            Workload::QueryWriteTxn => "query-write-txn",
            Workload::QueryWrite => "query-write",
            Workload::TwoWriteAutocommit => "two-write-autocommit",
            Workload::QueryTxn => "query-txn",
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::YcsbC => "ycsb-c",
        }
    }

    /// Fewest loaded documents the workload needs (0: it only writes new ones).
    pub fn docs_min(self) -> u64 {
        match self {
            Workload::Insert => 0,
            // Two documents of one customer, or two distinct accounts.
            Workload::SingleFragmentTxn
            | Workload::CrossFragmentTransfer
            | Workload::PipelinedTxn
            | Workload::TwoWriteAutocommit
            | Workload::QueryTxn => limits::DOCS_PER_CUSTOMER,
            _ => 1,
        }
    }

    /// Whether one operation is a multi-statement transaction. A transaction owns its
    /// connection from BEGIN to COMMIT, so these run with pipelining depth 1.
    pub fn is_transaction(self) -> bool {
        matches!(
            self,
            Workload::SingleFragmentTxn
                | Workload::CrossFragmentTransfer
                | Workload::PipelinedTxn
                | Workload::SingleWriteTxn
                | Workload::QueryWriteTxn
                | Workload::TwoWriteAutocommit
                | Workload::QueryTxn
        )
    }

    /// Parses a comma-separated list; `all` means every workload.
    pub fn parse_list(text: &str) -> Result<Vec<Workload>, ConfigError> {
        let mut out = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word == "all" {
                for w in Workload::ALL {
                    if !out.contains(&w) {
                        out.push(w);
                    }
                }
                continue;
            }
            let w: Workload = word.parse()?;
            if !out.contains(&w) {
                out.push(w);
            }
        }
        if out.is_empty() {
            return Err(ConfigError::UnknownWorkload {
                name: text.to_owned(),
                known: Self::known(),
            });
        }
        Ok(out)
    }

    fn known() -> String {
        let mut names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        names.push("all");
        names.join(", ")
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let normal = s.trim().to_ascii_lowercase().replace('_', "-");
        Workload::ALL.into_iter().find(|w| w.name() == normal).ok_or_else(|| {
            ConfigError::UnknownWorkload { name: s.to_owned(), known: Workload::known() }
        })
    }
}

/// Parses `500ms`, `10s`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let err = || ConfigError::Duration { text: text.to_owned() };
    let t = text.trim();
    let (number, scale_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000)
    } else {
        (t, 1_000)
    };
    let n: u64 = number.trim().parse().map_err(|_| err())?;
    let ms = n.checked_mul(scale_ms).ok_or_else(err)?;
    Ok(Duration::from_millis(ms))
}

/// Arrival process of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Loop {
    /// Each connection keeps `depth` requests in flight, sending the next when one completes.
    Closed,
    /// Requests are due at fixed times, `rate_per_sec` per target in total; latency counts
    /// from the time a request was due, not the time it was sent.
    Open {
        /// Operations per second, all connections of a target together.
        rate_per_sec: u64,
    },
}

/// Everything a run needs besides its targets and workloads, already checked.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Measured time per workload per target (split over the rounds).
    #[serde(serialize_with = "ser_secs")]
    pub duration: Duration,
    /// Unmeasured time before the first round of each workload on each target.
    #[serde(serialize_with = "ser_secs")]
    pub warmup: Duration,
    /// Connections per target.
    pub connections: usize,
    /// Requests in flight per connection.
    pub depth: usize,
    /// Open or closed loop.
    pub arrival: Loop,
    /// Rounds each workload is split into; targets alternate within a round, and the order
    /// rotates between rounds so machine drift hits every target alike.
    pub rounds: u32,
    /// Documents in the data set: keys `0..docs` (see `ops.rs`).
    pub docs: u64,
    /// Create the collection and load the documents before the workloads (false: they are
    /// already there, from an earlier run with the same `docs`).
    pub load: bool,
    /// Seed of every random choice.
    pub seed: u64,
    /// How long to wait after the end of a slice for requests still in flight.
    #[serde(serialize_with = "ser_secs")]
    pub drain_timeout: Duration,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Checks a value against `min..=max`.
pub fn check_limit(what: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::Limit { what, value, min, max });
    }
    Ok(())
}

impl Settings {
    /// Checks every setting against its limit and the workloads against the loaded documents.
    pub fn validate(&self, targets: usize, workloads: &[Workload]) -> Result<(), ConfigError> {
        check_limit("targets", targets as u64, 1, limits::TARGETS_MAX as u64)?;
        check_limit(
            "duration (ms)",
            u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
            1,
            limits::DURATION_SECS_MAX * 1000,
        )?;
        check_limit(
            "warmup (ms)",
            u64::try_from(self.warmup.as_millis()).unwrap_or(u64::MAX),
            0,
            limits::WARMUP_SECS_MAX * 1000,
        )?;
        check_limit("connections", self.connections as u64, 1, limits::CONNECTIONS_MAX as u64)?;
        check_limit("depth", self.depth as u64, 1, limits::PIPELINE_DEPTH_MAX as u64)?;
        check_limit("rounds", u64::from(self.rounds), 1, u64::from(limits::ROUNDS_MAX))?;
        check_limit("docs", self.docs, 0, limits::DOCS_MAX)?;
        check_limit(
            "drain timeout (ms)",
            u64::try_from(self.drain_timeout.as_millis()).unwrap_or(u64::MAX),
            1,
            limits::DRAIN_TIMEOUT_SECS_MAX * 1000,
        )?;
        if let Loop::Open { rate_per_sec } = self.arrival {
            check_limit("rate (ops/s)", rate_per_sec, 1, limits::RATE_PER_SEC_MAX)?;
        }
        for w in workloads {
            if self.docs < w.docs_min() {
                return Err(ConfigError::NeedsDocuments { workload: w.name(), min: w.docs_min() });
            }
        }
        Ok(())
    }

    /// Pipelining depth actually used for a workload (transactions own their connection).
    pub fn depth_for(&self, workload: Workload) -> usize {
        if workload.is_transaction() { 1 } else { self.depth }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            connections: 2,
            depth: 1,
            arrival: Loop::Closed,
            rounds: 1,
            docs: 100,
            load: true,
            seed: 1,
            drain_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn unit_target_parses_flavor_name_and_connection() {
        // A plain FLAVOR=URL names the target after its flavor; NAME:FLAVOR=URL keeps the name.
        let t: Target = "postgres=postgres://bench@127.0.0.1:5999/db".parse().unwrap();
        assert_eq!(t.name(), "postgres");
        assert_eq!(t.flavor(), Flavor::Postgres);
        assert_eq!(t.config().get_dbname(), Some("db"));
        let t: Target = "pg15:postgres=host=127.0.0.1 port=1 user=x".parse().unwrap();
        assert_eq!(t.name(), "pg15");
        let t: Target = "tessera=postgres://127.0.0.1:5433/x".parse().unwrap();
        assert_eq!(t.flavor(), Flavor::Tessera);
    }

    #[test]
    fn unit_target_rejects_bad_specs_with_clear_errors() {
        // Each malformed spec maps to the error variant that names the problem.
        assert!(matches!("postgres://x".parse::<Target>(), Err(ConfigError::TargetSyntax { .. })));
        assert!(matches!(
            "mysql=postgres://127.0.0.1/x".parse::<Target>(),
            Err(ConfigError::UnknownFlavor { .. })
        ));
        assert!(matches!(
            "postgres=postgres://127.0.0.1:notaport/x".parse::<Target>(),
            Err(ConfigError::ConnectionString { .. })
        ));
        assert!(matches!(
            "=postgres://127.0.0.1/x".parse::<Target>(),
            Err(ConfigError::TargetSyntax { .. })
        ));
        let err = "a b:postgres=postgres://x/y".parse::<Target>().unwrap_err();
        assert!(err.to_string().contains("FLAVOR=CONNECTION_STRING"), "{err}");
    }

    #[test]
    fn unit_redact_hides_passwords() {
        // Passwords never reach results or logs, in either connection-string syntax.
        assert_eq!(redact("postgres://u:secret@h:1/db"), "postgres://u:***@h:1/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("host=h password=pw user=u"), "host=h password=*** user=u");
        let t: Target = "postgres=postgres://u:pw@127.0.0.1/db".parse().unwrap();
        assert!(!t.display().contains("pw"));
    }

    #[test]
    fn unit_workload_names_round_trip_and_all_expands() {
        // Every workload parses from its own name; `all` expands once, duplicates collapse.
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        }
        assert_eq!(Workload::parse_list("all").unwrap().len(), Workload::ALL.len());
        assert_eq!(
            Workload::parse_list("ycsb_a, point-read,ycsb-a").unwrap(),
            vec![Workload::YcsbA, Workload::PointRead]
        );
        let err = Workload::parse_list("point-read,nope").unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        assert!(err.to_string().contains("ycsb-c"), "{err}");
        assert!(Workload::parse_list(" , ").is_err());
    }

    #[test]
    fn unit_durations_parse_with_units() {
        // ms, s, m suffixes and bare seconds; garbage and overflow are errors.
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("1.5s").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999999999999m").is_err());
    }

    #[test]
    fn unit_settings_enforce_limits() {
        // Every bounded setting is refused past its limit with a Limit error naming it.
        let ok = settings();
        assert!(ok.validate(1, &[Workload::PointRead]).is_ok());
        let mut s = settings();
        s.connections = limits::CONNECTIONS_MAX + 1;
        assert!(matches!(s.validate(1, &[]), Err(ConfigError::Limit { what: "connections", .. })));
        let mut s = settings();
        s.depth = 0;
        assert!(s.validate(1, &[]).is_err());
        let mut s = settings();
        s.arrival = Loop::Open { rate_per_sec: limits::RATE_PER_SEC_MAX + 1 };
        assert!(s.validate(1, &[]).is_err());
        let mut s = settings();
        s.duration = Duration::from_secs(limits::DURATION_SECS_MAX + 1);
        assert!(s.validate(1, &[]).is_err());
        assert!(settings().validate(limits::TARGETS_MAX + 1, &[]).is_err());
        let mut s = settings();
        s.docs = 0;
        assert!(s.validate(1, &[Workload::Insert]).is_ok());
        assert!(matches!(
            s.validate(1, &[Workload::YcsbC]),
            Err(ConfigError::NeedsDocuments { .. })
        ));
    }

    #[test]
    fn unit_transactions_run_at_depth_one() {
        // A transaction cannot share its connection, so the depth is forced to 1 for it only.
        let mut s = settings();
        s.depth = 8;
        assert_eq!(s.depth_for(Workload::SingleFragmentTxn), 1);
        assert_eq!(s.depth_for(Workload::CrossFragmentTransfer), 1);
        assert_eq!(s.depth_for(Workload::PointRead), 8);
    }
}
