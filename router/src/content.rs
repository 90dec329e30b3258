//! Content-based sharding per collection (SHARDING.md §3): the configuration, the content
//! shard of a document, assignment of trailing-`$` ids, validation of writes and the rules
//! for changing a configuration while the node serves traffic.
//!
//! The configuration has the shape users know from RavenDB:
//! `{"Fields": ["Customer"], "Range": 1, "Mutable": false}`. Parsing is strict: unknown or
//! repeated keys, wrong types, an empty `Fields`, a `Range` outside `1 ..= 2^20`, or a
//! function mixed with other entries are errors with a reason. Field paths are JSON paths,
//! case-sensitive and never folded.
//!
//! Document fields are read through [`DocValue`], so the same code serves `serde_json`
//! values here and archived documents in `storage`.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use crate::doc::{DocValue, ValueKind};
use crate::error::{
    AssignError, ChangeError, ConfigError, ContentError, DateTimeError, PathProblem,
    ValidationError,
};
use crate::id::{Placement, hash, shard_of};
use crate::ids::{SHARD_COUNT, ShardId, ShardRange};
use crate::limits::{
    CONFIG_BYTES_MAX, CONFIG_FIELDS_MAX, FIELD_PATH_BYTES_MAX, FIELD_PATH_STEPS_MAX, ID_BYTES_MAX,
    RANGE_MAX,
};

/// What joins several plain field values before hashing (U+001F, the unit separator).
pub const FIELD_SEPARATOR: char = '\u{1f}';

/// A dotted path into a document (`Address.City`): non-empty steps, case-sensitive.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct FieldPath {
    text: String,
    steps: Vec<String>,
}

impl FieldPath {
    /// Parses `Address.City`.
    pub fn parse(text: &str) -> Result<FieldPath, ConfigError> {
        let bad = |problem| ConfigError::BadPath { path: text.to_owned(), problem };
        if text.is_empty() {
            return Err(bad(PathProblem::Empty));
        }
        if text.len() > FIELD_PATH_BYTES_MAX {
            return Err(bad(PathProblem::TooLong { max: FIELD_PATH_BYTES_MAX }));
        }
        let mut steps = Vec::new();
        for step in text.split('.') {
            if step.is_empty() {
                return Err(bad(PathProblem::EmptyStep));
            }
            if steps.len() == FIELD_PATH_STEPS_MAX {
                return Err(bad(PathProblem::TooManySteps { max: FIELD_PATH_STEPS_MAX }));
            }
            steps.push(step.to_owned());
        }
        Ok(FieldPath { text: text.to_owned(), steps })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The steps (`["Address", "City"]`).
    pub fn steps(&self) -> &[String] {
        &self.steps
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a collection's documents are placed by.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum ContentKey {
    /// One or more plain fields; their values' text, joined with [`FIELD_SEPARATOR`], hashed.
    Fields(Vec<FieldPath>),
    /// `numeric(path)`: an integer field, `rem_euclid 2^20`.
    Numeric(FieldPath),
    /// `ticks(path)`: an ISO-8601 date-time field, .NET ticks `% 2^20`.
    Ticks(FieldPath),
    /// `id()`: no content placement (as if unconfigured).
    Id,
}

impl ContentKey {
    /// The `Fields` entries as written in a configuration.
    pub fn entries(&self) -> Vec<String> {
        match self {
            ContentKey::Fields(paths) => paths.iter().map(|p| p.text.clone()).collect(),
            ContentKey::Numeric(path) => vec![format!("numeric({path})")],
            ContentKey::Ticks(path) => vec![format!("ticks({path})")],
            ContentKey::Id => vec!["id()".to_owned()],
        }
    }
}

impl fmt::Display for ContentKey {
    /// The entries joined with `, ` (`Customer`, `A, B.C`, `numeric(Age)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.entries().join(", "))
    }
}

/// One collection's content-based sharding configuration. Valid by construction: build it
/// with [`ShardingConfig::parse`] or [`ShardingConfig::new`].
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ShardingConfig {
    key: ContentKey,
    range: u32,
    mutable: bool,
}

impl ShardingConfig {
    /// A configuration from its parts, checked like [`ShardingConfig::parse`] checks text.
    pub fn new(key: ContentKey, range: u32, mutable: bool) -> Result<ShardingConfig, ConfigError> {
        if range == 0 || range > RANGE_MAX {
            return Err(ConfigError::RangeOutOfBounds { value: range.to_string(), max: RANGE_MAX });
        }
        if let ContentKey::Fields(paths) = &key {
            if paths.is_empty() {
                return Err(ConfigError::EmptyFields);
            }
            if paths.len() > CONFIG_FIELDS_MAX {
                return Err(ConfigError::TooManyFields {
                    count: paths.len(),
                    max: CONFIG_FIELDS_MAX,
                });
            }
        }
        Ok(ShardingConfig { key, range, mutable })
    }

