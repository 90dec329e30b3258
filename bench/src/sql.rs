//! Every SQL statement the benchmark sends, per flavor, in one table.
//!
//! When Tessera's SQL layer changes, this file is the only one to adjust. Parameters are
//! always text (`Param`), so a server may type them as text, json or jsonb.
//!
//! The data set, identical for both flavors: documents
//! `{"customer": "customers/<c>", "tag": "t<k mod TAG_COUNT>", "balance": 1000, "field0": "<filler>"}`
//! with id `d/<k>$customers/<c>` and `c = k / DOCS_PER_CUSTOMER`. The `$` suffix places every
//! document of a customer on the shard of its customer (SHARDING.md §2), which is also the
//! shard its content routes to, so Tessera's content-sharded collection accepts it, a
//! content query touches one fragment, and two documents of one customer make a
//! single-fragment transaction. For PostgreSQL the `$` is an ordinary character.

use std::error::Error;

use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::config::{Flavor, Workload};

/// The collection (table) every workload uses.
pub const COLLECTION: &str = "bench_docs";

/// One prepared statement kind. Parameters are listed with each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stmt {
    /// `$1` id, `$2` document JSON.
    Insert,
    /// `$1` id. Returns the document.
    PointRead,
    /// `$1` id, `$2` document JSON: insert, or replace the document's fields.
    Upsert,
    /// `$1` id, `$2` new `field0` text (YCSB's update).
    UpdateField,
    /// `$1` customer. Returns that customer's documents.
    ContentQuery,
    /// `$1` tag. Returns the ids of documents with that tag, from every fragment.
    ScatterQuery,
    /// `$1` id: balance - 10.
    Debit,
    /// `$1` id: balance + 10.
    Credit,
}

impl Stmt {
    /// Every statement kind.
    pub const ALL: [Stmt; 8] = [
        Stmt::Insert,
        Stmt::PointRead,
        Stmt::Upsert,
        Stmt::UpdateField,
        Stmt::ContentQuery,
        Stmt::ScatterQuery,
        Stmt::Debit,
        Stmt::Credit,
    ];

    /// Number of `$n` parameters the statement takes.
    pub fn params(self) -> usize {
        match self {
            Stmt::Insert | Stmt::Upsert | Stmt::UpdateField => 2,
            Stmt::PointRead
            | Stmt::ContentQuery
            | Stmt::ScatterQuery
            | Stmt::Debit
            | Stmt::Credit => 1,
        }
    }
}

/// Statements that open, end and abandon a transaction (sent as simple queries).
pub const BEGIN: &str = "BEGIN";
/// See `BEGIN`.
pub const COMMIT: &str = "COMMIT";
/// See `BEGIN`.
pub const ROLLBACK: &str = "ROLLBACK";

/// Statements run once before loading, in order: start from an empty collection.
///
/// Tessera has no DROP TABLE yet: it creates the collection if it is missing and truncates
/// an existing one (whose sharding configuration then stays as it was; TRUNCATE, because a
/// DELETE of a collection with more than 4,096 documents on a fragment is refused).
pub fn setup(flavor: Flavor) -> &'static [&'static str] {
    // (A node built before TRUNCATE refuses it: `setup_fallback`.)
    match flavor {
        Flavor::Tessera => &[
            r#"CREATE TABLE IF NOT EXISTS bench_docs () WITH (sharding = '{"Fields":["customer"],"Range":1}')"#,
            "TRUNCATE bench_docs",
        ],
        Flavor::Postgres => &[
            "DROP TABLE IF EXISTS bench_docs",
            "CREATE TABLE bench_docs (id text PRIMARY KEY, doc jsonb NOT NULL)",
            // The content-routed field gets an index, as Tessera routes on it.
            "CREATE INDEX bench_docs_customer ON bench_docs ((doc->>'customer'))",
        ],
    }
}

