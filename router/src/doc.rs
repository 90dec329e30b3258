//! A read-only view of a JSON document, shared by every crate that reads document fields.
//!
//! Content-based sharding (here), filters and projections (`query`) and the stored archived
//! document (`storage`) all meet at [`DocValue`]. The trait lets `query` evaluate a predicate
//! over a zero-copy archived document without deserializing it, and lets `router` read the
//! configured fields of a document without knowing how it is stored. `storage` implements it
//! for its archived value; this module implements it for `&serde_json::Value`.
//!
//! **Boundary:** numbers are either `Int` (fits in `i64`) or `Float`; a JSON number that is an
//! integer outside `i64` is seen as `Float`. Object fields keep their stored order.

/// The kind of one JSON value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ValueKind {
    /// `null`
    Null,
    /// `true` / `false`
    Bool,
    /// An integer that fits in `i64`.
    Int,
    /// Any other number.
    Float,
    /// A string.
    Str,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl std::fmt::Display for ValueKind {
    /// The kind in words, for error messages: `null`, `a boolean`, `an integer`, …
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValueKind::Null => "null",
            ValueKind::Bool => "a boolean",
            ValueKind::Int => "an integer",
            ValueKind::Float => "a non-integer number",
            ValueKind::Str => "a string",
            ValueKind::Array => "an array",
            ValueKind::Object => "an object",
        })
    }
}

/// A borrowed view of one JSON value. `Copy`, like a reference: it borrows the document for
/// `'a`, and everything it hands out borrows the same document.
pub trait DocValue<'a>: Copy + 'a {
    /// What kind of value this is.
    fn kind(self) -> ValueKind;
    /// The boolean, when this is a `Bool`.
    fn as_bool(self) -> Option<bool>;
    /// The integer, when this is an `Int`.
    fn as_i64(self) -> Option<i64>;
    /// The number as `f64`, when this is an `Int` or a `Float`.
    fn as_f64(self) -> Option<f64>;
    /// The string, when this is a `Str`.
    fn as_str(self) -> Option<&'a str>;
    /// The member `name` (case-sensitive), when this is an object that has it.
    fn field(self, name: &str) -> Option<Self>;
    /// The number of elements (arrays) or members (objects); 0 for scalars.
    fn len(self) -> usize;
    /// Element `index`, when this is an array that long.
    fn element(self, index: usize) -> Option<Self>;
    /// Calls `visit` with each member of an object, in stored order; nothing for other kinds.
    fn for_each_member(self, visit: &mut dyn FnMut(&'a str, Self));

    /// Whether this has no elements or members (always true for scalars).
    fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Whether this is `null`.
    fn is_null(self) -> bool {
        self.kind() == ValueKind::Null
    }

    /// Walks a dotted path (`["address", "city"]`) through objects. `None` when any step is
    /// missing or not an object; an empty path is the value itself.
    fn path<S: AsRef<str>>(self, path: &[S]) -> Option<Self> {
        let mut at = self;
        for step in path {
            at = at.field(step.as_ref())?;
        }
        Some(at)
    }
}

impl<'a> DocValue<'a> for &'a serde_json::Value {
    fn kind(self) -> ValueKind {
        match self {
            serde_json::Value::Null => ValueKind::Null,
            serde_json::Value::Bool(_) => ValueKind::Bool,
            serde_json::Value::Number(n) if n.as_i64().is_some() => ValueKind::Int,
            serde_json::Value::Number(_) => ValueKind::Float,
            serde_json::Value::String(_) => ValueKind::Str,
            serde_json::Value::Array(_) => ValueKind::Array,
            serde_json::Value::Object(_) => ValueKind::Object,
        }
    }

    fn as_bool(self) -> Option<bool> {
        self.as_bool()
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            serde_json::Value::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            serde_json::Value::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    fn as_str(self) -> Option<&'a str> {
        match self {
            serde_json::Value::String(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn field(self, name: &str) -> Option<Self> {
        match self {
            serde_json::Value::Object(map) => map.get(name),
            _ => None,
        }
    }

    fn len(self) -> usize {
        match self {
            serde_json::Value::Array(items) => items.len(),
            serde_json::Value::Object(map) => map.len(),
            _ => 0,
        }
    }

    fn element(self, index: usize) -> Option<Self> {
        match self {
            serde_json::Value::Array(items) => items.get(index),
            _ => None,
        }
    }

    fn for_each_member(self, visit: &mut dyn FnMut(&'a str, Self)) {
        if let serde_json::Value::Object(map) = self {
            for (name, value) in map {
                visit(name.as_str(), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the serde_json view reports kinds, walks dotted paths and keeps member order.
    #[test]
    fn serde_json_view() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"b":1,"a":{"City":"Oslo"},"f":1.5,"big":18446744073709551615}"#,
        )
        .expect("valid json");
        let doc = &v;
        assert_eq!(doc.kind(), ValueKind::Object);
        assert_eq!(doc.path(&["a", "City"]).and_then(|c| c.as_str()), Some("Oslo"));
        assert!(doc.path(&["a", "city"]).is_none(), "field names are case-sensitive");
        assert_eq!(doc.field("b").map(|b| b.kind()), Some(ValueKind::Int));
        assert_eq!(doc.field("f").map(|f| f.kind()), Some(ValueKind::Float));
        assert_eq!(doc.field("big").map(|f| f.kind()), Some(ValueKind::Float));
        let mut names = Vec::new();
        doc.for_each_member(&mut |name, _| names.push(name.to_owned()));
        assert_eq!(names, ["b", "a", "f", "big"], "stored order is kept");
    }
}