    /// Parses the JSON configuration (see the module docs for what is accepted).
    pub fn parse(json: &str) -> Result<ShardingConfig, ConfigError> {
        if json.len() > CONFIG_BYTES_MAX {
            return Err(ConfigError::TooLarge { bytes: json.len(), max: CONFIG_BYTES_MAX });
        }
        let value: serde_json::Value = serde_json::from_str(json).map_err(json_error)?;
        if !value.is_object() {
            return Err(ConfigError::NotAnObject);
        }
        // `Value` keeps only the last of repeated keys; read the members again in order so a
        // repeated key is refused rather than silently resolved.
        let Members(members) = serde_json::from_str(json).map_err(json_error)?;
        let mut fields = None;
        let mut range = None;
        let mut mutable = None;
        for (key, value) in members {
            let slot_taken = match key.as_str() {
                "Fields" => fields.replace(value).is_some(),
                "Range" => range.replace(value).is_some(),
                "Mutable" => mutable.replace(value).is_some(),
                _ => return Err(ConfigError::UnknownKey { key }),
            };
            if slot_taken {
                cov_mark::hit!(config_repeated_key);
                return Err(ConfigError::DuplicateKey { key });
            }
        }
        let key = parse_fields(fields.ok_or(ConfigError::MissingFields)?)?;
        let range = match range {
            None => 1,
            Some(value) => parse_range(&value)?,
        };
        let mutable = match mutable {
            None => false,
            Some(serde_json::Value::Bool(b)) => b,
            Some(_) => {
                return Err(ConfigError::WrongType { key: "Mutable", expected: "true or false" });
            }
        };
        ShardingConfig::new(key, range, mutable)
    }

    /// What documents are placed by.
    pub fn key(&self) -> &ContentKey {
        &self.key
    }

    /// The block size, `1 ..= 2^20`.
    pub fn range(&self) -> u32 {
        self.range
    }

    /// Whether writes are left unvalidated (and content is never used for pruning).
    pub fn mutable(&self) -> bool {
        self.mutable
    }

    /// Whether content places documents at all (false for `id()`).
    pub fn is_content_based(&self) -> bool {
        self.key != ContentKey::Id
    }

    /// The canonical JSON text; [`ShardingConfig::parse`] of it gives `self` back.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "Fields": self.key.entries(),
            "Range": self.range,
            "Mutable": self.mutable,
        })
        .to_string()
    }

    /// The block of shards that content shard `content` allows (SHARDING.md §3).
    pub fn block_of(&self, content: ShardId) -> ShardRange {
        block(content, self.range)
    }

    /// The content shard of `doc`, or `None` for `id()`.
    pub fn content_shard<'a, D: DocValue<'a>>(
        &self,
        doc: D,
    ) -> Result<Option<ShardId>, ContentError> {
        match &self.key {
            ContentKey::Id => Ok(None),
            ContentKey::Numeric(path) => {
                let value = read_field(doc, path)?;
                match value.as_i64() {
                    Some(n) => Ok(Some(numeric_shard(n))),
                    None => Err(ContentError::NotInteger {
                        field: path.text.clone(),
                        kind: value.kind(),
                    }),
                }
            }
            ContentKey::Ticks(path) => {
                let value = read_field(doc, path)?;
                let Some(text) = value.as_str() else {
                    return Err(ContentError::NotDateTimeString {
                        field: path.text.clone(),
                        kind: value.kind(),
                    });
                };
                match parse_ticks(text) {
                    Ok(ticks) => Ok(Some(ShardId::from_u64_mod(ticks))),
                    Err(problem) => Err(ContentError::BadDateTime {
                        field: path.text.clone(),
                        value: text.to_owned(),
                        problem,
                    }),
                }
            }
            ContentKey::Fields(paths) => {
                if let [path] = paths.as_slice() {
                    let value = read_field(doc, path)?;
                    if let Some(text) = value.as_str() {
                        return Ok(Some(hash(text)));
                    }
                    return Ok(Some(hash(&scalar_text(value, path)?)));
                }
                let mut joined = String::new();
                for (i, path) in paths.iter().enumerate() {
                    if i > 0 {
                        joined.push(FIELD_SEPARATOR);
                    }
                    let value = read_field(doc, path)?;
                    match value.as_str() {
                        Some(text) => joined.push_str(text),
                        None => joined.push_str(&scalar_text(value, path)?),
                    }
                }
                Ok(Some(hash(&joined)))
            }
        }
    }
}

impl fmt::Display for ShardingConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

/// The block of content shard `content` under `range`:
/// `[c - c % range, min(c - c % range + range, SHARD_COUNT))`. `range == 0` is treated as 1.
pub fn block(content: ShardId, range: u32) -> ShardRange {
    let c = content.get();
    let range = range.max(1);
    let start = c - c % range;
    let end = u64::from(start) + u64::from(range);
    let end = u32::try_from(end.min(u64::from(SHARD_COUNT))).unwrap_or(SHARD_COUNT);
    // start <= c < SHARD_COUNT and end >= min(start + 1, SHARD_COUNT) > start.
    ShardRange::new(start, end).expect("a block is a non-empty range inside the shard space")
}

/// The content shard of an integer: `n rem_euclid 2^20`.
pub fn numeric_shard(n: i64) -> ShardId {
    let r = n.rem_euclid(i64::from(SHARD_COUNT));
    ShardId::from_u64_mod(r.unsigned_abs())
}

