//! Parsing `#[retry(...)]`'s arguments: one setter per option, spans kept for every error.
//!
//! This file only reads what was written: a key it knows, a value of the right *kind*
//! (integer literal or `const` path, string, function path). Whether a number is acceptable
//! is `valid.rs`'s question, so that all the O3 rules live in one place.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Path, UnOp};

use super::Errors;

/// Every option, in the order the docs list them.
pub(crate) const OPTIONS: [&str; 10] = [
    "max_attempts",
    "base_delay_ms",
    "max_delay_ms",
    "jitter",
    "when",
    "notify",
    "deadline_ms",
    "attempt_timeout_ms",
    "defaults",
    "crate",
];

/// The jitter names, as `retry_core::Jitter` spells them (a test keeps the two in step).
pub(crate) const JITTERS: [&str; 4] = ["full", "equal", "decorrelated", "none"];

/// An option as written: its key (for spans and messages) and its value.
pub(crate) struct Opt<T> {
    pub(crate) key: Ident,
    pub(crate) value: T,
    /// Its position in the attribute, so that errors are reported in the order written.
    pub(crate) index: usize,
}

/// A number option's value.
pub(crate) enum Number {
    /// A literal, possibly negative or fractional; checked against the O3 rules in `valid.rs`.
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
    /// An integer literal; `None` when it does not even fit in an `i128`.
    Int(Option<i128>),
    /// A float literal.
    Float(f64),
}

/// The arguments of one `#[retry(...)]`, each set at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) max_attempts: Option<Opt<Number>>,
    pub(crate) base_delay_ms: Option<Opt<Number>>,
    pub(crate) max_delay_ms: Option<Opt<Number>>,
    pub(crate) jitter: Option<Opt<Ident>>,
    pub(crate) when: Option<Opt<ExprPath>>,
    pub(crate) notify: Option<Opt<ExprPath>>,
    pub(crate) deadline_ms: Option<Opt<Number>>,
    pub(crate) attempt_timeout_ms: Option<Opt<Number>>,
    pub(crate) defaults: Option<Opt<ExprPath>>,
    pub(crate) krate: Option<Opt<Path>>,
    /// The keys read so far, in order, valid or not: to reject a second one, and to number them.
    seen: Vec<String>,
}

impl Args {
    /// Parses `key = value, …`. Errors about one option are collected and parsing goes on
    /// with the next, so that one compile reports them all; only broken syntax stops it.
    pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
        let mut args = Args::default();
        let parser = syn::meta::parser(|meta| args.parse_one(meta, errors));
        if let Err(e) = syn::parse::Parser::parse2(parser, tokens) {
            errors.push(e);
        }
        args
    }

    fn parse_one(&mut self, meta: ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
        let Some(key) = meta
            .path
            .get_ident()
            .cloned()
            .or_else(|| keyword(&meta.path))
        else {
            return Err(meta.error(unknown_option(&meta.path.to_token_stream().to_string())));
        };
        let name = key.to_string();
        let index = self.seen.len();
        self.seen.push(name.clone());
        if !OPTIONS.contains(&name.as_str()) {
            // Skip the value so that the options after it are still read.
            if meta.input.peek(syn::Token![=]) {
                meta.value()?.parse::<Expr>()?;
            }
            errors.push_at(index, syn::Error::new(key.span(), unknown_option(&name)));
            return Ok(());
        }
        if !meta.input.peek(syn::Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("expected `{name} = …`: every option takes a value"),
            ));
        }
        let value: Expr = meta.value()?.parse()?;
        if self.seen[..index].contains(&name) {
            errors.push_at(
                index,
                syn::Error::new(
                    key.span(),
                    format!("duplicate option `{name}`: each option may be given once"),
                ),
            );
            return Ok(());
        }
        let set = match name.as_str() {
            "max_attempts" => set(&mut self.max_attempts, key, index, number(&name, value)),
            "base_delay_ms" => set(&mut self.base_delay_ms, key, index, number(&name, value)),
            "max_delay_ms" => set(&mut self.max_delay_ms, key, index, number(&name, value)),
            "deadline_ms" => set(&mut self.deadline_ms, key, index, number(&name, value)),
            "attempt_timeout_ms" => set(
                &mut self.attempt_timeout_ms,
                key,
                index,
                number(&name, value),
            ),
            "jitter" => set(&mut self.jitter, key, index, jitter(value)),
            "when" => set(
                &mut self.when,
                key,
                index,
                function(&name, "fn(&E, u32) -> bool", value),
            ),
            "notify" => set(
                &mut self.notify,
                key,
                index,
                function(&name, "fn(&E, u32, std::time::Duration)", value),
            ),
            "defaults" => set(&mut self.defaults, key, index, defaults(value)),
            _ => set(&mut self.krate, key, index, krate(value)),
        };
        if let Err(e) = set {
            errors.push_at(index, e);
        }
        Ok(())
    }
}

