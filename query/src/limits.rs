//! Every bound the query crate enforces, with its unit and the reason for its value.
//!
//! Hitting one of these is a [`crate::PlanError::LimitExceeded`] or
//! [`crate::ExecError::LimitExceeded`], never unbounded growth and never a panic.

/// Longest SQL text accepted, in bytes. A statement longer than this is refused before it is
/// tokenized: a megabyte already holds a thousand-row multi-row INSERT of small documents.
pub const SQL_BYTES_MAX: usize = 1 << 20;

/// Texts one executor's parse cache keeps ([`crate::ParseCache`]): a client mix's distinct
/// statement texts (its `BEGIN`, `COMMIT` and each prepared text) fit many times over; texts
/// with literals in them come and go.
pub const PARSE_CACHE_ENTRIES: usize = 256;

/// Longest SQL text the parse cache keeps, in bytes: OLTP statements are shorter; a long
/// multi-row INSERT is parsed each time rather than held (256 entries of at most 4 KiB keep
/// an executor's cache within a few megabytes with their plans).
pub const PARSE_CACHE_TEXT_BYTES_MAX: usize = 4096;

/// Recursion budget handed to sqlparser (`Parser::with_recursion_limit`). Each nested
/// parenthesis, `NOT` or unary minus spends one unit. 48 keeps the parser's own stack well
/// inside a 2 MiB test thread stack in debug builds.
pub const SQL_RECURSION_MAX: usize = 48;

/// Stack that sqlparser's recursive functions (`parse_subexpr`, `parse_query`,
/// `parse_table_factor`, …, marked with the `recursive` crate) require to be left before they
/// go on; with less they continue on a freshly allocated stack segment. The crate's default,
/// 128 KiB, is less than one level of parenthesised FROM items takes in a debug build, so a
/// fuzzed `FROM (((SELECT FROM ((((…` of about twenty levels overflowed a 2 MiB thread stack
/// inside the recursion budget above.
pub const SQL_PARSER_STACK_MIN: usize = 512 * 1024;

/// Deepest chain of operator tokens (`+`, `=`, `AND`, `::`, …) in one expression, estimated
/// per parenthesis level with commas starting fresh siblings. sqlparser builds chains of
/// infix operators (`1+1+1+…`) in a loop, not by recursion, so its recursion limit does not
/// bound their depth; counting operator tokens before parsing does, and keeps both the parser's
/// tree and our recursive planner and evaluator shallow.
pub const SQL_OPERATORS_MAX: usize = 1_000;

/// Deepest expression tree the planner accepts (counted in our own `Expr` nodes). The
/// evaluator recurses once per level, so this bounds its stack.
pub const EXPR_DEPTH_MAX: usize = 128;

/// Most `$n` parameters in one statement: the PostgreSQL wire protocol counts them in an `i16`.
pub const PARAMS_MAX: usize = i16::MAX as usize;

/// Most rows in one `INSERT … VALUES`: each becomes an owned document and a write intent.
pub const INSERT_ROWS_MAX: usize = 10_000;

/// Most documents one INSERT, UPDATE or DELETE changes on one fragment (its share's write
/// intents): as many as one transaction may write (the node's `TXN_WRITES_MAX`), so an UPDATE
/// or DELETE matching more stops its scan there (`ExecError::WriteTooLarge`) instead of
/// holding every match.
pub const WRITE_DOCS_MAX: usize = 65_536;

/// Bytes of the new documents one write statement holds for one fragment, in memory
/// ([`crate::json_bytes`]): what one transaction may buffer (the node's
/// `TXN_WRITE_BYTES_MAX`).
pub const WRITE_BYTES_MAX: usize = 256 << 20;

/// Most elements in one `IN (…)` list.
pub const IN_LIST_MAX: usize = 10_000;

/// Most rows one fragment returns for one statement, and most rows a merged result holds.
/// Partial results cross executors as messages and are held in memory while merged.
pub const RESULT_ROWS_MAX: usize = 1_000_000;

/// Most bytes of rows one gathered result holds (a fragment's share of a SELECT with ORDER
/// BY, LIMIT or OFFSET, or inside a block, and the merged result), in memory
/// ([`crate::memory::row_bytes`]): such a result is held whole before its first row is sent.
/// A plain SELECT outside a block streams instead (pages, below) and has no such bound.
pub const RESULT_BYTES_MAX: usize = 512 << 20;

/// Most rows one page of a streamed SELECT holds ([`crate::exec::execute_select_page`]): a
/// plain SELECT outside a block reads a fragment in pages, each sent before the next is
/// read, so memory and the time one read holds its executor stay bounded whatever the
/// fragment holds.
pub const STREAM_PAGE_ROWS: usize = 1_024;

/// Most bytes of rows one page holds, in memory ([`crate::memory::row_bytes`]; a page ends
/// with the row that reaches it): about what fits one cluster frame.
pub const STREAM_PAGE_BYTES: usize = 4 << 20;

/// Most documents one page (or one slice of a gathered SELECT's scan, `exec::SelectScan`)
/// reads, matching or not: a filter that matches little still hands its executor back
/// between pages. With the page's rows (1,024 of them encoded take about 5 ms here), what
/// another statement of the executor waits for at most: a scan of 200,000 documents held
/// the executor for its whole 0.2-1 s before slices (`scripts/bench-scan-stall.sh`).
pub const STREAM_PAGE_SCANNED: usize = 16_384;

/// Most distinct values the `count(DISTINCT e)` calls of one query hold over all groups
/// (per fragment and merged): fragments send their sets whole, so the merge can count each
/// value once, and this bounds that memory however many groups there are.
pub const DISTINCT_VALUES_MAX: usize = 100_000;

/// Most bytes (texts and JSON values, in memory: [`crate::memory`]) the `jsonb_agg`,
/// `jsonb_object_agg` and `string_agg` calls of one query hold over all groups (per
/// fragment and merged): each keeps every value until the merge orders and joins them.
pub const AGGREGATED_BYTES_MAX: usize = 64 << 20;

/// Most distinct groups one `GROUP BY` may produce (per fragment and merged).
pub const GROUPS_MAX: usize = 100_000;

/// Largest text or JSON value one expression builds, in bytes (a JSON value in memory,
/// [`crate::json_bytes`]): `||`, `concat`, `replace`, `upper`, `lower`,
/// `jsonb_set` and `jsonb_build_array` / `jsonb_build_object` refuse to build a larger one.
/// A document holds at most 1 MiB, but a chain of these over its fields (or `replace`, which
/// multiplies) could otherwise ask for gigabytes to evaluate one row.
pub const VALUE_BYTES_MAX: usize = 64 << 20;

/// Deepest JSON value the evaluator copies out of a document (documents deeper than this are
/// refused by storage long before; this keeps our own recursive copy bounded regardless).
pub const JSON_DEPTH_MAX: usize = 128;

/// Longest dotted path (`a.b.c…`) in a field reference.
pub const PATH_STEPS_MAX: usize = 32;

/// Longest row of COPY input, in bytes: a document (at most 1 MiB archived) written as JSON
/// text with its id, escapes included, fits with room to spare. The decoder refuses a longer
/// row before buffering more of it.
pub const COPY_ROW_BYTES_MAX: usize = 4 << 20;

/// Collection names starting with this are Tessera's own (the one-round commit's markers):
/// every statement naming one is refused.
pub const RESERVED_COLLECTION_PREFIX: &str = "__tessera";
