//! Limits on the JSON values the runner records, and walking them without recursion.
//!
//! Tool arguments come from a model or from code and can be nested arbitrarily deep. Much of
//! what one does with a [`serde_json::Value`] — cloning, comparing, dropping, deserializing it
//! into a tool's argument type — recurses once per level, on the stack of whatever thread
//! runs the call; 10,000 levels overflow a 2 MiB tokio worker stack and abort the process.
//! So the runner measures the depth with an explicit stack before it records or clones
//! anything, refuses what is deeper than [`MAX_JSON_DEPTH`], and takes a refused value apart
//! by hand instead of letting its recursive `Drop` run.

use std::cell::Cell;
use std::io;

use serde::Serialize;
use serde_json::Value;

use super::outcome::{FailureKind, ToolFailure};

/// How deeply the arguments and results of a tool call may be nested: 128 levels.
///
/// A scalar, an empty array and an empty object are one level; an array or object is one
/// level more than its deepest member. That is the limit `serde_json` applies when it parses
/// text (its default recursion limit), so any value it parsed from a model's output passes.
/// Deeper arguments are refused by [`ToolRunner::call`](super::ToolRunner::call) before
/// anything is recorded; deeper tool output ends the call with an invalid-output failure.
pub const MAX_JSON_DEPTH: usize = 128;

/// The children of one array or object still to visit.
enum Children<'a> {
    Array(std::slice::Iter<'a, Value>),
    Object(serde_json::map::Values<'a>),
}

impl<'a> Iterator for Children<'a> {
    type Item = &'a Value;

    fn next(&mut self) -> Option<&'a Value> {
        match self {
            Children::Array(items) => items.next(),
            Children::Object(members) => members.next(),
        }
    }
}

/// Whether `value` is nested more than `limit` levels deep. Iterative, and its memory is one
/// iterator per level (at most `limit + 1`), whatever the value's size.
pub(crate) fn exceeds_depth(value: &Value, limit: usize) -> bool {
    // Most arguments and results are a scalar, or an array or object of scalars (two
    // levels): no walk, no allocation for them.
    let flat = match value {
        Value::Array(items) => Some(items.iter().all(is_scalar)),
        Value::Object(members) => Some(members.values().all(is_scalar)),
        _ => None,
    };
    match flat {
        None => return limit == 0,
        Some(true) if limit >= 2 => return false,
        _ => {}
    }
    let mut open: Vec<Children<'_>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(value) = next.take() {
            // `value` is at level `open.len() + 1`.
            if open.len() >= limit {
                return true;
            }
            match value {
                Value::Array(items) if !items.is_empty() => {
                    open.push(Children::Array(items.iter()));
                }
                Value::Object(members) if !members.is_empty() => {
                    open.push(Children::Object(members.values()));
                }
                _ => {}
            }
        }
        let Some(children) = open.last_mut() else {
            return false;
        };
        match children.next() {
            Some(child) => next = Some(child),
            None => {
                open.pop();
            }
        }
    }
}

fn is_scalar(value: &Value) -> bool {
    !matches!(value, Value::Array(_) | Value::Object(_))
}

/// Drops `value` without recursing: `serde_json`'s own `Drop` descends once per level. Only
/// non-empty arrays and objects wait on the explicit stack; everything else is dropped where
/// it is found, so a long flat array is not copied onto it.
pub(crate) fn dismantle(value: Value) {
    let mut rest = vec![value];
    while let Some(value) = rest.pop() {
        let children: Box<dyn Iterator<Item = Value>> = match value {
            Value::Array(items) => Box::new(items.into_iter()),
            Value::Object(members) => Box::new(members.into_iter().map(|(_, v)| v)),
            _ => continue,
        };
        for child in children {
            match &child {
                Value::Array(items) if !items.is_empty() => rest.push(child),
                Value::Object(members) if !members.is_empty() => rest.push(child),
                _ => drop(child),
            }
        }
    }
}

/// Drops `value`: as usual if it is within [`MAX_JSON_DEPTH`] (the recursion is bounded),
/// taken apart by hand if not.
pub(crate) fn discard(value: Value) {
    if exceeds_depth(&value, MAX_JSON_DEPTH) {
        dismantle(value);
    }
}