/// The one setter: stores a value of the right kind (a second one was rejected before).
fn set<T>(
    slot: &mut Option<Opt<T>>,
    key: Ident,
    index: usize,
    value: syn::Result<T>,
) -> syn::Result<()> {
    *slot = Some(Opt {
        key,
        value: value?,
        index,
    });
    Ok(())
}

/// `crate` is a keyword, so it is not an `Ident` path; every other key is.
fn keyword(path: &Path) -> Option<Ident> {
    let segment = path.segments.first()?;
    (path.segments.len() == 1 && segment.ident == "crate")
        .then(|| Ident::new("crate", segment.ident.span()))
}

fn unknown_option(name: &str) -> String {
    let valid = OPTIONS.map(|o| format!("`{o}`")).join(", ");
    match closest(name, &OPTIONS) {
        Some(guess) => {
            format!("unknown option `{name}`: did you mean `{guess}`? Expected one of {valid}")
        }
        None => format!("unknown option `{name}`: expected one of {valid}"),
    }
}

/// The candidate within two edits of `name`, for "did you mean".
fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, for suggestions only.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// An integer literal (`_` separators allowed), a negative or fractional one (for `valid.rs`
/// to reject with the O3 message), or a path to a `const`.
fn number(name: &str, value: Expr) -> syn::Result<Number> {
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
            LitValue::Int(if negative {
                magnitude.map(|m| -m)
            } else {
                magnitude
            })
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

fn expected_jitter() -> String {
    JITTERS.map(|j| format!("\"{j}\"")).join(", ")
}

/// `"full"`, `"equal"`, `"decorrelated"` or `"none"`, turned into the variant's name.
fn jitter(value: Expr) -> syn::Result<Ident> {
    let lit = match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit,
        Expr::Path(path)
            if path
                .path
                .get_ident()
                .is_some_and(|i| JITTERS.contains(&i.to_string().as_str())) =>
        {
            let name = path.to_token_stream().to_string();
            return Err(syn::Error::new_spanned(
                &value,
                format!("`jitter` takes a string: write `jitter = \"{name}\"`"),
            ));
        }
        _ => {
            return Err(syn::Error::new_spanned(
                &value,
                format!("`jitter` takes a string, one of {}", expected_jitter()),
            ));
        }
    };
    let name = lit.value();
    let variant = match name.as_str() {
        "full" => "Full",
        "equal" => "Equal",
        "decorrelated" => "Decorrelated",
        "none" => "None",
        _ => {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "unknown jitter \"{name}\": expected one of {}",
                    expected_jitter()
                ),
            ));
        }
    };
    Ok(Ident::new(variant, lit.span()))
}

/// `when` and `notify`: the path of a function (turbofish allowed).
fn function(name: &str, signature: &str, value: Expr) -> syn::Result<ExprPath> {
    match value {
        Expr::Path(path) => Ok(path),
        other => Err(syn::Error::new_spanned(
            other,
            format!(
                "`{name}` takes the path of a function `{signature}`, such as `{name} = is_transient`"
            ),
        )),
    }
}

/// `defaults`: the path of a `const` of type `RetryOptions`.
fn defaults(value: Expr) -> syn::Result<ExprPath> {
    match value {
        Expr::Path(path) => Ok(path),
        other => Err(syn::Error::new_spanned(
            other,
            "`defaults` takes the path of a `const` of type `retry_core::RetryOptions`, such as `defaults = Self::RETRY`",
        )),
    }
}

/// `crate = "…"`: where `retry_core` is, for a renamed dependency.
fn krate(value: Expr) -> syn::Result<Path> {
    let Expr::Lit(ExprLit {
        lit: Lit::Str(lit), ..
    }) = &value
    else {
        return Err(syn::Error::new_spanned(
            value,
            "`crate` takes a string with a path, such as `crate = \"my_retry_core\"`",
        ));
    };
    parse_crate(lit)
}

fn parse_crate(lit: &LitStr) -> syn::Result<Path> {
    lit.parse::<Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` must be a path, such as `crate = \"my_retry_core\"`; \"{}\" is not one",
                lit.value()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_close_names_only() {
        assert_eq!(closest("max_attempt", &OPTIONS), Some("max_attempts"));
        assert_eq!(closest("base_delay", &OPTIONS), None);
        assert_eq!(closest("jiter", &OPTIONS), Some("jitter"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn jitter_names_match_the_runtime() {
        let runtime: Vec<&str> = retry_core::Jitter::ALL.iter().map(|j| j.name()).collect();
        assert_eq!(runtime, JITTERS);
    }
}