/// What to run instead of setup statement `stmt` when the server refuses it as unsupported
/// (0A000): a Tessera node older than TRUNCATE (session 16) empties the collection with
/// DELETE, which works while no fragment holds more than 4,096 documents. A/B runs against
/// older builds need it.
pub fn setup_fallback(stmt: &str) -> Option<&'static str> {
    (stmt == "TRUNCATE bench_docs").then_some("DELETE FROM bench_docs")
}

/// Why `flavor` cannot run `workload` yet, or `None` when it can. The driver skips such a
/// pair and records the reason in run.json and the summary instead of counting errors.
///
/// Nothing is skipped today: Tessera runs the transaction workloads since transaction blocks
/// landed (issue 5). The rule stays so that the next gap is skipped with its reason, not sent.
pub fn unsupported(flavor: Flavor, workload: Workload) -> Option<&'static str> {
    match (flavor, workload) {
        (Flavor::Tessera | Flavor::Postgres, _) => None,
    }
}

/// How the loader writes a batch of documents in `flavor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadStyle {
    /// BEGIN, one pipelined `Stmt::Insert` per document, COMMIT: one commit per batch.
    Transaction,
    /// One multi-row `INSERT ... VALUES ($1, $2), ($3, $4), ...` per batch, no transaction
    /// block (the server applies it per executor, which is fine for loading).
    MultiRow,
}

/// The loader's style for `flavor`.
pub fn load_style(flavor: Flavor) -> LoadStyle {
    match flavor {
        Flavor::Tessera => LoadStyle::MultiRow,
        Flavor::Postgres => LoadStyle::Transaction,
    }
}

/// A multi-row insert of `rows` documents: parameters `$2i+1` (id) and `$2i+2` (document
/// JSON) for row `i`. `rows` must be at least 1.
pub fn multi_row_insert(rows: usize) -> String {
    let mut s = format!("INSERT INTO {COLLECTION} VALUES ");
    for i in 0..rows {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&format!("(${}, ${})", 2 * i + 1, 2 * i + 2));
    }
    s
}

/// The SQL text of one statement in one flavor.
pub fn sql(flavor: Flavor, stmt: Stmt) -> &'static str {
    match (flavor, stmt) {
        (Flavor::Tessera, Stmt::Insert) => "INSERT INTO bench_docs VALUES ($1, $2)",
        (Flavor::Tessera, Stmt::PointRead) => "SELECT * FROM bench_docs WHERE id() = $1",
        (Flavor::Tessera, Stmt::Upsert) => {
            "INSERT INTO bench_docs VALUES ($1, $2) ON CONFLICT (id) DO UPDATE \
             SET balance = excluded.balance, field0 = excluded.field0"
        }
        (Flavor::Tessera, Stmt::UpdateField) => "UPDATE bench_docs SET field0 = $2 WHERE id() = $1",
        (Flavor::Tessera, Stmt::ContentQuery) => "SELECT * FROM bench_docs WHERE customer = $1",
        (Flavor::Tessera, Stmt::ScatterQuery) => "SELECT id() FROM bench_docs WHERE tag = $1",
        (Flavor::Tessera, Stmt::Debit) => {
            "UPDATE bench_docs SET balance = balance - 10 WHERE id() = $1"
        }
        (Flavor::Tessera, Stmt::Credit) => {
            "UPDATE bench_docs SET balance = balance + 10 WHERE id() = $1"
        }
        (Flavor::Postgres, Stmt::Insert) => {
            "INSERT INTO bench_docs (id, doc) VALUES ($1, $2::text::jsonb)"
        }
        (Flavor::Postgres, Stmt::PointRead) => "SELECT id, doc FROM bench_docs WHERE id = $1",
        (Flavor::Postgres, Stmt::Upsert) => {
            "INSERT INTO bench_docs (id, doc) VALUES ($1, $2::text::jsonb) \
             ON CONFLICT (id) DO UPDATE SET doc = bench_docs.doc || EXCLUDED.doc"
        }
        (Flavor::Postgres, Stmt::UpdateField) => {
            "UPDATE bench_docs SET doc = jsonb_set(doc, '{field0}', to_jsonb($2::text)) WHERE id = $1"
        }
        (Flavor::Postgres, Stmt::ContentQuery) => {
            "SELECT id, doc FROM bench_docs WHERE doc->>'customer' = $1"
        }
        (Flavor::Postgres, Stmt::ScatterQuery) => {
            "SELECT id FROM bench_docs WHERE doc->>'tag' = $1"
        }
        (Flavor::Postgres, Stmt::Debit) => {
            "UPDATE bench_docs SET doc = jsonb_set(doc, '{balance}', \
             to_jsonb((doc->>'balance')::bigint - 10)) WHERE id = $1"
        }
        (Flavor::Postgres, Stmt::Credit) => {
            "UPDATE bench_docs SET doc = jsonb_set(doc, '{balance}', \
             to_jsonb((doc->>'balance')::bigint + 10)) WHERE id = $1"
        }
    }
}