/// A tool's typed output as JSON, unless it is nested more than [`MAX_JSON_DEPTH`] levels
/// deep: then an invalid-output failure that names the limit.
///
/// `serde_json::to_value` recurses once per level of the output, so the depth is measured
/// first, by serializing into nothing through a formatter that stops at the limit: that walk
/// recurses at most [`MAX_JSON_DEPTH`] levels, whatever the output. An output that is too
/// deep is not dropped either (its `Drop` would recurse as deep as it is nested): its memory
/// is leaked, once, for a call that failed.
pub(crate) fn bounded_value<T: Serialize>(output: T) -> Result<Value, ToolFailure> {
    let too_deep = Cell::new(false);
    let formatter = DepthLimit {
        open: 0,
        limit: MAX_JSON_DEPTH,
        too_deep: &too_deep,
    };
    let mut probe = serde_json::Serializer::with_formatter(io::sink(), formatter);
    if let Err(error) = output.serialize(&mut probe) {
        if too_deep.get() {
            std::mem::forget(output);
            return Err(ToolFailure::new(
                FailureKind::InvalidOutput,
                format!("the tool's output is nested more than {MAX_JSON_DEPTH} levels deep"),
            ));
        }
        return Err(ToolFailure::new(
            FailureKind::InvalidOutput,
            error.to_string(),
        ));
    }
    serde_json::to_value(output)
        .map_err(|e| ToolFailure::new(FailureKind::InvalidOutput, e.to_string()))
}

/// A JSON formatter that writes nothing of its own and fails as soon as a value would sit more
/// than `limit` levels deep (counted as [`MAX_JSON_DEPTH`] counts them), which ends the
/// serialization there.
struct DepthLimit<'a> {
    /// Arrays and objects open around the next value.
    open: usize,
    limit: usize,
    too_deep: &'a Cell<bool>,
}

impl DepthLimit<'_> {
    /// A value is about to be written inside the open arrays and objects.
    fn enter(&mut self) -> io::Result<()> {
        if self.open >= self.limit {
            self.too_deep.set(true);
            return Err(io::Error::other("nested too deep"));
        }
        Ok(())
    }

    fn open(&mut self) -> io::Result<()> {
        self.enter()?;
        self.open += 1;
        Ok(())
    }
}

impl serde_json::ser::Formatter for DepthLimit<'_> {
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open()?;
        writer.write_all(b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open = self.open.saturating_sub(1);
        writer.write_all(b"]")
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open()?;
        writer.write_all(b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open = self.open.saturating_sub(1);
        writer.write_all(b"}")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.enter()?;
        if first {
            Ok(())
        } else {
            writer.write_all(b",")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.enter()?;
        writer.write_all(b":")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        let mut value = json!(0);
        for _ in 1..depth {
            // Not `json!([value])`: that serializes `value` again, recursively.
            value = Value::Array(vec![value]);
        }
        value
    }

    #[test]
    fn depth_counts_levels_as_serde_json_parses_them() {
        assert!(!exceeds_depth(&json!(1), 1));
        assert!(!exceeds_depth(&json!([]), 1));
        assert!(exceeds_depth(&json!([1]), 1));
        assert!(!exceeds_depth(&json!({"a": [1, {"b": 2}]}), 4));
        assert!(exceeds_depth(&json!({"a": [1, {"b": 2}]}), 3));
        for depth in [127, 128, 129] {
            let value = nested(depth);
            assert_eq!(
                exceeds_depth(&value, MAX_JSON_DEPTH),
                depth > MAX_JSON_DEPTH
            );
            // Whatever serde_json parses with its default limit is within ours.
            let parsed = serde_json::from_str::<Value>(&value.to_string()).is_ok();
            assert!(!parsed || depth <= MAX_JSON_DEPTH, "{depth}");
        }
    }

    #[test]
    fn deep_values_are_measured_and_dropped_without_recursion() {
        let value = nested(200_000);
        assert!(exceeds_depth(&value, MAX_JSON_DEPTH));
        dismantle(value);
        let mut wide = serde_json::Map::new();
        wide.insert("a".into(), nested(300_000));
        wide.insert("b".into(), Value::Array(vec![nested(300_000), json!(1)]));
        dismantle(Value::Object(wide));
    }
}
