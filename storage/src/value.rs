//! Documents: a JSON value tree archived with rkyv, so a filter reads one field of a stored
//! document without deserializing anything, plus conversion from and to `serde_json`.
//!
//! Objects keep their members in the order they were written (a vector of members, looked up
//! by a linear scan: documents are small and scans beat hashing at these sizes). Integers that
//! fit `i64` are `Int`; larger positive integers are `UInt` (seen through `DocValue` as a float,
//! the router's rule, but kept exactly); everything else is `Float`.

use rkyv::{Archive, Deserialize, Serialize};
use router::doc::{DocValue, ValueKind};

use crate::error::InputError;
use crate::limits::DOC_DEPTH_MAX;

/// An owned JSON value in the form that is archived.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(serialize_bounds(
    __S: rkyv::ser::Writer + rkyv::ser::Allocator,
    __S::Error: rkyv::rancor::Source,
))]
#[rkyv(deserialize_bounds(__D::Error: rkyv::rancor::Source))]
#[rkyv(bytecheck(bounds(__C: rkyv::validation::ArchiveContext, __C::Error: rkyv::rancor::Source)))]
pub enum JsonValue {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// An integer that fits in `i64`.
    Int(i64),
    /// A positive integer above `i64::MAX`.
    UInt(u64),
    /// Any other number (always finite).
    Float(f64),
    /// A string.
    String(String),
    /// An array.
    Array(#[rkyv(omit_bounds)] Vec<JsonValue>),
    /// An object, members in written order.
    Object(#[rkyv(omit_bounds)] Vec<Member>),
}

/// One member of an object.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(serialize_bounds(
    __S: rkyv::ser::Writer + rkyv::ser::Allocator,
    __S::Error: rkyv::rancor::Source,
))]
#[rkyv(deserialize_bounds(__D::Error: rkyv::rancor::Source))]
#[rkyv(bytecheck(bounds(__C: rkyv::validation::ArchiveContext, __C::Error: rkyv::rancor::Source)))]
pub struct Member {
    /// The member name (case-sensitive).
    pub key: String,
    /// The member value.
    #[rkyv(omit_bounds)]
    pub value: JsonValue,
}

impl JsonValue {
    /// Converts a serde_json value, refusing nesting deeper than `DOC_DEPTH_MAX`.
    pub fn from_serde(value: &serde_json::Value) -> Result<JsonValue, InputError> {
        Self::from_serde_at(value, 1)
    }

    fn from_serde_at(value: &serde_json::Value, depth: usize) -> Result<JsonValue, InputError> {
        if depth > DOC_DEPTH_MAX {
            return Err(InputError::DocTooDeep { max: DOC_DEPTH_MAX });
        }
        Ok(match value {
            serde_json::Value::Null => JsonValue::Null,
            serde_json::Value::Bool(b) => JsonValue::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    JsonValue::Int(i)
                } else if let Some(u) = n.as_u64() {
                    JsonValue::UInt(u)
                } else {
                    match n.as_f64() {
                        Some(f) if f.is_finite() => JsonValue::Float(f),
                        _ => return Err(InputError::NonFiniteNumber),
                    }
                }
            }
            serde_json::Value::String(s) => JsonValue::String(s.clone()),
            serde_json::Value::Array(items) => JsonValue::Array(
                items
                    .iter()
                    .map(|item| Self::from_serde_at(item, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            serde_json::Value::Object(map) => JsonValue::Object(
                map.iter()
                    .map(|(key, value)| {
                        Ok(Member {
                            key: key.clone(),
                            value: Self::from_serde_at(value, depth + 1)?,
                        })
                    })
                    .collect::<Result<_, InputError>>()?,
            ),
        })
    }
}

impl ArchivedJsonValue {
    /// Converts the archived value back to serde_json. A float that is not finite (possible
    /// only in bytes we did not write) becomes `null`.
    pub fn to_serde(&self) -> serde_json::Value {
        match self {
            ArchivedJsonValue::Null => serde_json::Value::Null,
            ArchivedJsonValue::Bool(b) => serde_json::Value::Bool(*b),
            ArchivedJsonValue::Int(i) => serde_json::Value::from(i.to_native()),
            ArchivedJsonValue::UInt(u) => serde_json::Value::from(u.to_native()),
            ArchivedJsonValue::Float(f) => serde_json::Number::from_f64(f.to_native())
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            ArchivedJsonValue::String(s) => serde_json::Value::String(s.as_str().to_owned()),
            ArchivedJsonValue::Array(items) => {
                serde_json::Value::Array(items.iter().map(ArchivedJsonValue::to_serde).collect())
            }
            ArchivedJsonValue::Object(members) => serde_json::Value::Object(
                members.iter().map(|m| (m.key.as_str().to_owned(), m.value.to_serde())).collect(),
            ),
        }
    }
}

impl<'a> DocValue<'a> for &'a ArchivedJsonValue {
    fn kind(self) -> ValueKind {
        match self {
            ArchivedJsonValue::Null => ValueKind::Null,
            ArchivedJsonValue::Bool(_) => ValueKind::Bool,
            ArchivedJsonValue::Int(_) => ValueKind::Int,
            ArchivedJsonValue::UInt(_) | ArchivedJsonValue::Float(_) => ValueKind::Float,
            ArchivedJsonValue::String(_) => ValueKind::Str,
            ArchivedJsonValue::Array(_) => ValueKind::Array,
            ArchivedJsonValue::Object(_) => ValueKind::Object,
        }
    }

