//! Bad SQL: syntax errors carry their position, unsupported constructs are named, deep
//! nesting and oversized input are errors (never a stack overflow), and each error has the
//! category node maps to a SQLSTATE.

mod common;

use common::{err, unsupported};
use query::{PlanError, PlanErrorCategory, parse};

// Checks syntax errors report the 1-based character position PostgreSQL clients show.
#[test]
fn syntax_error_positions() {
    let cases = [
        ("SELECT * FROM c WHERE x = = 1", 27),
        ("SELECT * FRM c", 14),
        ("SELECT *\nFROM c WHERE (a", 25),
        ("SELEC 1", 1),
        ("SELECT 'unterminated", 8),
    ];
    for (sql, position) in cases {
        match err(sql) {
            PlanError::Syntax { position: got, message } => {
                assert_eq!(got, position, "{sql:?}: {message}")
            }
            other => panic!("{sql:?}: {other:?}"),
        }
    }
    assert_eq!(err("SELECT 1 +").category(), PlanErrorCategory::Syntax);
}

// Checks every unsupported construct is refused with a name a user recognises.
#[test]
fn unsupported_constructs_are_named() {
    assert!(unsupported("SELECT * FROM a JOIN b ON a.x = b.y").contains("JOIN"));
    assert!(unsupported("SELECT * FROM a, b").contains("JOIN"));
    assert!(unsupported("SELECT DISTINCT ON (x) x FROM c").contains("DISTINCT ON"));
    assert!(unsupported("SELECT DISTINCT count(*) FROM c").contains("DISTINCT with aggregates"));
    assert!(unsupported("SELECT DISTINCT *, x FROM c").contains("DISTINCT with *"));
    assert!(unsupported("SELECT initcap(x) FROM c").contains("function initcap"));
    assert!(unsupported("SELECT * FROM c WHERE x IN (SELECT y FROM d)").contains("subquery"));
    assert!(unsupported("WITH t AS (SELECT 1) SELECT * FROM t").contains("WITH"));
    assert!(unsupported("SELECT x FROM c UNION SELECT y FROM d").contains("UNION"));
    assert!(unsupported("SELECT x::date FROM c").contains("type date"));
    assert!(unsupported("SELECT * FROM c WHERE x ~ 'a'").contains("operator"));
    assert!(unsupported("DROP VIEW c").contains("DROP"));
    assert!(unsupported("UPDATE c SET id = 'x'").contains("id"));
    assert!(unsupported("SELECT sum(count(*)) FROM c").contains("aggregate function count"));
    assert!(unsupported("CREATE TABLE c (a int)").contains("column definitions"));
    assert!(unsupported("SELECT * FROM generate_series(1, 3)").contains("generate_series"));
    assert_eq!(err("SELECT a SIMILAR TO 'b%' FROM c").category(), PlanErrorCategory::Unsupported);
}

// Checks a query of PostgreSQL's system catalogs is refused as such, by the catalog's name,
// also when it joins catalogs (psql's `\dt`) or writes to one; other schemas stay a
// qualified-name error.
#[test]
fn system_catalogs_are_refused_by_name() {
    let psql_dt = "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c \
        LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'";
    for (sql, catalog) in [
        (psql_dt, "pg_catalog.pg_class"),
        ("SELECT * FROM information_schema.tables", "information_schema.tables"),
        ("SELECT * FROM c JOIN pg_catalog.pg_type t ON t.oid = c.x", "pg_catalog.pg_type"),
        ("DELETE FROM pg_catalog.pg_class", "pg_catalog.pg_class"),
        ("INSERT INTO pg_catalog.pg_class VALUES ('x', '{}')", "pg_catalog.pg_class"),
    ] {
        let construct = unsupported(sql);
        assert!(construct.contains(&format!("system catalog {catalog}")), "{sql}: {construct}");
        assert!(construct.contains("SHOW FRAGMENTS"), "{construct}");
    }
    assert!(unsupported("SELECT * FROM other.c").contains("qualified name other.c"));
}

// Checks other planning errors: grouping, INSERT shape, negative LIMIT, bad json literal.
#[test]
fn invalid_statements() {
    assert_eq!(err("SELECT a, count(*) FROM c").category(), PlanErrorCategory::Grouping);
    assert_eq!(err("SELECT * FROM c GROUP BY a").category(), PlanErrorCategory::Invalid);
    assert_eq!(err("INSERT INTO c VALUES ('a')").category(), PlanErrorCategory::Invalid);
    assert_eq!(err("INSERT INTO c (a, b) VALUES (1, 2)").category(), PlanErrorCategory::Invalid);
    assert_eq!(err("INSERT INTO c (id, a) VALUES ('x', b)").category(), PlanErrorCategory::Invalid);
    assert_eq!(err("SELECT * FROM c LIMIT -1").category(), PlanErrorCategory::Invalid);
    assert_eq!(err("SELECT * FROM c LIMIT 'x'").category(), PlanErrorCategory::TypeMismatch);
    assert_eq!(err("SELECT * FROM c ORDER BY 3").category(), PlanErrorCategory::Invalid);
    assert_eq!(
        err("SELECT * FROM c WHERE d = '{bad'::json").category(),
        PlanErrorCategory::InvalidLiteral
    );
    assert_eq!(
        err("SELECT 99999999999999999999999e999").category(),
        PlanErrorCategory::InvalidLiteral
    );
}

