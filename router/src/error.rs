//! Error enums, one per operation family. Every message says what was wrong with the input in
//! words a user understands; the variants carry typed context for callers that map them (the
//! node maps them to SQLSTATE in one place).

use thiserror::Error;

use crate::doc::ValueKind;
use crate::ids::{FragmentId, ShardId, ShardRange};

/// Why a document id has no shard ([`crate::shard_of`], SHARDING.md §2).
#[derive(Error, Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum IdError {
    /// The id is the empty string.
    #[error("document id is empty")]
    Empty,
    /// The id is longer than [`crate::limits::ID_BYTES_MAX`].
    #[error("document id is {bytes} bytes long; the limit is {max} bytes")]
    TooLong {
        /// Length of the id in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The id bytes are not UTF-8.
    #[error("document id is not valid UTF-8 (first bad byte at offset {valid_up_to})")]
    InvalidUtf8 {
        /// Length of the longest valid UTF-8 prefix.
        valid_up_to: usize,
    },
    /// The id ends with `$@`: a shard number must follow.
    #[error("`$@` must be followed by a shard number (decimal digits, below 1048576)")]
    ShardSuffixEmpty,
    /// The text after `$@` is not only ASCII decimal digits.
    #[error("`$@{suffix}` is not a shard number: only decimal digits 0-9 may follow `$@`")]
    ShardSuffixNotDecimal {
        /// The text after `$@`.
        suffix: String,
    },
    /// The number after `$@` is not below `SHARD_COUNT`.
    #[error("`$@{suffix}` is out of range: shard numbers are 0 to 1048575")]
    ShardSuffixTooLarge {
        /// The digits after `$@`.
        suffix: String,
    },
    /// The id ends with `$` where no content-based assignment applies.
    #[error(
        "document id ends with `$`: its shard comes from the document's content, which is only \
         valid when inserting a new document into a collection with content-based sharding"
    )]
    NeedsContent,
}

/// Why a sharding configuration was refused ([`crate::ShardingConfig::parse`]).
#[derive(Error, Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration text is larger than [`crate::limits::CONFIG_BYTES_MAX`].
    #[error("sharding configuration is {bytes} bytes; the limit is {max} bytes")]
    TooLarge {
        /// Size of the text in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The text is not JSON, or is not a single JSON object.
    #[error("sharding configuration is not valid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What the JSON parser expected.
        message: String,
    },
    /// The configuration is JSON but not an object.
    #[error(
        "sharding configuration must be a JSON object such as {{\"Fields\": [\"Customer\"], \"Range\": 1}}"
    )]
    NotAnObject,
    /// A key other than `Fields`, `Range` or `Mutable`.
    #[error(
        "unknown key `{key}` in sharding configuration: the keys are Fields, Range and Mutable"
    )]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// A key given twice.
    #[error("key `{key}` appears twice in sharding configuration")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// No `Fields` key.
    #[error("sharding configuration needs `Fields`: a list of field paths or one function")]
    MissingFields,
    /// A key holds the wrong JSON type.
    #[error("`{key}` must be {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// What it must hold, in words.
        expected: &'static str,
    },
    /// `Fields` is an empty list.
    #[error("`Fields` is empty: name at least one field path, or use id()")]
    EmptyFields,
    /// `Fields` lists more than [`crate::limits::CONFIG_FIELDS_MAX`] entries.
    #[error("`Fields` lists {count} entries; the limit is {max}")]
    TooManyFields {
        /// Number of entries.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A field path is malformed.
    #[error("field path `{path}` is not valid: {problem}")]
    BadPath {
        /// The path as written.
        path: String,
        /// What is wrong with it.
        problem: PathProblem,
    },
    /// `name(...)` with a name that is not `numeric`, `ticks` or `id`.
    #[error(
        "unknown function `{name}()` in `Fields`: the functions are numeric(path), ticks(path) and id()"
    )]
    UnknownFunction {
        /// The function name as written.
        name: String,
    },
    /// A function with the wrong argument (`id(x)`, `numeric()`).
    #[error("`{call}` is not valid: {function}() takes {takes}")]
    BadFunctionArgument {
        /// The entry as written.
        call: String,
        /// The function name.
        function: &'static str,
        /// What it takes, in words.
        takes: &'static str,
    },
    /// A function together with other entries in `Fields`.
    #[error(
        "a function in `Fields` must be the only entry; found `{function}` among {count} entries"
    )]
    FunctionMixed {
        /// The function entry as written.
        function: String,
        /// Number of entries in `Fields`.
        count: usize,
    },
    /// `Range` is not an integer from 1 to [`crate::limits::RANGE_MAX`].
    #[error("`Range` must be an integer from 1 to {max}, got {value}")]
    RangeOutOfBounds {
        /// The value as written.
        value: String,
        /// The largest accepted value.
        max: u32,
    },
}

