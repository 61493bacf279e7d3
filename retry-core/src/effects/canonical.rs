//! Canonical JSON, the text an [`ArgsHash`](super::ArgsHash) is the SHA-256 of: no
//! whitespace, object members sorted by the bytes of their keys, strings and numbers as
//! `serde_json` writes them.
//!
//! Written without recursion (arguments built in code can nest deeper than the stack would
//! like), and without allocating for what most tool arguments are — a scalar, or an object or
//! array of scalars whose members come sorted already (`serde_json`'s default map is sorted).

use std::io;

use serde_json::{Map, Value};

/// Writes `value` as canonical JSON into `out`.
pub(crate) fn write<F: FnMut(&[u8])>(value: &Value, out: &mut F) {
    let mut stack = Vec::new();
    let mut next = Some(Step::Value(value));
    while let Some(step) = next.take().or_else(|| stack.pop()) {
        match step {
            Step::Text(text) => out(text.as_bytes()),
            Step::Key(key) => {
                string(key, out);
                out(b":");
            }
            Step::Value(Value::Array(items)) if items.iter().all(is_scalar) => {
                out(b"[");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out(b",");
                    }
                    scalar(item, out);
                }
                out(b"]");
            }
            Step::Value(Value::Array(items)) => {
                out(b"[");
                stack.push(Step::Text("]"));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Step::Value(item));
                    if i > 0 {
                        stack.push(Step::Text(","));
                    }
                }
            }
            Step::Value(Value::Object(members)) if is_sorted(members) => {
                object(members.iter(), &mut stack, out);
            }
            Step::Value(Value::Object(members)) => {
                let mut sorted: Vec<_> = members.iter().collect();
                sorted.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                object(sorted.into_iter(), &mut stack, out);
            }
            Step::Value(value) => scalar(value, out),
        }
    }
}

/// What is left to write.
enum Step<'a> {
    Value(&'a Value),
    Text(&'static str),
    Key(&'a str),
}

/// An object's `members`, in canonical order: written at once if they are all scalars,
/// otherwise pushed (last first) for the loop to write.
fn object<'a, I, F>(members: I, stack: &mut Vec<Step<'a>>, out: &mut F)
where
    I: DoubleEndedIterator<Item = (&'a String, &'a Value)> + ExactSizeIterator + Clone,
    F: FnMut(&[u8]),
{
    out(b"{");
    if members.clone().all(|(_, value)| is_scalar(value)) {
        for (i, (key, value)) in members.enumerate() {
            if i > 0 {
                out(b",");
            }
            string(key, out);
            out(b":");
            scalar(value, out);
        }
        out(b"}");
        return;
    }
    stack.push(Step::Text("}"));
    for (i, (key, value)) in members.enumerate().rev() {
        stack.push(Step::Value(value));
        stack.push(Step::Key(key));
        if i > 0 {
            stack.push(Step::Text(","));
        }
    }
}

/// Whether the members' keys come in canonical order already (always, with `serde_json`'s
/// default map; not with its `preserve_order` feature).
fn is_sorted(members: &Map<String, Value>) -> bool {
    let mut keys = members.keys();
    let Some(mut previous) = keys.next() else {
        return true;
    };
    keys.all(|key| {
        let ordered = previous.as_bytes() < key.as_bytes();
        previous = key;
        ordered
    })
}

fn is_scalar(value: &Value) -> bool {
    !matches!(value, Value::Array(_) | Value::Object(_))
}

/// Writes a value that is not an array or an object.
fn scalar<F: FnMut(&[u8])>(value: &Value, out: &mut F) {
    match value {
        Value::Null => out(b"null"),
        Value::Bool(b) => out(if *b { b"true" } else { b"false" }),
        // What `serde_json` writes, straight from `itoa` or `ryu` (the same text as
        // `Display`, without the formatting machinery).
        Value::Number(n) => {
            if serde_json::to_writer(Sink(out), n).is_err() {
                out(n.to_string().as_bytes());
            }
        }
        Value::String(s) => string(s, out),
        // Not scalars: written by `write`, never handed here.
        Value::Array(_) | Value::Object(_) => {}
    }
}

/// Writes `s` escaped, as `serde_json` does.
fn string<F: FnMut(&[u8])>(s: &str, out: &mut F) {
    // Writing a `str` into a sink that never fails cannot fail; if it somehow did, the
    // escaped debug form still makes the hash depend on every byte of `s`.
    if serde_json::to_writer(Sink(out), s).is_err() {
        out(format!("{s:?}").as_bytes());
    }
}

/// Hands what `serde_json` writes straight on: a long string is escaped without a copy.
struct Sink<'a, F>(&'a mut F);

impl<F: FnMut(&[u8])> io::Write for Sink<'_, F> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        (self.0)(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(value: &Value) -> String {
        let mut bytes = Vec::new();
        write(value, &mut |b| bytes.extend_from_slice(b));
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn canonical_json_sorts_members_and_drops_whitespace() {
        let value = json!({"b": [1, {"z": null, "a": true}], "a": "x\"y", "é": 1.5});
        assert_eq!(
            canonical(&value),
            r#"{"a":"x\"y","b":[1,{"a":true,"z":null}],"é":1.5}"#
        );
        assert_eq!(canonical(&json!([])), "[]");
        assert_eq!(canonical(&json!({})), "{}");
    }

    /// The shortcuts (scalar members written at once, no sort of sorted keys) write what
    /// `serde_json` writes for its sorted map, flat or nested.
    #[test]
    fn canonical_json_is_serde_jsons_compact_text_of_a_sorted_map() {
        for value in [
            json!(null),
            json!("tab\there"),
            json!([1, "two", null, true, 2.5]),
            json!({"to": "ana@example.com", "subject": "invoice", "amount": 42}),
            json!({"a": [], "b": {}, "c": [[1], {"d": [2, {"e": "f"}]}], "g": 1}),
            json!([{"z": 1, "y": [true, false]}, [], [[]], "x"]),
        ] {
            assert_eq!(canonical(&value), value.to_string(), "{value}");
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_displays_them() {
        for n in [
            json!(0),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1.5),
            json!(-0.0),
            json!(0.1),
            json!(1e300),
            json!(f64::MIN_POSITIVE),
        ] {
            assert_eq!(canonical(&n), n.to_string());
        }
    }
}