// Checks id() compared with a number or boolean literal is refused (an id is text; the
// comparison would read every fragment to match nothing), in every comparison and IN list,
// with a message that says to quote it; quoted values and fields compared with numbers pass.
#[test]
fn id_compared_with_a_number_is_refused() {
    for sql in [
        "SELECT * FROM c WHERE id() = 12345",
        "SELECT * FROM c WHERE 7 = id()",
        "UPDATE c SET a = 1 WHERE id() <> 1.5",
        "DELETE FROM c WHERE id() > true",
        "SELECT * FROM c WHERE id() IN ('a', 2)",
    ] {
        let e = err(sql);
        assert_eq!(e.category(), PlanErrorCategory::TypeMismatch, "{sql}");
        assert!(e.to_string().contains("id() = '12345'"), "{sql}: {e}");
    }
    for sql in [
        "SELECT * FROM c WHERE id() = '12345'",
        "SELECT * FROM c WHERE id() IN ('1', '2')",
        "SELECT * FROM c WHERE n = 12345",
        "SELECT * FROM c WHERE id() = $1",
    ] {
        assert!(query::parse(sql).is_ok(), "{sql}");
    }
}

// Checks 10,000 nested parentheses, NOTs and unary minuses are refused, in a debug
// build on a test thread's default stack, instead of overflowing it.
#[test]
fn deep_nesting_is_an_error() {
    let parens = format!("SELECT {}1{} FROM c", "(".repeat(10_000), ")".repeat(10_000));
    assert!(matches!(err(&parens), PlanError::TooDeep { .. }));
    let nots = format!("SELECT * FROM c WHERE {}a", "NOT ".repeat(10_000));
    // sqlparser reports the exhausted recursion budget under NOT as a syntax error at the
    // point it gave up; either way it is an error, not an overflow.
    let e = err(&nots);
    assert!(matches!(e, PlanError::TooDeep { .. } | PlanError::Syntax { .. }), "{e:?}");
    let minus = format!("SELECT {}1", "- ".repeat(10_000));
    // `-` also counts as an operator token, so the operator limit may answer first.
    let e = err(&minus);
    assert!(matches!(e, PlanError::TooDeep { .. } | PlanError::LimitExceeded { .. }), "{e:?}");
    // Nesting within the limit plans.
    let ok = format!("SELECT * FROM c WHERE {}a = 1{}", "(".repeat(20), ")".repeat(20));
    parse(&ok).expect("moderate nesting plans");
}

// Checks parenthesised FROM items nested inside the parser's recursion budget are an error on
// a test thread's stack in a debug build (a fuzzed input of about twenty levels overflowed it
// before sqlparser's recursive functions kept `SQL_PARSER_STACK_MIN` in reserve).
#[test]
fn nested_from_items_do_not_overflow_the_stack() {
    let fuzzed = "SELECT ((((((((((a)))))))))) FROM(((SELECT  FROM(((((( ((((((((((a)))))))))) \
                  FROM*((((((((((((";
    assert_eq!(err(fuzzed).category(), PlanErrorCategory::Syntax);
    for n in [10, 20, 30, 47] {
        let nested = format!("SELECT * FROM {}SELECT * FROM c{}", "(".repeat(n), ")".repeat(n));
        let e = err(&nested);
        assert!(
            matches!(e, PlanError::Unsupported { .. } | PlanError::TooDeep { .. }),
            "{n}: {e:?}"
        );
        let joins = format!("SELECT * FROM {}a JOIN b ON true{}", "(".repeat(n), ")".repeat(n));
        let e = err(&joins);
        assert!(
            matches!(e, PlanError::Unsupported { .. } | PlanError::TooDeep { .. }),
            "{n}: {e:?}"
        );
    }
}

// Checks long infix chains (built iteratively by the parser) are bounded by the operator
// limit, and that text beyond the byte limit is refused before tokenizing.
#[test]
fn long_chains_and_big_text_are_limited() {
    let chain = format!("SELECT 1{} FROM c", "+1".repeat(100_000));
    assert!(matches!(err(&chain), PlanError::LimitExceeded { .. }));
    let ands = format!("SELECT * FROM c WHERE a = 1{}", " AND a = 1".repeat(5_000));
    assert_eq!(err(&ands).category(), PlanErrorCategory::LimitExceeded);
    let big = format!("SELECT '{}'", "x".repeat(query::limits::SQL_BYTES_MAX));
    assert!(matches!(err(&big), PlanError::LimitExceeded { what: "SQL text bytes", .. }));
    let casts = format!("SELECT a{} FROM c", "::text".repeat(10_000));
    assert_eq!(err(&casts).category(), PlanErrorCategory::LimitExceeded);
}