/// What is wrong with a field path.
#[derive(Error, Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum PathProblem {
    /// The path is empty.
    #[error("it is empty")]
    Empty,
    /// `a..b`, `.a` or `a.`.
    #[error("it has an empty step (two dots in a row, or a leading or trailing dot)")]
    EmptyStep,
    /// More than [`crate::limits::FIELD_PATH_STEPS_MAX`] steps.
    #[error("it has more than {max} steps")]
    TooManySteps {
        /// The limit.
        max: usize,
    },
    /// Longer than [`crate::limits::FIELD_PATH_BYTES_MAX`].
    #[error("it is longer than {max} bytes")]
    TooLong {
        /// The limit.
        max: usize,
    },
}

/// Why a document has no content shard under its collection's configuration.
#[derive(Error, Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ContentError {
    /// A configured field is missing or null.
    #[error("sharding field `{field}` is missing or null")]
    MissingField {
        /// The field path.
        field: String,
    },
    /// A plain sharding field holds an object or an array.
    #[error("sharding field `{field}` holds {kind}; it must hold a string, a number or a boolean")]
    NotScalar {
        /// The field path.
        field: String,
        /// What it holds.
        kind: ValueKind,
    },
    /// A `numeric()` field does not hold an integer.
    #[error("sharding field `{field}` (numeric) holds {kind}; it must hold an integer")]
    NotInteger {
        /// The field path.
        field: String,
        /// What it holds.
        kind: ValueKind,
    },
    /// A `ticks()` field does not hold a string.
    #[error(
        "sharding field `{field}` (ticks) holds {kind}; it must hold an ISO-8601 date-time string"
    )]
    NotDateTimeString {
        /// The field path.
        field: String,
        /// What it holds.
        kind: ValueKind,
    },
    /// A `ticks()` field holds a string that is not an accepted date-time.
    #[error(
        "sharding field `{field}` (ticks) holds `{value}`, which is not a date-time: {problem}"
    )]
    BadDateTime {
        /// The field path.
        field: String,
        /// The string it holds.
        value: String,
        /// What is wrong.
        problem: DateTimeError,
    },
}

/// Why a string is not an accepted ISO-8601 date-time (see [`crate::content::parse_ticks`]).
#[derive(Error, Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum DateTimeError {
    /// A character at `offset` is not what the format requires there.
    #[error(
        "expected {expected} at offset {offset} (format YYYY-MM-DDTHH:MM:SS[.fffffff] then Z or ±HH:MM)"
    )]
    Syntax {
        /// Byte offset of the problem.
        offset: usize,
        /// What the format requires there.
        expected: &'static str,
    },
    /// A component is outside its range (month 13, 30 February, hour 24, …).
    #[error("{component} is out of range")]
    OutOfRange {
        /// Which component.
        component: &'static str,
    },
    /// The instant, after applying the offset, is before 0001-01-01T00:00:00Z or after 9999.
    #[error("the instant is outside 0001-01-01T00:00:00Z ..= 9999-12-31T23:59:59.9999999Z")]
    OutsideEra,
}

/// Why a trailing-`$` id could not be assigned a shard ([`crate::assign`]).
#[derive(Error, Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum AssignError {
    /// The id itself is invalid.
    #[error(transparent)]
    Id(#[from] IdError),
    /// The id does not end with `$`, so there is nothing to assign.
    #[error("document id `{id}` does not end with `$`; only such ids get a shard from content")]
    NotTrailingDollar {
        /// The id.
        id: String,
    },
    /// The collection's configuration is `id()`: content does not place documents.
    #[error(
        "document id ends with `$` but the collection is sharded by id(), not by content; \
         remove the trailing `$`"
    )]
    NoContentSharding,
    /// The document lacks a usable sharding value.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// The rewritten id (`<id>$@<shard>`) would exceed the id length limit.
    #[error("the assigned id would be {bytes} bytes long; the limit is {max} bytes")]
    AssignedIdTooLong {
        /// Length of the rewritten id.
        bytes: usize,
        /// The limit.
        max: usize,
    },
}

/// Why a write breaks its collection's content-based sharding ([`crate::validate`]).
#[derive(Error, Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ValidationError {
    /// The id is invalid.
    #[error(transparent)]
    Id(IdError),
    /// The id still ends with `$`: it must be assigned before it is stored.
    #[error(
        "document id ends with `$`; it must be assigned a shard (rewritten to `…$@<shard>`) before it is stored"
    )]
    Unassigned,
    /// The document lacks a usable sharding value.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// The id's shard lies outside the block of the document's content.
    #[error(
        "document breaks content-based sharding: `{field}` puts it in content shard {content_shard} \
         (block {block}) but its id places it on shard {id_shard}"
    )]
    OutsideBlock {
        /// The configured field(s), as written in the configuration.
        field: String,
        /// The content shard of the document.
        content_shard: ShardId,
        /// The block of shards the content allows.
        block: ShardRange,
        /// The shard the id places the document on.
        id_shard: ShardId,
    },
}