    fn as_bool(self) -> Option<bool> {
        match self {
            ArchivedJsonValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            ArchivedJsonValue::Int(i) => Some(i.to_native()),
            _ => None,
        }
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            // Precision loss above 2^53 is the documented meaning of "as f64".
            #[allow(clippy::cast_precision_loss)]
            ArchivedJsonValue::Int(i) => Some(i.to_native() as f64),
            #[allow(clippy::cast_precision_loss)]
            ArchivedJsonValue::UInt(u) => Some(u.to_native() as f64),
            ArchivedJsonValue::Float(f) => Some(f.to_native()),
            _ => None,
        }
    }

    fn as_str(self) -> Option<&'a str> {
        match self {
            ArchivedJsonValue::String(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn field(self, name: &str) -> Option<Self> {
        match self {
            ArchivedJsonValue::Object(members) => {
                members.iter().find(|m| m.key.as_str() == name).map(|m| &m.value)
            }
            _ => None,
        }
    }

    fn len(self) -> usize {
        match self {
            ArchivedJsonValue::Array(items) => items.len(),
            ArchivedJsonValue::Object(members) => members.len(),
            _ => 0,
        }
    }

    fn element(self, index: usize) -> Option<Self> {
        match self {
            ArchivedJsonValue::Array(items) => items.get(index),
            _ => None,
        }
    }

    fn for_each_member(self, visit: &mut dyn FnMut(&'a str, Self)) {
        if let ArchivedJsonValue::Object(members) = self {
            for m in members.iter() {
                visit(m.key.as_str(), &m.value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(v: &JsonValue) -> rkyv::util::AlignedVec {
        rkyv::to_bytes::<rkyv::rancor::Error>(v).expect("serialize")
    }

    // Checks a document survives serde_json -> archive -> serde_json unchanged, member order
    // and big integers included, and that the DocValue view reads it like serde_json's view.
    #[test]
    fn roundtrip_and_view() {
        let json: serde_json::Value = serde_json::from_str(
            r#"{"b":1,"a":{"City":"Oslo"},"f":1.5,"big":18446744073709551615,"n":null,
                "t":true,"arr":[1,"x",[2]],"neg":-7}"#,
        )
        .expect("json");
        let value = JsonValue::from_serde(&json).expect("convert");
        let bytes = archive(&value);
        let archived =
            rkyv::access::<ArchivedJsonValue, rkyv::rancor::Error>(&bytes).expect("valid");
        assert_eq!(archived.to_serde(), json);
        assert_eq!(archived.path(&["a", "City"]).and_then(|c| c.as_str()), Some("Oslo"));
        assert_eq!(archived.field("big").map(|v| v.kind()), Some(ValueKind::Float));
        assert_eq!(archived.field("neg").and_then(|v| v.as_i64()), Some(-7));
        assert_eq!(archived.field("arr").map(|v| v.len()), Some(3));
        assert_eq!(
            archived.field("arr").and_then(|v| v.element(1)).and_then(|v| v.as_str()),
            Some("x")
        );
        let mut names = Vec::new();
        archived.for_each_member(&mut |name, _| names.push(name.to_owned()));
        assert_eq!(names, ["b", "a", "f", "big", "n", "t", "arr", "neg"]);
    }

    // Checks the depth limit: DOC_DEPTH_MAX levels pass, one more is a typed error.
    #[test]
    fn depth_limit() {
        let mut ok = serde_json::Value::Null;
        for _ in 0..DOC_DEPTH_MAX - 1 {
            ok = serde_json::Value::Array(vec![ok]);
        }
        assert!(JsonValue::from_serde(&ok).is_ok());
        let deep = serde_json::Value::Array(vec![ok]);
        assert_eq!(
            JsonValue::from_serde(&deep),
            Err(InputError::DocTooDeep { max: DOC_DEPTH_MAX })
        );
    }
}
