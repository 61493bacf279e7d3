//! Numeric options (`max_attempts = 5`, `timeout_ms = TIMEOUT_MS`): an integer literal,
//! checked here against the option's rule with the runtime's message, or the path of a
//! `const`, which the expansion checks by const evaluation.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, UnOp};

use crate::errors::Errors;
use crate::options::Opt;

/// A number option's value as written.
pub(crate) enum Number {
    /// A literal, possibly negative or fractional; checked against its [`Rule`].
    Lit {
        value: LitValue,
        tokens: TokenStream,
    },
    /// A path to a `const`, checked by const evaluation in the expansion.
    Const(ExprPath),
}

/// The value of a numeric literal, sign included.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum LitValue {
    /// An integer literal; `None` when it is too large even for an `i128` (a negative one
    /// that large is `i128::MIN`: below every minimum, as it should be).
    Int(Option<i128>),
    /// A float literal.
    Float(f64),
}

/// An integer literal (`_` separators allowed), a negative or fractional one (for its
/// [`Rule`] to reject with the runtime's message), or a path to a `const`.
pub(crate) fn number(name: &str, value: Expr) -> syn::Result<Number> {
    let tokens = value.to_token_stream();
    let (negative, inner) = match &value {
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => (true, &*unary.expr),
        other => (false, other),
    };
    let value = match inner {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => {
            check_suffix(name, lit.suffix(), lit.span(), INT_SUFFIXES)?;
            let magnitude = lit.base10_parse::<i128>().ok();
            let value = if negative {
                Some(magnitude.map_or(i128::MIN, |m| -m))
            } else {
                magnitude
            };
            fits_suffix(name, value, lit.suffix(), &tokens)?;
            LitValue::Int(value)
        }
        Expr::Lit(ExprLit {
            lit: Lit::Float(lit),
            ..
        }) => {
            check_suffix(name, lit.suffix(), lit.span(), &["f32", "f64"])?;
            let magnitude = lit.base10_parse::<f64>()?;
            LitValue::Float(if negative { -magnitude } else { magnitude })
        }
        Expr::Path(path) if !negative => return Ok(Number::Const(path.clone())),
        _ => {
            return Err(syn::Error::new_spanned(
                tokens,
                format!(
                    "`{name}` takes an integer literal (such as `500` or `10_000`) or the path of a `const`"
                ),
            ));
        }
    };
    Ok(Number::Lit { value, tokens })
}

const INT_SUFFIXES: &[&str] = &[
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
];

/// Rejects `500ms`: the unit is in the option's name.
fn check_suffix(name: &str, suffix: &str, span: Span, allowed: &[&str]) -> syn::Result<()> {
    if suffix.is_empty() || allowed.contains(&suffix) {
        return Ok(());
    }
    Err(syn::Error::new(
        span,
        format!("`{name}` takes a plain number: remove the suffix `{suffix}`"),
    ))
}

/// Rejects `300u8`: a suffix says which type the literal is, so a value outside it is not
/// what was meant (and would not compile as Rust). `usize` and `isize` are taken as 64-bit.
fn fits_suffix(
    name: &str,
    value: Option<i128>,
    suffix: &str,
    tokens: &TokenStream,
) -> syn::Result<()> {
    let (min, max): (i128, i128) = match suffix {
        "" | "u128" | "i128" => return Ok(()),
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" | "usize" => (0, u64::MAX.into()),
        "i8" => (i8::MIN.into(), i8::MAX.into()),
        "i16" => (i16::MIN.into(), i16::MAX.into()),
        "i32" => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN.into(), i64::MAX.into()),
    };
    if value.is_some_and(|v| (min..=max).contains(&v)) {
        return Ok(());
    }
    let written = tokens.to_string().replace(' ', "");
    Err(syn::Error::new_spanned(
        tokens,
        format!(
            "`{name}` takes a plain number: `{written}` does not fit in `{suffix}`; remove the suffix `{suffix}`"
        ),
    ))
}

/// A numeric option's own rule, as its messages.
pub(crate) struct Rule {
    /// `< 1` for a count, `<= 0` for a duration.
    pub(crate) not_positive: &'static str,
    /// A fractional literal.
    pub(crate) not_integer: &'static str,
    /// Whether a float literal breaks the first rule (`< 1` for a count, `<= 0` for a delay).
    pub(crate) too_small: fn(f64) -> bool,
    /// The largest value the runtime type holds.
    pub(crate) max: u64,
    /// The option's name as the messages spell it (`retry.max_attempts`).
    pub(crate) name: &'static str,
}

/// [`Rule::too_small`] of a duration.
pub(crate) fn not_positive(f: f64) -> bool {
    f <= 0.0
}