/// Why an online configuration change was refused ([`crate::check_change`]).
#[derive(Error, Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ChangeError {
    /// `Fields` changed while both configurations have `Mutable = false`.
    #[error(
        "changing Fields from {old} to {new} would move documents to other shards; set \
         Mutable = true first (or in the same change)"
    )]
    FieldsNeedMutable {
        /// The old `Fields`, as JSON.
        old: String,
        /// The new `Fields`, as JSON.
        new: String,
    },
    /// `Range` shrank while both configurations have `Mutable = false`.
    #[error(
        "Range may only grow while Mutable = false: shrinking it from {old} to {new} would leave \
         documents outside their new, smaller blocks; set Mutable = true first"
    )]
    RangeShrinkNeedsMutable {
        /// The old `Range`.
        old: u32,
        /// The new `Range`.
        new: u32,
    },
    /// `Range` grew by something other than a whole multiple while `Mutable = false`.
    #[error(
        "Range may only grow by a whole multiple while Mutable = false: {new} is not a multiple \
         of {old}, so block edges would move and documents near them would break; set \
         Mutable = true first"
    )]
    RangeNotMultiple {
        /// The old `Range`.
        old: u32,
        /// The new `Range`.
        new: u32,
    },
}

/// Why a shard map was refused or could not be changed.
#[derive(Error, Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum MapError {
    /// No fragments at all.
    #[error("a shard map needs at least one fragment")]
    Empty,
    /// More fragments than [`crate::limits::FRAGMENTS_MAX`].
    #[error("{count} fragments requested; the limit is {max}")]
    TooManyFragments {
        /// Requested number.
        count: usize,
        /// The limit.
        max: u32,
    },
    /// No owners given to place fragments on.
    #[error("at least one owner is needed to place fragments on")]
    NoOwners,
    /// The first fragment does not start at shard 0.
    #[error("shards [0, {first_start}) belong to no fragment")]
    GapAtStart {
        /// Start of the lowest fragment.
        first_start: u32,
    },
    /// Shards between two fragments belong to neither.
    #[error("shards [{end}, {next_start}) between {before} and {after} belong to no fragment")]
    Gap {
        /// The fragment before the gap.
        before: FragmentId,
        /// Its end.
        end: u32,
        /// The fragment after the gap.
        after: FragmentId,
        /// Its start.
        next_start: u32,
    },
    /// Two fragments share shards.
    #[error("fragments {first} {first_range} and {second} {second_range} overlap")]
    Overlap {
        /// One fragment.
        first: FragmentId,
        /// Its range.
        first_range: ShardRange,
        /// The other.
        second: FragmentId,
        /// Its range.
        second_range: ShardRange,
    },
    /// The last fragment does not end at `SHARD_COUNT`.
    #[error("shards [{last_end}, 1048576) belong to no fragment")]
    GapAtEnd {
        /// End of the highest fragment.
        last_end: u32,
    },
    /// The same fragment id twice.
    #[error("fragment {fragment} appears twice")]
    DuplicateFragment {
        /// The repeated id.
        fragment: FragmentId,
    },
    /// A fragment id not in the map.
    #[error("fragment {fragment} is not in the shard map")]
    UnknownFragment {
        /// The id.
        fragment: FragmentId,
    },
    /// A split point not strictly inside the fragment's range.
    #[error(
        "cannot split {fragment} {range} at shard {at}: the split point must lie strictly inside"
    )]
    SplitOutside {
        /// The fragment.
        fragment: FragmentId,
        /// Its range.
        range: ShardRange,
        /// The requested split point.
        at: ShardId,
    },
    /// Merging fragments whose ranges do not touch.
    #[error(
        "cannot merge {left} {left_range} with {right} {right_range}: the ranges are not adjacent"
    )]
    NotAdjacent {
        /// Left fragment.
        left: FragmentId,
        /// Its range.
        left_range: ShardRange,
        /// Right fragment.
        right: FragmentId,
        /// Its range.
        right_range: ShardRange,
    },
    /// Merging fragments owned by different executors.
    #[error("cannot merge {left} with {right}: they have different owners; move one first")]
    OwnersDiffer {
        /// Left fragment.
        left: FragmentId,
        /// Right fragment.
        right: FragmentId,
    },
    /// Fragment ids ran out (more than `u32::MAX` splits over the map's life).
    #[error("no fragment id left to name a new fragment")]
    FragmentIdsExhausted,
    /// The epoch counter would overflow.
    #[error("shard map epoch is exhausted")]
    EpochExhausted,
}
