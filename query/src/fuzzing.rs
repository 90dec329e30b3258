//! The body of the `sql_frontend` fuzz target (`fuzz/fuzz_targets/sql_frontend.rs`), kept
//! here so the corpus replay test (`query/tests/regression_fuzz_corpus.rs`) runs exactly
//! what the fuzzer runs.
//!
//! Arbitrary bytes (UTF-8 only: SQL arrives as text) go through the whole front end: parse,
//! plan, parameter inference, binding (every parameter bound to untyped text `'1'`), routing
//! lowering, EXPLAIN rendering, and execution plus merge over three fixed documents. Errors
//! are fine; a panic, an overflow or a broken property is a finding.

use std::ops::ControlFlow;

use router::ShardRange;

use crate::exec::{
    DocVersion, FragmentSource, SourceDoc, execute_constant, execute_delete, execute_select,
    execute_update, merge,
};
use crate::plan::{CollectionName, Statement};
use crate::types::Datum;

/// Three documents every collection holds, covering each JSON kind.
struct Fixed {
    docs: [(String, serde_json::Value); 3],
}

impl Fixed {
    fn new() -> Fixed {
        Fixed {
            docs: [
                (
                    "a/1".to_owned(),
                    serde_json::json!({"a": 1, "b": "x", "c": {"d": [1, 2]}, "e": null}),
                ),
                ("a/2".to_owned(), serde_json::json!({"a": 2.5, "b": true, "id": "a/2"})),
                ("B/3".to_owned(), serde_json::json!({"a": "1", "c": {"d": "y"}})),
            ],
        }
    }
}

impl FragmentSource for Fixed {
    type Doc<'a> = &'a serde_json::Value;

    fn get<'a>(&'a self, _: &CollectionName, id: &str) -> Option<SourceDoc<'a, Self::Doc<'a>>> {
        let lower = id.to_lowercase();
        self.docs.iter().enumerate().find(|(_, (i, _))| i.to_lowercase() == lower).map(
            |(n, (i, d))| SourceDoc {
                id: i,
                shard: router::ShardId::MIN,
                version: DocVersion::new(n as u64),
                doc: d,
            },
        )
    }

    fn scan<'a>(
        &'a self,
        _: &CollectionName,
        _: &[ShardRange],
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        for (n, (i, d)) in self.docs.iter().enumerate() {
            let doc = SourceDoc {
                id: i,
                shard: router::ShardId::MIN,
                version: DocVersion::new(n as u64),
                doc: d,
            };
            if visit(doc).is_break() {
                return;
            }
        }
    }
}

/// Target `sql_frontend`. Asserts that an error never comes with a partial plan, that a
/// syntax error's position lies within the text (or one past it), and that binding leaves no
/// parameter behind.
pub fn sql_frontend(data: &[u8]) {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let statements = match crate::parse(sql) {
        Ok(s) => s,
        Err(crate::PlanError::Syntax { position, .. }) => {
            assert!(position >= 1, "positions are 1-based");
            assert!(position <= sql.chars().count() + 1, "position {position} beyond the text");
            return;
        }
        Err(_) => return,
    };
    let source = Fixed::new();
    for stmt in &statements {
        let types = crate::param_types(stmt);
        let params: Vec<Datum> = types.iter().map(|_| Datum::Text("1".to_owned())).collect();
        let Ok(bound) = crate::bind(stmt, &params) else { continue };
        assert!(crate::param_types(&bound).is_empty(), "binding left a parameter: {bound:?}");
        let _ = crate::route::statement_predicate(&bound);
        let _ = crate::explain::explain(&bound, None, None);
        run(&bound, &source);
    }
}

fn run(stmt: &Statement, source: &Fixed) {
    let all = [ShardRange::ALL];
    match stmt {
        Statement::Select(s) if s.collection.is_none() => {
            // As node runs it: the session's names put in first.
            let names = crate::expr::SessionNames { user: "u".into(), database: "d".into() };
            let _ = execute_constant(&s.with_session(&names));
        }
        Statement::Select(s) => {
            // Two fragments holding the same documents: merge must accept any partials of
            // the statement.
            if let (Ok(p1), Ok(p2)) =
                (execute_select(s, source, &all), execute_select(s, source, &all))
            {
                let _ = merge(s, vec![p1, p2]);
            }
        }
        Statement::Update(u) => {
            let _ = execute_update(u, source, &all);
        }
        Statement::Delete(d) => {
            let _ = execute_delete(d, source, &all);
        }
        Statement::Insert(i) => {
            let _ = i.documents();
        }
        Statement::Explain { inner, .. } => run(inner, source),
        _ => {}
    }
}

/// The body of the `copy_data` fuzz target: arbitrary bytes as COPY input. The first byte
/// picks the format (text or CSV, delimiter, header, escape), the second how the rest is cut
/// into messages. Errors are fine; a panic, a row with other than two fields, lines that do not
/// increase, or decoded rows that do not survive being written and read again are findings.
pub fn copy_data(data: &[u8]) {
    use crate::copy::{CopyFormat, Decoder, decode, encode_row};
    let [pick, cut, input @ ..] = data else { return };
    let mut format = if pick & 1 == 0 { CopyFormat::text() } else { CopyFormat::csv() };
    format.header = pick & 2 != 0;
    if pick & 4 != 0 {
        format.delimiter = b'|';
    }
    if pick & 8 != 0 && pick & 1 == 1 {
        format.escape = b'\\';
    }
    let columns = vec!["id".to_owned(), "doc".to_owned()];
    let mut decoder = Decoder::new(format.clone(), columns.clone());
    let (rows, _) = decode(&mut decoder, input.chunks(usize::from(*cut).max(1)));
    let mut last = 0;
    for row in &rows {
        assert_eq!(row.fields.len(), 2, "a row has one value per column");
        assert!(row.line > last, "lines increase");
        last = row.line;
    }
    let mut written = Vec::new();
    for row in &rows {
        encode_row(&mut written, &format, row.fields.iter().map(|f| Some(f.as_str())));
    }
    let mut again = Decoder::new(CopyFormat { header: false, ..format }, columns);
    let (reread, failed) = decode(&mut again, [written.as_slice()]);
    assert_eq!(failed, None, "written rows read back");
    let reread: Vec<Vec<String>> = reread.into_iter().map(|r| r.fields).collect();
    let fields: Vec<&Vec<String>> = rows.iter().map(|r| &r.fields).collect();
    assert_eq!(reread.iter().collect::<Vec<_>>(), fields, "rows survive a write and a read");
}