/// The text a plain sharding field's value contributes to the hash: strings as they are,
/// integers in decimal, booleans as `true`/`false`, floats with an integral value in
/// `i64` as that integer (so `3.0` and `3` place alike), other floats in Rust's shortest
/// round-trip decimal form. `None` for null, arrays and objects.
pub fn value_text<'a, D: DocValue<'a>>(value: D) -> Option<String> {
    match value.kind() {
        ValueKind::Str => value.as_str().map(str::to_owned),
        ValueKind::Int => value.as_i64().map(|n| n.to_string()),
        ValueKind::Bool => value.as_bool().map(|b| b.to_string()),
        ValueKind::Float => value.as_f64().map(float_text),
        ValueKind::Null | ValueKind::Array | ValueKind::Object => None,
    }
}

/// See [`value_text`].
pub fn float_text(f: f64) -> String {
    // 2^63 as f64; every integral f64 in [-2^63, 2^63) converts to i64 exactly.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_finite() && f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f) {
        // The range check above makes this conversion exact.
        #[allow(clippy::cast_possible_truncation)]
        let n = f as i64;
        n.to_string()
    } else {
        f.to_string()
    }
}

fn read_field<'a, D: DocValue<'a>>(doc: D, path: &FieldPath) -> Result<D, ContentError> {
    match doc.path(&path.steps) {
        Some(value) if !value.is_null() => Ok(value),
        _ => Err(ContentError::MissingField { field: path.text.clone() }),
    }
}

fn scalar_text<'a, D: DocValue<'a>>(value: D, path: &FieldPath) -> Result<String, ContentError> {
    value_text(value)
        .ok_or_else(|| ContentError::NotScalar { field: path.text.clone(), kind: value.kind() })
}

/// Assigns a shard to a new document whose id ends with `$` (SHARDING.md §3): the shard is
/// `block_start + hash(id without the $) % block_len` in the block of the document's
/// content, and the id is rewritten to `<id without the $>$@<shard>`. Returns the final id
/// (to be stored and returned to the client) and its shard.
///
/// Example: `orders/1-A$` with `Customer = customers/1-A` gives `orders/1-A$@982173` with
/// `Range = 1` and `orders/1-A$@982326` with `Range = 1000`.
pub fn assign<'a, D: DocValue<'a>>(
    config: &ShardingConfig,
    id: &str,
    doc: D,
) -> Result<(String, ShardId), AssignError> {
    if shard_of(id)? != Placement::Content {
        return Err(AssignError::NotTrailingDollar { id: id.to_owned() });
    }
    let Some(content) = config.content_shard(doc)? else {
        return Err(AssignError::NoContentSharding);
    };
    let block = config.block_of(content);
    // `Placement::Content` means `id` ends with the ASCII byte `$`.
    let base = id.strip_suffix('$').unwrap_or(id);
    let offset = hash(base).get() % block.len();
    let shard = ShardId::new(block.start() + offset)
        .expect("block.start() + offset < block.end() <= SHARD_COUNT");
    let final_id = format!("{base}$@{shard}");
    if final_id.len() > ID_BYTES_MAX {
        return Err(AssignError::AssignedIdTooLong { bytes: final_id.len(), max: ID_BYTES_MAX });
    }
    debug_assert_eq!(shard_of(&final_id), Ok(Placement::Explicit(shard)));
    Ok((final_id, shard))
}

/// Checks a write of document `doc` under id `id` against its collection's configuration
/// (SHARDING.md §3, "Validation"): with `Mutable = false` the id's shard must lie in the block
/// of the document's content. Nothing is checked with `Mutable = true` or `id()`.
pub fn validate<'a, D: DocValue<'a>>(
    config: &ShardingConfig,
    id: &str,
    doc: D,
) -> Result<(), ValidationError> {
    if config.mutable {
        return Ok(());
    }
    verify(config, id, doc)
}

/// [`validate`] as if `Mutable = false`, whatever the configuration says: the check behind
/// the statement that lists a collection's violating ids, which operators run before (or
/// after) switching `Mutable` from true to false, since that switch checks no old document.
pub fn verify<'a, D: DocValue<'a>>(
    config: &ShardingConfig,
    id: &str,
    doc: D,
) -> Result<(), ValidationError> {
    let id_shard = match shard_of(id) {
        Ok(Placement::Content) => return Err(ValidationError::Unassigned),
        Ok(placement) => placement.fixed().map_err(ValidationError::Id)?,
        Err(e) => return Err(ValidationError::Id(e)),
    };
    let Some(content_shard) = config.content_shard(doc)? else {
        return Ok(());
    };
    let block = config.block_of(content_shard);
    if block.contains(id_shard) {
        Ok(())
    } else {
        Err(ValidationError::OutsideBlock {
            field: config.key.to_string(),
            content_shard,
            block,
            id_shard,
        })
    }
}

/// Whether a configuration may change from `old` to `new` online (SHARDING.md §3, "Online
/// changes"). Any change is allowed when either side has `Mutable = true` (set before, or in
/// the same change). With `Mutable = false` on both sides, `Fields` must stay the same and
/// `Range` may only grow by a whole multiple, which keeps every valid document valid.
pub fn check_change(old: &ShardingConfig, new: &ShardingConfig) -> Result<(), ChangeError> {
    if old.mutable || new.mutable {
        return Ok(());
    }
    if old.key != new.key {
        return Err(ChangeError::FieldsNeedMutable {
            old: serde_json::json!(old.key.entries()).to_string(),
            new: serde_json::json!(new.key.entries()).to_string(),
        });
    }
    if old.key == ContentKey::Id {
        // No content places documents; Range means nothing.
        return Ok(());
    }
    if new.range < old.range {
        return Err(ChangeError::RangeShrinkNeedsMutable { old: old.range, new: new.range });
    }
    if !new.range.is_multiple_of(old.range) {
        return Err(ChangeError::RangeNotMultiple { old: old.range, new: new.range });
    }
    Ok(())
}

