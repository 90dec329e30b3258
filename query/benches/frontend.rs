//! Micro-benchmarks of the SQL front end and the evaluator: parse+plan, bind of a prepared
//! point query, filter evaluation over serde_json documents, and a scatter SELECT with
//! ORDER BY + LIMIT over 4 fragments with merge. Prints the median of 7 batches per case.
//!
//! Run: `cargo bench -p query --bench frontend`

use std::hint::black_box;
use std::ops::ControlFlow;
use std::time::Instant;

use query::expr::{Row, matches};
use query::{
    CollectionName, Datum, DocVersion, FragmentSource, SourceDoc, Statement, bind, execute_select,
    merge, parse,
};
use router::{ShardId, ShardRange};

fn median_ns(iterations: u64, mut f: impl FnMut()) -> f64 {
    let mut samples = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        for _ in 0..iterations {
            f();
        }
        samples.push(start.elapsed().as_nanos() as f64 / iterations as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[3]
}

struct Docs(Vec<(String, ShardId, serde_json::Value)>);

impl FragmentSource for Docs {
    type Doc<'a> = &'a serde_json::Value;

    fn get<'a>(&'a self, _: &CollectionName, id: &str) -> Option<SourceDoc<'a, Self::Doc<'a>>> {
        self.0.iter().find(|(i, _, _)| i == id).map(|(i, s, d)| SourceDoc {
            id: i,
            shard: *s,
            version: DocVersion::new(1),
            doc: d,
        })
    }

    fn scan<'a>(
        &'a self,
        _: &CollectionName,
        _: &[ShardRange],
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        for (i, s, d) in &self.0 {
            if visit(SourceDoc { id: i, shard: *s, version: DocVersion::new(1), doc: d }).is_break()
            {
                return;
            }
        }
    }
}

fn doc(i: u64) -> serde_json::Value {
    serde_json::json!({
        "age": i % 90, "name": format!("user {i}"), "address": {"city": if i.is_multiple_of(2) { "Oslo" } else { "Rome" }},
        "tags": ["a", "b"], "score": (i % 1000) as f64 / 7.0,
    })
}

fn main() {
    let point = "SELECT * FROM users WHERE id() = $1";
    let ns = median_ns(20_000, || {
        black_box(parse(black_box(point)).expect("plans"));
    });
    println!("parse+plan point query              {ns:>10.0} ns/op");

    let complex = "SELECT address.city, count(*), avg(score) FROM users WHERE age >= 18 AND (name LIKE 'user 1%' OR score BETWEEN 1 AND 50) GROUP BY address.city ORDER BY 2 DESC LIMIT 10";
    let ns = median_ns(5_000, || {
        black_box(parse(black_box(complex)).expect("plans"));
    });
    println!("parse+plan aggregate query          {ns:>10.0} ns/op");

    let prepared = parse(point).expect("plans").remove(0);
    let params = [Datum::Text("users/42".to_owned())];
    let ns = median_ns(200_000, || {
        black_box(bind(black_box(&prepared), black_box(&params)).expect("binds"));
    });
    println!("bind prepared point query           {ns:>10.0} ns/op");

    let docs: Vec<serde_json::Value> = (0..10_000).map(doc).collect();
    let ids: Vec<String> = (0..10_000).map(|i| format!("users/{i}")).collect();
    let Statement::Select(s) =
        parse("SELECT * FROM users WHERE age >= 18 AND address.city = 'Oslo' AND score < 100")
            .expect("plans")
            .remove(0)
    else {
        unreachable!()
    };
    let filter = s.filter.clone().expect("filter");
    let ns = median_ns(20, || {
        let mut n = 0u32;
        for (d, id) in docs.iter().zip(&ids) {
            if matches(&filter, &Row { id, doc: Some(d), excluded: None }).expect("evaluates") {
                n += 1;
            }
        }
        black_box(n);
    });
    println!("filter (3 comparisons) per document {:>10.1} ns/doc", ns / 10_000.0);
    // Baseline on the same documents: the same three tests written directly against
    // serde_json, to read the evaluator's cost as a ratio on a noisy machine.
    let ns = median_ns(20, || {
        let mut n = 0u32;
        for d in &docs {
            let age = d.get("age").and_then(serde_json::Value::as_i64).is_some_and(|a| a >= 18);
            let city =
                d.get("address").and_then(|a| a.get("city")).and_then(serde_json::Value::as_str)
                    == Some("Oslo");
            let score =
                d.get("score").and_then(serde_json::Value::as_f64).is_some_and(|s| s < 100.0);
            if age && city && score {
                n += 1;
            }
        }
        black_box(n);
    });
    println!("  baseline: same tests hand-written   {:>10.1} ns/doc", ns / 10_000.0);

    let fragments: Vec<Docs> = (0..4)
        .map(|f| {
            Docs(
                (0..10_000u64)
                    .filter(|i| i % 4 == f)
                    .map(|i| (format!("users/{i}"), ShardId::MIN, doc(i)))
                    .collect(),
            )
        })
        .collect();
    let Statement::Select(top) =
        parse("SELECT id(), name, score FROM users WHERE age >= 18 ORDER BY score DESC LIMIT 10")
            .expect("plans")
            .remove(0)
    else {
        unreachable!()
    };
    let all = [ShardRange::ALL];
    let ns = median_ns(10, || {
        let partials =
            fragments.iter().map(|f| execute_select(&top, f, &all).expect("executes")).collect();
        black_box(merge(&top, partials).expect("merges"));
    });
    println!(
        "top-10 over 4 x 2,500 docs + merge  {:>10.1} ns/doc ({:.2} ms/query)",
        ns / 10_000.0,
        ns / 1e6
    );
}
