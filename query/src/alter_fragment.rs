//! `ALTER FRAGMENT` and `ALTER CLUSTER`: sqlparser has no such statements, so their forms are
//! recognised by a small hand-written parser before sqlparser sees the text.
//!
//! ```text
//! ALTER FRAGMENT { $n | n } MOVE TO NODE { n | nN } [;]
//! ALTER FRAGMENT { $n | n } SPLIT [ AT shard ] [;]
//! ALTER FRAGMENT { $n | n } MERGE WITH { $m | m } [;]
//! ALTER CLUSTER REMOVE NODE { n | nN } [;]
//! ```
//!
//! Keywords are case-insensitive and separated by whitespace; a fragment is written as
//! `SHOW FRAGMENTS` shows it (`$3`) or as a bare number, the node as a number or as `n2`, the
//! split point as a shard number (the first shard of the upper part; default: the middle of
//! the fragment's range; whether it lies inside the range is the coordinator's check). Text
//! whose first two words are `ALTER FRAGMENT` is this statement or a syntax error (with its
//! 1-based character position), and so is text starting `ALTER CLUSTER`; anything else is
//! left to sqlparser. The statement must be sent alone (not in a multi-statement string).

use crate::error::PlanError;
use crate::plan::Statement;

/// One word of the statement and where it starts (1-based character offset).
struct Word<'a> {
    text: &'a str,
    position: usize,
}

/// Splits `sql` at whitespace, with each word's 1-based character position.
fn words(sql: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start: Option<(usize, usize)> = None;
    for (chars, (byte, c)) in sql.char_indices().enumerate() {
        match (c.is_whitespace(), start) {
            (true, Some((b, p))) => {
                out.push(Word { text: sql.get(b..byte).unwrap_or(""), position: p });
                start = None;
            }
            (false, None) => start = Some((byte, chars + 1)),
            _ => {}
        }
    }
    if let Some((b, p)) = start {
        out.push(Word { text: sql.get(b..).unwrap_or(""), position: p });
    }
    out
}

/// `Ok(None)` when `sql` is not an `ALTER FRAGMENT` or `ALTER CLUSTER` statement; the
/// statement, or a syntax error, when it is.
pub(crate) fn parse(sql: &str) -> Result<Option<Statement>, PlanError> {
    let mut words = words(sql);
    let second = match words.as_slice() {
        [a, second, ..] if a.text.eq_ignore_ascii_case("alter") => {
            second.text.trim_end_matches(';').to_ascii_lowercase()
        }
        _ => return Ok(None),
    };
    if second != "fragment" && second != "cluster" {
        return Ok(None);
    }
    let end = sql.chars().count() + 1;
    // A final `;`, alone or stuck to the last word.
    if let Some(last) = words.last_mut() {
        if last.text == ";" {
            words.pop();
        } else if let Some(stripped) = last.text.strip_suffix(';') {
            last.text = stripped;
        }
    }
    let error = |message: String, position: usize| PlanError::Syntax { message, position };
    if second == "cluster" {
        return parse_cluster(&words, end).map(Some);
    }
    let action = words.get(3).map(|w| w.text.to_ascii_lowercase());
    let (expected, last): (&[&str], &str) = match action.as_deref() {
        Some("split") if words.len() <= 4 => (&["alter", "fragment", "", "split"], ""),
        Some("split") => (&["alter", "fragment", "", "split", "at", ""], "a shard number"),
        Some("merge") => (&["alter", "fragment", "", "merge", "with", ""], "a fragment ($n)"),
        Some("move") => (&["alter", "fragment", "", "move", "to", "node", ""], "a node id"),
        Some(_) | None => (&["alter", "fragment", ""], ""),
    };
    let value = |i: usize| if i == 2 { "a fragment ($n)" } else { last };
    let values = keywords(&words, expected, "ALTER FRAGMENT", end, value)?;
    if action.is_none() {
        return Err(error("ALTER FRAGMENT: expected MOVE, SPLIT or MERGE at the end".into(), end));
    }
    if let Some(extra) = words.get(expected.len()) {
        let message = if expected.len() == 3 {
            format!("ALTER FRAGMENT: expected MOVE, SPLIT or MERGE at {:?}", extra.text)
        } else {
            format!("ALTER FRAGMENT: unexpected {:?} after the statement", extra.text)
        };
        return Err(error(message, extra.position));
    }
    let fragment_id = |word| number(word, &['$'], "a fragment ($n)", "ALTER FRAGMENT");
    let statement = match (action.as_deref(), values.as_slice()) {
        (Some("split"), [fragment]) => {
            Statement::SplitFragment { fragment: fragment_id(fragment)?, at: None }
        }
        (Some("split"), [fragment, at]) => Statement::SplitFragment {
            fragment: fragment_id(fragment)?,
            at: Some(number(at, &[], "a shard number", "ALTER FRAGMENT")?),
        },
        (Some("merge"), [left, right]) => {
            Statement::MergeFragments { left: fragment_id(left)?, right: fragment_id(right)? }
        }
        (Some("move"), [fragment, node]) => Statement::MoveFragment {
            fragment: fragment_id(fragment)?,
            node: node_id(node, "ALTER FRAGMENT")?,
        },
        // `keywords` checked the words `expected` names for each action.
        _ => return Err(error("ALTER FRAGMENT: incomplete".to_owned(), end)),
    };
    Ok(Some(statement))
}