/// A transaction block as one simple Query message: `BEGIN; <each statement with its one
/// parameter `$1` as a quoted literal>; COMMIT`.
pub fn block(flavor: Flavor, steps: &[(Stmt, &str)]) -> String {
    let mut s = String::from(BEGIN);
    for (stmt, id) in steps {
        s.push_str("; ");
        s.push_str(&inlined(flavor, *stmt, id));
    }
    s.push_str("; ");
    s.push_str(COMMIT);
    s
}

/// `stmt` with its one parameter `$1` as the quoted literal `id` (quotes doubled).
pub fn inlined(flavor: Flavor, stmt: Stmt, id: &str) -> String {
    sql(flavor, stmt).replace("$1", &format!("'{}'", id.replace('\'', "''")))
}

/// The statements a workload prepares on every connection.
pub fn statements(workload: Workload) -> &'static [Stmt] {
    match workload {
        Workload::PointRead | Workload::YcsbC => &[Stmt::PointRead],
        Workload::Insert => &[Stmt::Insert],
        Workload::Upsert => &[Stmt::Upsert],
        Workload::ContentQuery => &[Stmt::ContentQuery],
        Workload::ScatterQuery => &[Stmt::ScatterQuery],
        Workload::SingleFragmentTxn
        | Workload::CrossFragmentTransfer
        | Workload::PipelinedTxn
        | Workload::TwoWriteAutocommit
        | Workload::QueryTxn => &[Stmt::Debit, Stmt::Credit],
        Workload::AutocommitWrite
        | Workload::SingleWriteTxn
        | Workload::QueryWriteTxn
        | Workload::QueryWrite => &[Stmt::Debit],
        Workload::YcsbA | Workload::YcsbB => &[Stmt::PointRead, Stmt::UpdateField],
    }
}

