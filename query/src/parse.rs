//! SQL text to sqlparser statements, with Tessera's limits and error positions.
//!
//! The text is tokenized once; before parsing, operator tokens are counted against
//! [`SQL_OPERATORS_MAX`] (sqlparser builds `1+1+1…` iteratively, so its recursion limit alone
//! does not bound tree depth), then the tokens are parsed with the recursion limit
//! [`SQL_RECURSION_MAX`], sqlparser's recursive functions keeping [`SQL_PARSER_STACK_MIN`] of
//! stack in reserve.

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::PlanError;
use crate::limits::{SQL_BYTES_MAX, SQL_OPERATORS_MAX, SQL_PARSER_STACK_MIN, SQL_RECURSION_MAX};

/// Parses SQL text into sqlparser statements (PostgreSQL dialect) within the crate's limits.
pub(crate) fn parse_ast(sql: &str) -> Result<Vec<sqlparser::ast::Statement>, PlanError> {
    if sql.len() > SQL_BYTES_MAX {
        return Err(PlanError::LimitExceeded { what: "SQL text bytes", limit: SQL_BYTES_MAX });
    }
    let dialect = PostgreSqlDialect {};
    let tokens =
        Tokenizer::new(&dialect, sql).tokenize_with_location().map_err(|e| PlanError::Syntax {
            message: e.message.clone(),
            position: position_of(sql, e.location.line, e.location.column),
        })?;
    if operator_depth(&tokens) > SQL_OPERATORS_MAX {
        return Err(PlanError::LimitExceeded {
            what: "chained operators in one expression",
            limit: SQL_OPERATORS_MAX,
        });
    }
    // A process-wide setting of the `recursive` crate, which only sqlparser uses here.
    static STACK: std::sync::Once = std::sync::Once::new();
    STACK.call_once(|| recursive::set_minimum_stack_size(SQL_PARSER_STACK_MIN));
    Parser::new(&dialect)
        .with_recursion_limit(SQL_RECURSION_MAX)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|e| match e {
            ParserError::RecursionLimitExceeded => PlanError::TooDeep { limit: SQL_RECURSION_MAX },
            ParserError::ParserError(message) | ParserError::TokenizerError(message) => {
                syntax_error(sql, message)
            }
        })
}

/// An upper bound on how deep infix chains can nest the tree sqlparser will build: operator
/// tokens counted per parenthesis level, a comma or semicolon starting a fresh sibling (so a
/// thousand-row VALUES list of `-1`s or `'{}'::json`s is not one chain), and a closed
/// group's count added to its enclosing level (an operand nested inside a chain deepens it).
fn operator_depth(tokens: &[sqlparser::tokenizer::TokenWithSpan]) -> usize {
    // `total` is the sum of `stack`, kept incrementally so deep parentheses stay linear.
    let mut stack: Vec<usize> = vec![0];
    let mut total: usize = 0;
    let mut deepest: usize = 0;
    for t in tokens {
        match &t.token {
            Token::LParen => stack.push(0),
            Token::RParen if stack.len() > 1 => {
                let inner = stack.pop().unwrap_or(0);
                if let Some(top) = stack.last_mut() {
                    *top += inner;
                }
            }
            Token::Comma => {
                if let Some(top) = stack.last_mut() {
                    total -= *top;
                    *top = 0;
                }
            }
            Token::SemiColon => {
                stack.clear();
                stack.push(0);
                total = 0;
            }
            token if is_operator(token) => {
                if let Some(top) = stack.last_mut() {
                    *top += 1;
                    total += 1;
                }
            }
            _ => {}
        }
        deepest = deepest.max(total);
    }
    deepest
}

/// Whether a token can join two expressions into a deeper one.
fn is_operator(token: &Token) -> bool {
    match token {
        Token::Word(w) => {
            use sqlparser::keywords::Keyword;
            matches!(
                w.keyword,
                Keyword::AND
                    | Keyword::OR
                    | Keyword::IS
                    | Keyword::IN
                    | Keyword::BETWEEN
                    | Keyword::LIKE
                    | Keyword::ILIKE
                    | Keyword::SIMILAR
                    | Keyword::COLLATE
                    | Keyword::AT
                    | Keyword::OVERLAPS
                    | Keyword::XOR
                    | Keyword::DIV
            )
        }
        Token::Comma
        | Token::LParen
        | Token::RParen
        | Token::SemiColon
        | Token::Period
        | Token::Whitespace(_)
        | Token::Number(..)
        | Token::Char(_)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::EscapedStringLiteral(_)
        | Token::NationalStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::Placeholder(_)
        | Token::EOF => false,
        _ => true,
    }
}

/// A syntax error with the position sqlparser reported (" at Line: L, Column: C" at the end
/// of its message) converted to a 1-based character offset; an error at the end of input
/// points one past the last character.
fn syntax_error(sql: &str, message: String) -> PlanError {
    if let Some((text, at)) = message.rsplit_once(" at Line: ")
        && let Some((line, column)) = at.split_once(", Column: ")
        && let (Ok(line), Ok(column)) = (line.trim().parse::<u64>(), column.trim().parse::<u64>())
    {
        return PlanError::Syntax {
            message: text.to_owned(),
            position: position_of(sql, line, column),
        };
    }
    PlanError::Syntax { message, position: sql.chars().count() + 1 }
}

/// The 1-based character offset of 1-based (`line`, `column`) in `sql`.
fn position_of(sql: &str, line: u64, column: u64) -> usize {
    if line == 0 {
        return sql.chars().count() + 1;
    }
    let mut offset = 0usize;
    let mut current = 1u64;
    for (i, c) in sql.chars().enumerate() {
        if current == line {
            return i + usize::try_from(column).unwrap_or(usize::MAX).max(1);
        }
        if c == '\n' {
            current += 1;
        }
        offset = i + 1;
    }
    offset + usize::try_from(column).unwrap_or(usize::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks positions are 1-based character offsets, across lines and multi-byte text.
    #[test]
    fn positions() {
        assert_eq!(position_of("SELECT x", 1, 8), 8);
        assert_eq!(position_of("SELECT\nx", 2, 1), 8);
        assert_eq!(position_of("é\nab", 2, 2), 4);
    }

    // Checks the chain-depth estimate: siblings separated by commas do not add up, nested
    // groups do.
    #[test]
    fn operator_depth_estimate() {
        let depth = |sql: &str| {
            let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
                .tokenize_with_location()
                .expect("tokenizes");
            operator_depth(&tokens)
        };
        assert_eq!(depth("SELECT 1+1+1"), 2);
        assert_eq!(depth("INSERT INTO c VALUES ('a', -1), ('b', -1), ('c', -1)"), 1);
        assert_eq!(depth("SELECT (1+1)+(1+1), 2"), 3);
        assert_eq!(depth("SELECT f(1+1, 1+1+1)"), 2);
        assert_eq!(depth("SELECT 1+1; SELECT 1"), 1);
    }

    // Checks a syntax error in the middle of the text reports where it is.
    #[test]
    fn syntax_error_position() {
        match parse_ast("SELECT * FROM c WHERE x = = 1") {
            Err(PlanError::Syntax { position, .. }) => assert_eq!(position, 27),
            other => panic!("expected a syntax error, got {other:?}"),
        }
    }
}