/// Checks `words` start with `expected` (case-insensitive keywords; `""` a value, named by
/// `value(position)` when missing) for `statement`'s errors; `end`: the position after the
/// text. The values' words, in order.
fn keywords<'a, 'w>(
    words: &'a [Word<'a>],
    expected: &[&str],
    statement: &str,
    end: usize,
    value: impl Fn(usize) -> &'w str,
) -> Result<Vec<&'a Word<'a>>, PlanError> {
    let error = |message: String, position: usize| PlanError::Syntax { message, position };
    let mut values = Vec::new();
    for (i, keyword) in expected.iter().enumerate() {
        let Some(word) = words.get(i) else {
            let what =
                if keyword.is_empty() { value(i).to_owned() } else { keyword.to_uppercase() };
            return Err(error(format!("{statement}: expected {what} at the end"), end));
        };
        if keyword.is_empty() {
            values.push(word);
        } else if !word.text.eq_ignore_ascii_case(keyword) {
            return Err(error(
                format!("{statement}: expected {} at {:?}", keyword.to_uppercase(), word.text),
                word.position,
            ));
        }
    }
    Ok(values)
}

/// A number of at most 10 digits that fits a `u32`, after an optional prefix (`$3`, `n2`);
/// else a syntax error naming `what` it should be.
fn number(
    word: &Word<'_>,
    prefixes: &[char],
    what: &str,
    statement: &str,
) -> Result<u32, PlanError> {
    let digits = word.text.strip_prefix(prefixes).unwrap_or(word.text);
    let ok = !digits.is_empty() && digits.len() <= 10 && digits.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| digits.parse::<u32>().ok()).flatten().ok_or_else(|| PlanError::Syntax {
        message: format!("{statement}: {:?} is not {what}", word.text),
        position: word.position,
    })
}

/// A node id written `n` or `nN`.
fn node_id(word: &Word<'_>, statement: &str) -> Result<u32, PlanError> {
    number(word, &['n', 'N'], "a node id (n or nN)", statement)
}

