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

/// Statements run once before loading, in order: drop and create the collection.
pub fn setup(flavor: Flavor) -> &'static [&'static str] {
    match flavor {
        Flavor::Tessera => &[
            "DROP TABLE IF EXISTS bench_docs",
            r#"CREATE TABLE bench_docs () WITH (sharding = '{"Fields":["customer"],"Range":1}')"#,
        ],
        Flavor::Postgres => &[
            "DROP TABLE IF EXISTS bench_docs",
            "CREATE TABLE bench_docs (id text PRIMARY KEY, doc jsonb NOT NULL)",
            // The content-routed field gets an index, as Tessera routes on it.
            "CREATE INDEX bench_docs_customer ON bench_docs ((doc->>'customer'))",
        ],
    }
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

/// The statements a workload prepares on every connection.
pub fn statements(workload: Workload) -> &'static [Stmt] {
    match workload {
        Workload::PointRead | Workload::YcsbC => &[Stmt::PointRead],
        Workload::Insert => &[Stmt::Insert],
        Workload::Upsert => &[Stmt::Upsert],
        Workload::ContentQuery => &[Stmt::ContentQuery],
        Workload::ScatterQuery => &[Stmt::ScatterQuery],
        Workload::SingleFragmentTxn | Workload::CrossFragmentTransfer => {
            &[Stmt::Debit, Stmt::Credit]
        }
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
            assert!(setup(flavor).iter().any(|s| s.starts_with("CREATE TABLE bench_docs")));
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
    fn unit_tessera_sql_routes_as_the_brief_says() {
        // The statements that must reach one shard use id() or the sharding field.
        assert!(sql(Flavor::Tessera, Stmt::PointRead).contains("id() = $1"));
        assert!(sql(Flavor::Tessera, Stmt::ContentQuery).contains("customer = $1"));
        assert!(setup(Flavor::Tessera)[1].contains(r#""Fields":["customer"]"#));
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