/// A JSON object's members in order, repeated keys included.
struct Members(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<De: Deserializer<'de>>(deserializer: De) -> Result<Members, De::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, serde_json::Value>()? {
                    // Bounded: the text is at most CONFIG_BYTES_MAX bytes.
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

fn json_error(e: serde_json::Error) -> ConfigError {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text).to_owned();
    ConfigError::Json { line: e.line(), column: e.column(), message }
}

fn parse_range(value: &serde_json::Value) -> Result<u32, ConfigError> {
    let serde_json::Value::Number(n) = value else {
        return Err(ConfigError::WrongType { key: "Range", expected: "a positive integer" });
    };
    match n.as_u64().and_then(|r| u32::try_from(r).ok()) {
        Some(r) if (1..=RANGE_MAX).contains(&r) => Ok(r),
        _ => Err(ConfigError::RangeOutOfBounds { value: n.to_string(), max: RANGE_MAX }),
    }
}

fn parse_fields(value: serde_json::Value) -> Result<ContentKey, ConfigError> {
    let serde_json::Value::Array(items) = value else {
        return Err(ConfigError::WrongType {
            key: "Fields",
            expected: "a list of strings such as [\"Customer\"]",
        });
    };
    if items.is_empty() {
        return Err(ConfigError::EmptyFields);
    }
    if items.len() > CONFIG_FIELDS_MAX {
        return Err(ConfigError::TooManyFields { count: items.len(), max: CONFIG_FIELDS_MAX });
    }
    let count = items.len();
    let mut paths = Vec::with_capacity(count);
    for item in &items {
        let serde_json::Value::String(text) = item else {
            return Err(ConfigError::WrongType {
                key: "Fields",
                expected: "a list of strings such as [\"Customer\"]",
            });
        };
        match parse_entry(text)? {
            Entry::Path(path) => paths.push(path),
            Entry::Function(key) => {
                if count > 1 {
                    return Err(ConfigError::FunctionMixed { function: text.clone(), count });
                }
                return Ok(key);
            }
        }
    }
    Ok(ContentKey::Fields(paths))
}

enum Entry {
    Path(FieldPath),
    Function(ContentKey),
}

fn parse_entry(text: &str) -> Result<Entry, ConfigError> {
    let Some((name, rest)) = text.split_once('(') else {
        return FieldPath::parse(text).map(Entry::Path);
    };
    let (function, takes) = match name {
        "numeric" => ("numeric", "one field path, as in numeric(Age)"),
        "ticks" => ("ticks", "one field path, as in ticks(CreatedAt)"),
        "id" => ("id", "no argument: id()"),
        _ => return Err(ConfigError::UnknownFunction { name: name.to_owned() }),
    };
    let bad = || ConfigError::BadFunctionArgument { call: text.to_owned(), function, takes };
    let argument = rest.strip_suffix(')').ok_or_else(bad)?;
    if argument.contains(['(', ')']) {
        return Err(bad());
    }
    if function == "id" {
        return if argument.is_empty() { Ok(Entry::Function(ContentKey::Id)) } else { Err(bad()) };
    }
    if argument.is_empty() {
        return Err(bad());
    }
    let path = FieldPath::parse(argument)?;
    Ok(Entry::Function(if function == "numeric" {
        ContentKey::Numeric(path)
    } else {
        ContentKey::Ticks(path)
    }))
}

/// .NET ticks per second.
const TICKS_PER_SECOND: i64 = 10_000_000;
/// .NET ticks per day.
const TICKS_PER_DAY: i64 = 86_400 * TICKS_PER_SECOND;
/// Ticks of 9999-12-31T23:59:59.9999999Z (`DateTime.MaxValue.Ticks`).
pub const TICKS_MAX: u64 = 3_155_378_975_999_999_999;
/// Largest accepted offset from UTC, in minutes (±14:00, the widest real zone).
const OFFSET_MINUTES_MAX: i64 = 14 * 60;