// Checks the deepest expression the planner accepts also binds and evaluates on a test
// thread's default stack (the evaluator recurses once per level), and one level more is
// refused as too deep.
#[test]
fn deepest_accepted_expression_evaluates() {
    let depth = query::limits::EXPR_DEPTH_MAX - 2;
    let sql = format!("SELECT * FROM c WHERE a{} > $1", " + 1".repeat(depth));
    let stmt = parse(&sql).expect("plans").remove(0);
    let bound = query::bind(&stmt, &[query::Datum::Int8(0)]).expect("binds");
    let query::Statement::Select(select) = bound else { panic!("select") };
    let doc = serde_json::json!({"a": 1});
    let row = query::expr::Row { id: "x", doc: Some(&doc), excluded: None };
    let filter = select.filter.as_ref().expect("filter");
    assert!(query::expr::matches(filter, &row).expect("evaluates"));
    let too_deep = format!("SELECT * FROM c WHERE a{} > 0", " + 1".repeat(depth + 10));
    assert!(matches!(err(&too_deep), PlanError::TooDeep { .. }));
}

// Checks the operator limit counts chains, not statements: a 5,000-row INSERT whose rows
// each hold a negative number and a json cast plans, as does a long IN list.
#[test]
fn wide_statements_are_not_limited() {
    let rows: Vec<String> = (0..5_000).map(|i| format!("('r/{i}', -{i}, '{{}}'::json)")).collect();
    let sql = format!("INSERT INTO c (id, n, j) VALUES {}", rows.join(", "));
    parse(&sql).expect("wide INSERT plans");
    let list: Vec<String> = (0..5_000).map(|i| format!("-{i}")).collect();
    parse(&format!("SELECT * FROM c WHERE n IN ({})", list.join(", ")))
        .expect("long IN list plans");
}

// Checks a scalar function called with the wrong number of arguments is an invalid
// statement naming the count, and `lower(*)` is unsupported.
#[test]
fn scalar_function_arity() {
    for (sql, count) in [
        ("SELECT lower() FROM c", 0),
        ("SELECT upper(a, b) FROM c", 2),
        ("SELECT coalesce() FROM c", 0),
        ("SELECT length(a, b, c) FROM c", 3),
    ] {
        match err(sql) {
            PlanError::Invalid { what } => {
                assert!(what.contains(&format!("does not take {count} arguments")), "{sql}: {what}")
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    assert!(unsupported("SELECT lower(*) FROM c").contains("lower(*)"));
}

// Checks nested scalar functions and CASE as deep as the parser accepts evaluate on a test
// thread's stack (each level is an evaluation frame), and deeper nesting is an error.
#[test]
fn deepest_nested_functions_evaluate() {
    let mut depth = query::limits::EXPR_DEPTH_MAX;
    let nest = |n: usize| {
        let inner = (0..n).fold("a".to_owned(), |acc, i| match i % 3 {
            0 => format!("lower({acc})"),
            1 => format!("coalesce({acc}, 'x')"),
            _ => format!("CASE WHEN a IS NULL THEN 'x' ELSE {acc} END"),
        });
        format!("SELECT * FROM c WHERE {inner} = 'abc'")
    };
    let stmt = loop {
        match parse(&nest(depth)) {
            Ok(mut plan) => break plan.remove(0),
            // Past its recursion limit inside a CASE the parser backtracks and reports a
            // syntax error instead: an error either way, never a stack overflow.
            Err(PlanError::TooDeep { .. } | PlanError::Syntax { .. }) if depth > 8 => depth -= 1,
            Err(other) => panic!("depth {depth}: {other:?}"),
        }
    };
    // The parser's recursion limit comes first for calls (each takes a few levels).
    assert!(depth + 8 >= query::limits::SQL_RECURSION_MAX, "only {depth} levels plan");
    let query::Statement::Select(select) = stmt else { panic!("select") };
    let doc = serde_json::json!({"a": "ABC"});
    let row = query::expr::Row { id: "x", doc: Some(&doc), excluded: None };
    let filter = select.filter.as_ref().expect("filter");
    assert!(query::expr::matches(filter, &row).expect("evaluates"));
    assert!(matches!(err(&nest(depth + 10)), PlanError::TooDeep { .. } | PlanError::Syntax { .. }));
}

// Checks ORDER BY over SELECT DISTINCT must use the select list, as PostgreSQL requires,
// and that only that error is reported so.
#[test]
fn distinct_order_by_must_be_selected() {
    match err("SELECT DISTINCT x FROM c ORDER BY y") {
        PlanError::Invalid { what } => assert!(what.contains("must appear in the select list")),
        other => panic!("{other:?}"),
    }
    assert!(parse("SELECT DISTINCT x AS k FROM c ORDER BY k").is_ok());
    // Another error in the ORDER BY keeps its own name.
    assert!(unsupported("SELECT DISTINCT x FROM c ORDER BY x ~ 'a'").contains("operator"));
}
