//! SQL text to plan (sqlparser, PostgreSQL dialect), expression evaluation over documents seen
//! through `router::doc::DocValue`, per-fragment execution, the merge of partial results, EXPLAIN.
//!
//! Opens no files or sockets and knows no executors.
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)
)]