/// Parses an ISO-8601 date-time into .NET ticks (100 ns intervals since
/// 0001-01-01T00:00:00Z), as `ticks()` does.
///
/// Accepted, exactly: `YYYY-MM-DDTHH:MM:SS`, then optionally `.` and 1 to 7 fraction digits,
/// then `Z` or an offset `+HH:MM` / `-HH:MM` (at most 14:00). Upper-case `T` and `Z` only;
/// no week dates, ordinal dates, basic (no separators) form, leap second `60`, or local time
/// without an offset. Years 0001 to 9999; the instant after applying the offset must lie in
/// that era too.
pub fn parse_ticks(text: &str) -> Result<u64, DateTimeError> {
    let mut p = Cursor { bytes: text.as_bytes(), at: 0 };
    let year = p.digits(4, "a four-digit year")?;
    p.expect(b'-', "`-`")?;
    let month = p.digits(2, "a two-digit month")?;
    p.expect(b'-', "`-`")?;
    let day = p.digits(2, "a two-digit day")?;
    p.expect(b'T', "`T`")?;
    let hour = p.digits(2, "a two-digit hour")?;
    p.expect(b':', "`:`")?;
    let minute = p.digits(2, "two-digit minutes")?;
    p.expect(b':', "`:`")?;
    let second = p.digits(2, "two-digit seconds")?;
    let mut fraction = 0;
    if p.peek() == Some(b'.') {
        p.at += 1;
        let mut count = 0;
        while let Some(b) = p.peek().filter(u8::is_ascii_digit) {
            if count == 7 {
                return Err(DateTimeError::Syntax {
                    offset: p.at,
                    expected: "at most 7 fraction digits",
                });
            }
            fraction = fraction * 10 + i64::from(b - b'0');
            count += 1;
            p.at += 1;
        }
        if count == 0 {
            return Err(DateTimeError::Syntax { offset: p.at, expected: "a fraction digit" });
        }
        for _ in count..7 {
            fraction *= 10;
        }
    }
    let offset_minutes = match p.peek() {
        Some(b'Z') => {
            p.at += 1;
            0
        }
        Some(sign @ (b'+' | b'-')) => {
            p.at += 1;
            let hours = p.digits(2, "two-digit offset hours")?;
            p.expect(b':', "`:`")?;
            let minutes = p.digits(2, "two-digit offset minutes")?;
            if minutes > 59 {
                return Err(DateTimeError::OutOfRange { component: "offset minutes" });
            }
            let total = hours * 60 + minutes;
            if total > OFFSET_MINUTES_MAX {
                return Err(DateTimeError::OutOfRange { component: "offset" });
            }
            if sign == b'-' { -total } else { total }
        }
        _ => {
            return Err(DateTimeError::Syntax {
                offset: p.at,
                expected: "`Z`, `+HH:MM` or `-HH:MM`",
            });
        }
    };
    if p.at != p.bytes.len() {
        return Err(DateTimeError::Syntax { offset: p.at, expected: "the end of the text" });
    }
    if !(1..=9999).contains(&year) {
        return Err(DateTimeError::OutOfRange { component: "year" });
    }
    if !(1..=12).contains(&month) {
        return Err(DateTimeError::OutOfRange { component: "month" });
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(DateTimeError::OutOfRange { component: "day" });
    }
    if hour > 23 {
        return Err(DateTimeError::OutOfRange { component: "hour" });
    }
    if minute > 59 {
        return Err(DateTimeError::OutOfRange { component: "minute" });
    }
    if second > 59 {
        return Err(DateTimeError::OutOfRange { component: "second" });
    }
    let days = days_before_year(year) + days_before_month(year, month) + day - 1;
    let seconds = hour * 3600 + minute * 60 + second - offset_minutes * 60;
    // |days| < 3.7e6 and |seconds| < 1.4e5: far inside i64 after scaling.
    let ticks = days * TICKS_PER_DAY + seconds * TICKS_PER_SECOND + fraction;
    match u64::try_from(ticks) {
        Ok(t) if t <= TICKS_MAX => Ok(t),
        _ => {
            cov_mark::hit!(ticks_outside_era);
            Err(DateTimeError::OutsideEra)
        }
    }
}