/// An option's checked value.
pub(crate) enum Value<T> {
    /// Not given: a lower layer decides.
    Unset,
    /// A literal that passed its own rule.
    Lit(T),
    /// A `const` path, for the expansion to check.
    Const(ConstPath),
}

impl<T> Value<T> {
    pub(crate) fn as_const(&self) -> Option<&ConstPath> {
        match self {
            Value::Const(constant) => Some(constant),
            _ => None,
        }
    }
}

/// A path to a `const` and the key it was given for (the expansion types it there).
pub(crate) struct ConstPath {
    pub(crate) key: Ident,
    pub(crate) path: ExprPath,
}

/// A checked value with the span of what was written, for cross-field errors.
pub(crate) struct Checked<T> {
    pub(crate) value: Value<T>,
    /// The literal as written, and the option's position.
    pub(crate) tokens: Option<(TokenStream, usize)>,
}

impl<T> Checked<T> {
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Checked<U> {
        let value = match self.value {
            Value::Unset => Value::Unset,
            Value::Lit(v) => Value::Lit(f(v)),
            Value::Const(path) => Value::Const(path),
        };
        Checked {
            value,
            tokens: self.tokens,
        }
    }
}

/// One option against its own rule. A failure is recorded and the option treated as unset.
pub(crate) fn field(opt: Option<Opt<Number>>, rule: &Rule, errors: &mut Errors) -> Checked<u64> {
    let unset = Checked {
        value: Value::Unset,
        tokens: None,
    };
    let Some(opt) = opt else { return unset };
    match opt.value {
        Number::Const(path) => Checked {
            value: Value::Const(ConstPath { key: opt.key, path }),
            tokens: None,
        },
        Number::Lit { value, tokens } => match literal(value, rule) {
            Ok(v) => Checked {
                value: Value::Lit(v),
                tokens: Some((tokens, opt.index)),
            },
            Err(message) => {
                errors.push_at(opt.index, syn::Error::new_spanned(tokens, message));
                unset
            }
        },
    }
}

/// A rule's checks for one literal, in the order of the runtime's: below the minimum first,
/// then not an integer (every float literal), then above the maximum, with the runtime's
/// message `<name> must be <= <max>`.
///
/// A float literal too large for an `f64` (`1e400`) parses as infinity; it is a float
/// literal like any other, so it is "not an integer" — not "below the minimum".
pub(crate) fn literal(value: LitValue, rule: &Rule) -> Result<u64, String> {
    match value {
        LitValue::Int(Some(v)) if v < 1 => Err(rule.not_positive.to_owned()),
        LitValue::Int(v) => v
            .and_then(|v| u64::try_from(v).ok())
            .filter(|v| *v <= rule.max)
            .ok_or_else(|| format!("{} must be <= {}", rule.name, rule.max)),
        LitValue::Float(f) if f.is_nan() || (rule.too_small)(f) => {
            Err(rule.not_positive.to_owned())
        }
        LitValue::Float(_) => Err(rule.not_integer.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use retry_toolkit::OptionsError;

    use super::*;

    const ATTEMPTS: Rule = Rule {
        not_positive: "retry.max_attempts must be >= 1",
        not_integer: "retry.max_attempts must be an integer",
        too_small: |f| f < 1.0,
        max: u32::MAX as u64,
        name: "retry.max_attempts",
    };
    const DELAY: Rule = Rule {
        not_positive: "retry.base_delay_ms must be > 0",
        not_integer: "retry.base_delay_ms must be an integer",
        too_small: not_positive,
        max: u64::MAX,
        name: "retry.base_delay_ms",
    };

    #[test]
    fn o3_too_large_literals_say_the_runtime_maximum() {
        // The same text as the runtime's error for a document.
        assert_eq!(
            literal(LitValue::Int(Some(1 << 40)), &ATTEMPTS),
            Err(OptionsError::MaxAttemptsTooLarge.to_string())
        );
        assert_eq!(
            literal(LitValue::Int(None), &DELAY),
            Err(OptionsError::BaseDelayTooLarge.to_string())
        );
        assert_eq!(
            literal(LitValue::Int(Some(i128::from(u64::MAX))), &DELAY),
            Ok(u64::MAX)
        );
    }

    #[test]
    fn o3_a_float_literal_beyond_f64_is_not_an_integer() {
        // Regression: `1e400` parses as infinity and said "must be >= 1".
        assert_eq!(
            literal(LitValue::Float(f64::INFINITY), &ATTEMPTS),
            Err(OptionsError::MaxAttemptsNotInteger.to_string())
        );
        assert_eq!(
            literal(LitValue::Float(f64::NEG_INFINITY), &ATTEMPTS),
            Err(OptionsError::MaxAttemptsBelowOne.to_string())
        );
    }
}