/// `ALTER CLUSTER REMOVE NODE n` (the words after a final `;` was cut; `end`: the position
/// after the text).
fn parse_cluster(words: &[Word<'_>], end: usize) -> Result<Statement, PlanError> {
    let expected = ["alter", "cluster", "remove", "node", ""];
    let values = keywords(words, &expected, "ALTER CLUSTER", end, |_| "a node id")?;
    if let Some(extra) = words.get(expected.len()) {
        return Err(PlanError::Syntax {
            message: format!("ALTER CLUSTER: unexpected {:?} after the statement", extra.text),
            position: extra.position,
        });
    }
    match values.as_slice() {
        [node] => Ok(Statement::RemoveNode { node: node_id(node, "ALTER CLUSTER")? }),
        // `keywords` checked the node's word is there.
        _ => Err(PlanError::Syntax {
            message: "ALTER CLUSTER: incomplete".to_owned(),
            position: end,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(sql: &str) -> (u32, u32) {
        match parse(sql) {
            Ok(Some(Statement::MoveFragment { fragment, node })) => (fragment, node),
            other => panic!("{sql:?}: {other:?}"),
        }
    }

    fn syntax(sql: &str) -> (String, usize) {
        match parse(sql) {
            Err(PlanError::Syntax { message, position }) => (message, position),
            other => panic!("{sql:?}: expected a syntax error, got {other:?}"),
        }
    }

    // Checks every accepted spelling: `$n` or `n`, node `n` or `nN`, any case, any
    // whitespace, an optional final `;`.
    #[test]
    fn alter_fragment_accepted_forms() {
        assert_eq!(moved("ALTER FRAGMENT $3 MOVE TO NODE n2"), (3, 2));
        assert_eq!(moved("alter fragment 3 move to node 2"), (3, 2));
        assert_eq!(moved("  Alter\tFragment\n$0  MOVE TO NODE N17 ;"), (0, 17));
        assert_eq!(moved("ALTER FRAGMENT $4294967295 MOVE TO NODE 1;"), (u32::MAX, 1));
    }

    // Checks the SPLIT and MERGE forms: an optional split point, `$m` or `m`, any case, a
    // final `;`.
    #[test]
    fn alter_fragment_split_and_merge_forms() {
        let parsed = |sql: &str| parse(sql).unwrap_or_else(|e| panic!("{sql:?}: {e:?}"));
        assert_eq!(
            parsed("ALTER FRAGMENT $3 SPLIT"),
            Some(Statement::SplitFragment { fragment: 3, at: None })
        );
        assert_eq!(
            parsed("alter fragment 3 split at 1000;"),
            Some(Statement::SplitFragment { fragment: 3, at: Some(1000) })
        );
        assert_eq!(
            parsed(" Alter Fragment $1  MERGE\tWITH $2 ;"),
            Some(Statement::MergeFragments { left: 1, right: 2 })
        );
        assert_eq!(
            parsed("ALTER FRAGMENT 1 merge with 2"),
            Some(Statement::MergeFragments { left: 1, right: 2 })
        );
    }

    // Checks bad SPLIT and MERGE input points at the offending word or the end.
    #[test]
    fn alter_fragment_split_merge_bad_input() {
        assert_eq!(syntax("ALTER FRAGMENT $1").1, 18);
        assert!(syntax("ALTER FRAGMENT $1").0.contains("MOVE, SPLIT or MERGE"));
        assert_eq!(syntax("ALTER FRAGMENT $1 CUT").1, 19);
        assert_eq!(syntax("ALTER FRAGMENT $1 SPLIT AT").1, 27);
        assert_eq!(syntax("ALTER FRAGMENT $1 SPLIT IN 5").1, 25);
        assert_eq!(syntax("ALTER FRAGMENT $1 SPLIT AT $5").1, 28);
        assert_eq!(syntax("ALTER FRAGMENT $1 SPLIT AT 5 NOW").1, 30);
        assert_eq!(syntax("ALTER FRAGMENT $1 SPLIT AT 99999999999").1, 28);
        assert_eq!(syntax("ALTER FRAGMENT $1 MERGE $2").1, 25);
        assert_eq!(syntax("ALTER FRAGMENT $1 MERGE WITH").1, 29);
        assert_eq!(syntax("ALTER FRAGMENT $1 MERGE WITH n2").1, 30);
        assert_eq!(syntax("ALTER FRAGMENT $x SPLIT").1, 16);
    }

    // Checks ALTER CLUSTER REMOVE NODE: node `n` or `nN`, any case, a final `;`; and bad
    // input pointing at the offending word or the end.
    #[test]
    fn alter_cluster_remove_node() {
        let parsed = |sql: &str| parse(sql).unwrap_or_else(|e| panic!("{sql:?}: {e:?}"));
        assert_eq!(parsed("ALTER CLUSTER REMOVE NODE n3"), Some(Statement::RemoveNode { node: 3 }));
        assert_eq!(parsed("alter cluster remove node 3;"), Some(Statement::RemoveNode { node: 3 }));
        assert_eq!(
            parsed(" Alter\tCluster REMOVE  node N4294967295 ;"),
            Some(Statement::RemoveNode { node: u32::MAX })
        );
        assert_eq!(syntax("ALTER CLUSTER").1, 14);
        assert!(syntax("ALTER CLUSTER").0.contains("REMOVE"));
        assert_eq!(syntax("ALTER CLUSTER DROP NODE 3").1, 15);
        assert_eq!(syntax("ALTER CLUSTER REMOVE 3").1, 22);
        assert_eq!(syntax("ALTER CLUSTER REMOVE NODE").1, 26);
        assert_eq!(syntax("ALTER CLUSTER REMOVE NODE x3").1, 27);
        assert_eq!(syntax("ALTER CLUSTER REMOVE NODE 4294967296").1, 27);
        assert_eq!(syntax("ALTER CLUSTER REMOVE NODE 3 NOW").1, 29);
        assert_eq!(syntax("ALTER CLUSTER REMOVE NODE 3; SELECT 1").1, 30);
    }

    // Checks other text is left to sqlparser.
    #[test]
    fn alter_fragment_other_statements_pass_through() {
        for sql in ["ALTER TABLE c SET (sharding = '{}')", "SELECT 1", "", "alter", "fragment $1"] {
            assert!(matches!(parse(sql), Ok(None)), "{sql}");
        }
    }

    // Checks bad input: each error names what was expected and points at the offending word
    // (1-based characters) or at the end.
    #[test]
    fn alter_fragment_bad_input() {
        assert_eq!(syntax("ALTER FRAGMENT").1, 15);
        assert_eq!(syntax("ALTER FRAGMENT $1 MOVE TO").1, 26);
        assert_eq!(syntax("ALTER FRAGMENT $1 GO TO NODE 2").1, 19);
        assert_eq!(syntax("ALTER FRAGMENT $x MOVE TO NODE 2").1, 16);
        assert_eq!(syntax("ALTER FRAGMENT $-1 MOVE TO NODE 2").1, 16);
        assert_eq!(syntax("ALTER FRAGMENT $4294967296 MOVE TO NODE 2").1, 16);
        assert_eq!(syntax("ALTER FRAGMENT $1 MOVE TO NODE n").1, 32);
        assert_eq!(syntax("ALTER FRAGMENT $1 MOVE TO NODE 2 NOW").1, 34);
        assert_eq!(syntax("ALTER FRAGMENT $1 MOVE TO NODE 2; SELECT 1").1, 35);
        assert_eq!(syntax("ALTER FRAGMENT; $1").1, 7);
        let (message, position) = syntax("ALTER FRAGMENT $1 MOVE TO NODE é");
        assert_eq!(position, 32, "characters, not bytes");
        assert!(message.contains("node id"), "{message}");
    }
}