struct Cursor<'t> {
    bytes: &'t [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, want: u8, expected: &'static str) -> Result<(), DateTimeError> {
        if self.peek() == Some(want) {
            self.at += 1;
            Ok(())
        } else {
            Err(DateTimeError::Syntax { offset: self.at, expected })
        }
    }

    fn digits(&mut self, count: usize, expected: &'static str) -> Result<i64, DateTimeError> {
        let mut value = 0;
        for _ in 0..count {
            match self.peek() {
                Some(b) if b.is_ascii_digit() => {
                    value = value * 10 + i64::from(b - b'0');
                    self.at += 1;
                }
                _ => return Err(DateTimeError::Syntax { offset: self.at, expected }),
            }
        }
        Ok(value)
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn days_before_year(year: i64) -> i64 {
    let y = year - 1;
    y * 365 + y / 4 - y / 100 + y / 400
}

fn days_before_month(year: i64, month: i64) -> i64 {
    (1..month).map(|m| days_in_month(year, m)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::IdError;

    fn config(json: &str) -> ShardingConfig {
        ShardingConfig::parse(json).expect("test configuration is valid")
    }

    fn doc(json: &str) -> serde_json::Value {
        serde_json::from_str(json).expect("test document is valid JSON")
    }

    fn shard(n: u32) -> ShardId {
        ShardId::new(n).expect("test shard in range")
    }

    // Checks the assignment vectors of SHARDING.md §3 for Range 1, 1000 and 10000.
    #[test]
    fn assignment_vectors() {
        let d = doc(r#"{"Customer": "customers/1-A"}"#);
        for (range, final_id, n) in [
            (1, "orders/1-A$@982173", 982_173),
            (1000, "orders/1-A$@982326", 982_326),
            (10000, "orders/1-A$@981326", 981_326),
        ] {
            let c = config(&format!(r#"{{"Fields": ["Customer"], "Range": {range}}}"#));
            assert_eq!(assign(&c, "orders/1-A$", &d), Ok((final_id.to_owned(), shard(n))));
            assert_eq!(validate(&c, final_id, &d), Ok(()));
        }
    }

    // Checks defaults, canonical JSON and the round trip through parse.
    #[test]
    fn parse_defaults_and_round_trip() {
        let c = config(r#"{"Fields": ["Customer"]}"#);
        assert_eq!(c.range(), 1);
        assert!(!c.mutable());
        assert_eq!(c.to_json(), r#"{"Fields":["Customer"],"Range":1,"Mutable":false}"#);
        for text in [
            r#"{"Fields": ["A.B", "C"], "Range": 1000, "Mutable": true}"#,
            r#"{"Fields": ["numeric(Age)"], "Range": 7}"#,
            r#"{"Fields": ["ticks(Created.At)"]}"#,
            r#"{"Fields": ["id()"]}"#,
            r#"{"Fields": ["quote\"d", "ünï.cødé"]}"#,
        ] {
            let c = config(text);
            assert_eq!(ShardingConfig::parse(&c.to_json()), Ok(c.clone()), "{text}");
            assert_eq!(c.to_string(), c.to_json());
        }
        assert_eq!(
            config(r#"{"Fields": ["numeric(Age)"]}"#).key(),
            &ContentKey::Numeric(FieldPath::parse("Age").expect("valid path"))
        );
    }

    // Checks every strictness rule refuses with its own variant.
    #[test]
    fn parse_refusals() {
        let err = |text: &str| ShardingConfig::parse(text).expect_err(text);
        assert!(matches!(err("{"), ConfigError::Json { .. }));
        assert_eq!(err("[1]"), ConfigError::NotAnObject);
        assert!(matches!(err(r#"{"Fields":["a"],"range":1}"#), ConfigError::UnknownKey { .. }));
        assert_eq!(err(r#"{"Range":1}"#), ConfigError::MissingFields);
        assert_eq!(err(r#"{"Fields":[]}"#), ConfigError::EmptyFields);
        assert!(matches!(err(r#"{"Fields":"a"}"#), ConfigError::WrongType { key: "Fields", .. }));
        assert!(matches!(err(r#"{"Fields":[1]}"#), ConfigError::WrongType { key: "Fields", .. }));
        assert!(matches!(err(r#"{"Fields":["a"],"Range":"1"}"#), ConfigError::WrongType { .. }));
        assert!(matches!(
            err(r#"{"Fields":["a"],"Mutable":1}"#),
            ConfigError::WrongType { key: "Mutable", .. }
        ));
        for range in ["0", "-1", "1.5", "1.0", "1048577", "99999999999999999999"] {
            let text = format!(r#"{{"Fields":["a"],"Range":{range}}}"#);
            assert!(matches!(err(&text), ConfigError::RangeOutOfBounds { .. }), "{range}");
        }
        assert!(config(r#"{"Fields":["a"],"Range":1048576}"#).range() == SHARD_COUNT);
        for path in ["", "a..b", ".a", "a."] {
            let text = format!(r#"{{"Fields":["{path}"]}}"#);
            assert!(matches!(err(&text), ConfigError::BadPath { .. }), "{path}");
        }
        assert!(matches!(err(r#"{"Fields":["hash(a)"]}"#), ConfigError::UnknownFunction { .. }));
        for call in ["id(a)", "numeric()", "ticks(a", "numeric((a))"] {
            let text = format!(r#"{{"Fields":["{call}"]}}"#);
            assert!(matches!(err(&text), ConfigError::BadFunctionArgument { .. }), "{call}");
        }
        assert!(matches!(
            err(r#"{"Fields":["numeric(a)","b"]}"#),
            ConfigError::FunctionMixed { .. }
        ));
        assert!(matches!(err(r#"{"Fields":["a","id()"]}"#), ConfigError::FunctionMixed { .. }));
        let many: Vec<String> = (0..=CONFIG_FIELDS_MAX).map(|i| format!("\"f{i}\"")).collect();
        let text = format!(r#"{{"Fields":[{}]}}"#, many.join(","));
        assert!(matches!(err(&text), ConfigError::TooManyFields { .. }));
        let big = format!(r#"{{"Fields":["{}"]}}"#, "a".repeat(CONFIG_BYTES_MAX));
        assert!(matches!(err(&big), ConfigError::TooLarge { .. }));
        // Every refusal reads as a sentence naming what to do.
        assert!(err(r#"{"Fields":["a"],"Range":0}"#).to_string().contains("from 1 to 1048576"));
    }

    // Checks content shards for plain fields (several joined with U+001F, lower-cased, numbers
    // as text), numeric() (rem_euclid) and ticks().
    #[test]
    fn content_shards() {
        let c = config(r#"{"Fields": ["Customer"]}"#);
        assert_eq!(
            c.content_shard(&doc(r#"{"Customer":"CUSTOMERS/1-a"}"#)),
            Ok(Some(shard(982_173)))
        );
        assert_eq!(c.content_shard(&doc(r#"{"Customer":3}"#)), Ok(Some(hash("3"))));
        assert_eq!(c.content_shard(&doc(r#"{"Customer":3.0}"#)), Ok(Some(hash("3"))));
        assert_eq!(c.content_shard(&doc(r#"{"Customer":-0.0}"#)), Ok(Some(hash("0"))));
        assert_eq!(c.content_shard(&doc(r#"{"Customer":1.5}"#)), Ok(Some(hash("1.5"))));
        assert_eq!(c.content_shard(&doc(r#"{"Customer":true}"#)), Ok(Some(hash("true"))));
        assert!(matches!(
            c.content_shard(&doc(r#"{"Customer":null}"#)),
            Err(ContentError::MissingField { .. })
        ));
        assert!(matches!(
            c.content_shard(&doc(r#"{"customer":"x"}"#)),
            Err(ContentError::MissingField { .. })
        ));
        assert!(matches!(
            c.content_shard(&doc(r#"{"Customer":[1]}"#)),
            Err(ContentError::NotScalar { kind: ValueKind::Array, .. })
        ));
        let e = c.content_shard(&doc(r#"{"Customer":{}}"#)).expect_err("an object");
        assert_eq!(
            e.to_string(),
            "sharding field `Customer` holds an object; it must hold a string, a number or a boolean"
        );
        let two = config(r#"{"Fields": ["A.B", "C"]}"#);
        assert_eq!(two.content_shard(&doc(r#"{"A":{"B":"x"},"C":7}"#)), Ok(Some(hash("x\u{1f}7"))));
        let n = config(r#"{"Fields": ["numeric(N)"]}"#);
        assert_eq!(n.content_shard(&doc(r#"{"N":1048577}"#)), Ok(Some(shard(1))));
        assert_eq!(n.content_shard(&doc(r#"{"N":-1}"#)), Ok(Some(ShardId::MAX)));
        assert!(matches!(
            n.content_shard(&doc(r#"{"N":"1"}"#)),
            Err(ContentError::NotInteger { kind: ValueKind::Str, .. })
        ));
        let t = config(r#"{"Fields": ["ticks(T)"]}"#);
        let ticks_2000 = 630_822_816_000_000_000_u64;
        assert_eq!(
            t.content_shard(&doc(r#"{"T":"2000-01-01T00:00:00Z"}"#)),
            Ok(Some(ShardId::from_u64_mod(ticks_2000)))
        );
        assert!(matches!(
            t.content_shard(&doc(r#"{"T":"2000-01-01"}"#)),
            Err(ContentError::BadDateTime { .. })
        ));
        assert!(matches!(
            t.content_shard(&doc(r#"{"T":5}"#)),
            Err(ContentError::NotDateTimeString { .. })
        ));
        assert_eq!(config(r#"{"Fields": ["id()"]}"#).content_shard(&doc("{}")), Ok(None));
    }

    // Checks parse_ticks against known .NET tick values and each refusal.
    #[test]
    fn ticks_parsing() {
        assert_eq!(parse_ticks("0001-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_ticks("1970-01-01T00:00:00Z"), Ok(621_355_968_000_000_000));
        assert_eq!(parse_ticks("2000-01-01T00:00:00.0000001Z"), Ok(630_822_816_000_000_001));
        assert_eq!(parse_ticks("2000-01-01T00:00:00.5Z"), Ok(630_822_816_005_000_000));
        assert_eq!(parse_ticks("2000-01-01T01:30:00+01:30"), Ok(630_822_816_000_000_000));
        assert_eq!(parse_ticks("1999-12-31T22:00:00-02:00"), Ok(630_822_816_000_000_000));
        assert_eq!(parse_ticks("9999-12-31T23:59:59.9999999Z"), Ok(TICKS_MAX));
        assert!(parse_ticks("2024-02-29T12:00:00Z").is_ok());
        assert_eq!(
            parse_ticks("2023-02-29T12:00:00Z"),
            Err(DateTimeError::OutOfRange { component: "day" })
        );
        assert_eq!(
            parse_ticks("1900-02-29T12:00:00Z"),
            Err(DateTimeError::OutOfRange { component: "day" })
        );
        assert_eq!(
            parse_ticks("0000-01-01T00:00:00Z"),
            Err(DateTimeError::OutOfRange { component: "year" })
        );
        assert_eq!(
            parse_ticks("2000-13-01T00:00:00Z"),
            Err(DateTimeError::OutOfRange { component: "month" })
        );
        assert_eq!(
            parse_ticks("2000-01-01T24:00:00Z"),
            Err(DateTimeError::OutOfRange { component: "hour" })
        );
        assert_eq!(
            parse_ticks("2000-01-01T00:00:60Z"),
            Err(DateTimeError::OutOfRange { component: "second" })
        );
        for bad in [
            "",
            "2000-01-01",
            "2000-01-01T00:00:00",
            "2000-01-01t00:00:00Z",
            "2000-01-01T00:00:00z",
            "2000-01-01T00:00:00.Z",
            "2000-01-01T00:00:00.12345678Z",
            "2000-01-01T00:00:00+0100",
            "2000-01-01T00:00:00Z ",
            "+2000-01-01T00:00:00Z",
            "２000-01-01T00:00:00Z",
        ] {
            assert!(matches!(parse_ticks(bad), Err(DateTimeError::Syntax { .. })), "{bad}");
        }
        assert!(parse_ticks("2000-01-01T00:00:00+14:01").is_err());
        assert!(parse_ticks("2000-01-01T00:00:00+01:60").is_err());
    }

    // Checks a repeated key is refused, though serde_json's Value would keep the last one.
    #[test]
    fn repeated_key_refused() {
        cov_mark::check!(config_repeated_key);
        assert_eq!(
            ShardingConfig::parse(r#"{"Fields":["a"],"Range":1,"Range":2}"#),
            Err(ConfigError::DuplicateKey { key: "Range".to_owned() })
        );
    }

    // Checks an offset that pushes the instant out of years 1..=9999 is refused.
    #[test]
    fn ticks_outside_era() {
        cov_mark::check!(ticks_outside_era);
        assert_eq!(parse_ticks("0001-01-01T00:00:00+00:01"), Err(DateTimeError::OutsideEra));
        assert_eq!(parse_ticks("9999-12-31T23:59:59-00:01"), Err(DateTimeError::OutsideEra));
    }

    // Checks assignment refusals: not a trailing `$`, id() config, missing field, too long.
    #[test]
    fn assignment_refusals() {
        let c = config(r#"{"Fields": ["Customer"]}"#);
        let d = doc(r#"{"Customer":"c"}"#);
        assert!(matches!(assign(&c, "orders/1", &d), Err(AssignError::NotTrailingDollar { .. })));
        assert!(matches!(assign(&c, "", &d), Err(AssignError::Id(IdError::Empty))));
        assert!(matches!(assign(&c, "o$", &doc("{}")), Err(AssignError::Content(_))));
        let id_only = config(r#"{"Fields": ["id()"]}"#);
        assert_eq!(assign(&id_only, "o$", &d), Err(AssignError::NoContentSharding));
        let long = format!("{}$", "a".repeat(ID_BYTES_MAX - 1));
        assert!(matches!(assign(&c, &long, &d), Err(AssignError::AssignedIdTooLong { .. })));
        let (id, s) = assign(&c, "$$", &d).expect("`$$` ends with a `$` after the first char");
        assert_eq!(shard_of(&id), Ok(Placement::Explicit(s)));
    }

    // Checks validation: accepted inside the block, refused outside with field and shards
    // named, skipped when Mutable, refused for an unassigned trailing `$`.
    #[test]
    fn validation() {
        let c = config(r#"{"Fields": ["Customer"], "Range": 1000}"#);
        let d = doc(r#"{"Customer":"customers/1-A"}"#);
        assert_eq!(validate(&c, "orders/1-A$@982000", &d), Ok(()));
        assert_eq!(validate(&c, "orders/1-A$@982999", &d), Ok(()));
        assert_eq!(validate(&c, "x$customers/1-a", &d), Ok(()));
        let e = validate(&c, "orders/1-A$@983000", &d).expect_err("outside the block");
        assert_eq!(
            e,
            ValidationError::OutsideBlock {
                field: "Customer".to_owned(),
                content_shard: shard(982_173),
                block: ShardRange::new(982_000, 983_000).expect("valid"),
                id_shard: shard(983_000),
            }
        );
        let text = e.to_string();
        assert!(text.contains("Customer") && text.contains("982173") && text.contains("983000"));
        assert_eq!(validate(&c, "orders/1-A$", &d), Err(ValidationError::Unassigned));
        assert!(matches!(validate(&c, "x$@", &d), Err(ValidationError::Id(_))));
        let m = config(r#"{"Fields": ["Customer"], "Mutable": true}"#);
        assert_eq!(validate(&m, "orders/1-A$@5", &d), Ok(()));
        // verify ignores Mutable: it finds what a true -> false switch would leave behind.
        assert!(matches!(
            verify(&m, "orders/1-A$@5", &d),
            Err(ValidationError::OutsideBlock { .. })
        ));
        assert_eq!(verify(&m, "orders/1-A$@982173", &d), Ok(()));
    }

    // Checks each online change rule of §3: growth by a multiple, refusals with reasons, and
    // that Mutable on either side allows anything.
    #[test]
    fn online_changes() {
        let c = |json: &str| config(json);
        let r10 = c(r#"{"Fields":["A"],"Range":10}"#);
        assert_eq!(check_change(&r10, &c(r#"{"Fields":["A"],"Range":30}"#)), Ok(()));
        assert_eq!(check_change(&r10, &r10), Ok(()));
        let e = check_change(&r10, &c(r#"{"Fields":["A"],"Range":15}"#)).expect_err("15");
        assert_eq!(e, ChangeError::RangeNotMultiple { old: 10, new: 15 });
        assert!(e.to_string().contains("not a multiple"));
        assert_eq!(
            check_change(&r10, &c(r#"{"Fields":["A"],"Range":5}"#)),
            Err(ChangeError::RangeShrinkNeedsMutable { old: 10, new: 5 })
        );
        assert!(matches!(
            check_change(&r10, &c(r#"{"Fields":["B"],"Range":10}"#)),
            Err(ChangeError::FieldsNeedMutable { .. })
        ));
        assert_eq!(check_change(&r10, &c(r#"{"Fields":["B"],"Range":5,"Mutable":true}"#)), Ok(()));
        let m = c(r#"{"Fields":["A"],"Range":10,"Mutable":true}"#);
        assert_eq!(check_change(&m, &c(r#"{"Fields":["B"],"Range":7}"#)), Ok(()));
        assert_eq!(check_change(&r10, &m), Ok(()));
    }

    // Checks blocks are clipped at SHARD_COUNT.
    #[test]
    fn blocks_clip() {
        assert_eq!(
            block(shard(1_048_575), 1000),
            ShardRange::new(1_048_000, SHARD_COUNT).expect("valid")
        );
        assert_eq!(block(shard(5), SHARD_COUNT), ShardRange::ALL);
        assert_eq!(block(shard(5), 1), ShardRange::single(shard(5)));
    }
}