/// A text parameter that binds to text-like, `json` and `jsonb` parameters alike, so the
/// statement table need not know how each server types its parameters.
#[derive(Debug)]
pub struct Param<'a>(pub &'a str);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut tokio_postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        if *ty == Type::JSONB {
            // jsonb's binary format: a version byte (1), then the JSON text.
            out.extend_from_slice(&[1]);
        }
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB || <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placeholders(sql: &str) -> usize {
        (1..=9).filter(|n| sql.contains(&format!("${n}"))).count()
    }

    #[test]
    fn unit_every_statement_exists_in_every_flavor_with_its_parameters() {
        // Each flavor's SQL for each statement names the collection and uses exactly the
        // parameters the driver binds ($1..$params, nothing more).
        for flavor in [Flavor::Tessera, Flavor::Postgres] {
            for stmt in Stmt::ALL {
                let text = sql(flavor, stmt);
                assert!(text.contains(COLLECTION), "{flavor:?} {stmt:?}");
                assert_eq!(placeholders(text), stmt.params(), "{flavor:?} {stmt:?}: {text}");
            }
            assert!(setup(flavor).iter().any(|s| s.starts_with("CREATE TABLE")));
        }
    }

    #[test]
    fn unit_every_workload_prepares_what_it_sends() {
        // Reads and writes of each workload come from its own statement list.
        for w in Workload::ALL {
            assert!(!statements(w).is_empty(), "{w}");
        }
        assert_eq!(statements(Workload::YcsbA), &[Stmt::PointRead, Stmt::UpdateField]);
        assert_eq!(statements(Workload::CrossFragmentTransfer), &[Stmt::Debit, Stmt::Credit]);
    }

    #[test]
    fn unit_block_inlines_each_id_as_a_literal() {
        // One Query message: BEGIN, the statements with $1 quoted (quotes doubled), COMMIT.
        let text = block(Flavor::Tessera, &[(Stmt::Debit, "d/1$c"), (Stmt::Credit, "o'k")]);
        assert_eq!(
            text,
            "BEGIN; UPDATE bench_docs SET balance = balance - 10 WHERE id() = 'd/1$c'; \
             UPDATE bench_docs SET balance = balance + 10 WHERE id() = 'o''k'; COMMIT"
        );
        assert!(!block(Flavor::Postgres, &[(Stmt::Debit, "x")]).contains("$1"));
        assert_eq!(
            inlined(Flavor::Tessera, Stmt::Debit, "o'k"),
            "UPDATE bench_docs SET balance = balance - 10 WHERE id() = 'o''k'"
        );
    }

    #[test]
    fn unit_tessera_sql_routes_as_the_brief_says() {
        // The statements that must reach one shard use id() or the sharding field.
        assert!(sql(Flavor::Tessera, Stmt::PointRead).contains("id() = $1"));
        assert!(sql(Flavor::Tessera, Stmt::ContentQuery).contains("customer = $1"));
        assert!(setup(Flavor::Tessera)[0].contains(r#""Fields":["customer"]"#));
    }

    // Checks the emptying step has a fallback for nodes older than TRUNCATE, and only it.
    #[test]
    fn unit_truncate_falls_back_to_delete() {
        let empty = setup(Flavor::Tessera).iter().find(|s| s.starts_with("TRUNCATE"));
        assert_eq!(empty.and_then(|s| setup_fallback(s)), Some("DELETE FROM bench_docs"));
        assert_eq!(setup_fallback(setup(Flavor::Tessera)[0]), None);
    }

    #[test]
    fn unit_every_flavor_runs_every_workload() {
        // Since Tessera has transaction blocks, both flavors run every workload.
        for w in Workload::ALL {
            assert_eq!(unsupported(Flavor::Postgres, w), None, "{w}");
            assert_eq!(unsupported(Flavor::Tessera, w), None, "{w}");
        }
        assert!(!setup(Flavor::Tessera).iter().any(|s| s.contains("DROP")));
    }

    #[test]
    fn unit_multi_row_insert_numbers_parameters_in_pairs() {
        // Row i binds $2i+1 and $2i+2; the loader's batch bound fits the server's row limit.
        assert_eq!(multi_row_insert(1), "INSERT INTO bench_docs VALUES ($1, $2)");
        assert_eq!(multi_row_insert(2), "INSERT INTO bench_docs VALUES ($1, $2), ($3, $4)");
        let big = multi_row_insert(crate::limits::LOAD_BATCH_DOCS);
        assert!(big.ends_with(&format!("(${}, ${})", 2 * 256 - 1, 2 * 256)));
        assert_eq!(load_style(Flavor::Tessera), LoadStyle::MultiRow);
        assert_eq!(load_style(Flavor::Postgres), LoadStyle::Transaction);
    }

    #[test]
    fn unit_param_encodes_json_and_jsonb() {
        // jsonb gets the version byte; text and json are the bytes as they are.
        let mut buf = tokio_postgres::types::private::BytesMut::new();
        Param("{}").to_sql(&Type::JSONB, &mut buf).unwrap();
        assert_eq!(&buf[..], b"\x01{}");
        let mut buf = tokio_postgres::types::private::BytesMut::new();
        Param("{}").to_sql(&Type::TEXT, &mut buf).unwrap();
        assert_eq!(&buf[..], b"{}");
        assert!(<Param as ToSql>::accepts(&Type::JSON));
        assert!(<Param as ToSql>::accepts(&Type::VARCHAR));
        assert!(!<Param as ToSql>::accepts(&Type::INT8));
    }
}
