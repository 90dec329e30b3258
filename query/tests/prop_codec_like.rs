//! Property tests of two hand-written algorithms: the float text form (must read back to the
//! same value, as PostgreSQL's shortest-exact output does) with the other datum encodings, and
//! `LIKE` against a naive recursive reference matcher.

use proptest::prelude::*;
use query::expr::like;
use query::{Datum, Format, SqlType};

/// Reference LIKE: recursive over chars; `%` any run, `_` one char, `\` escapes.
fn like_reference(t: &[char], p: &[char]) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some(('%', rest)) => (0..=t.len()).any(|i| like_reference(&t[i..], rest)),
        Some(('_', rest)) => !t.is_empty() && like_reference(&t[1..], rest),
        Some(('\\', rest)) if !rest.is_empty() => {
            !t.is_empty() && t[0] == rest[0] && like_reference(&t[1..], &rest[1..])
        }
        Some((c, rest)) => !t.is_empty() && t[0] == *c && like_reference(&t[1..], rest),
    }
}

fn arb_datum() -> impl Strategy<Value = (SqlType, Datum)> {
    prop_oneof![
        any::<bool>().prop_map(|b| (SqlType::Bool, Datum::Bool(b))),
        any::<i64>().prop_map(|i| (SqlType::Int8, Datum::Int8(i))),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| (SqlType::Float8, Datum::Float8(f))),
        ".{0,20}".prop_map(|s| (SqlType::Text, Datum::Text(s))),
        (any::<i32>(), ".{0,8}").prop_map(|(i, s)| (
            SqlType::Json,
            Datum::Json(serde_json::json!({"i": i, "s": s, "a": [true, null]}))
        )),
    ]
}

proptest! {
    // Checks text and binary encodings read back to the same datum for every type.
    #[test]
    fn prop_datum_round_trip((ty, d) in arb_datum()) {
        let text = d.encode_text().expect("not null");
        let back = Datum::decode_param(1, ty, Format::Text, Some(text.as_bytes())).expect("text decodes");
        prop_assert_eq!(&back, &d, "text {}", text);
        let bytes = d.encode_binary().expect("not null");
        let back = Datum::decode_param(1, ty, Format::Binary, Some(&bytes)).expect("binary decodes");
        prop_assert_eq!(&back, &d);
    }

    // Checks the iterative LIKE agrees with the reference on a small alphabet with wildcards
    // and escapes, including multi-byte characters.
    #[test]
    fn prop_like_matches_reference(t in "[ab\u{e5}%_]{0,8}", p in "[ab\u{e5}%_\\\\]{0,6}") {
        let tc: Vec<char> = t.chars().collect();
        let pc: Vec<char> = p.chars().collect();
        prop_assert_eq!(like(&t, &p), like_reference(&tc, &pc), "{:?} LIKE {:?}", t, p);
    }
}
