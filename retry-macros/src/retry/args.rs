//! Parsing `#[retry(...)]`'s arguments: one setter per option, spans kept for every error.
//!
//! This file only reads what was written: a key it knows, a value of the right *kind*
//! (integer literal or `const` path, string, function path). Whether a number is acceptable
//! is `valid.rs`'s question, so that all the validation rules live in one place.

use quote::ToTokens;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, Path};

use crate::errors::Errors;
use crate::number::{Number, number};
use crate::options::{self, Opt, krate};

/// Every option, in the order the docs list them.
pub(crate) const OPTIONS: [&str; 14] = [
    "max_attempts",
    "base_delay_ms",
    "max_delay_ms",
    "jitter",
    "when",
    "notify",
    "retry_after",
    "deadline_ms",
    "attempt_timeout_ms",
    "budget",
    "breaker",
    "breaker_counts",
    "defaults",
    "crate",
];

/// The signatures `when`, `notify` and `retry_after` take.
const WHEN: &str = "fn(&E, u32) -> bool";
const NOTIFY: &str = "fn(&E, u32, std::time::Duration)";
const RETRY_AFTER: &str = "fn(&E) -> Option<std::time::Duration>";
const BREAKER_COUNTS: &str = "fn(&E) -> bool";

/// The jitter names, as `retry_toolkit::Jitter` spells them (a test keeps the two in step).
pub(crate) const JITTERS: [&str; 4] = ["full", "equal", "decorrelated", "none"];

/// The arguments of one `#[retry(...)]`, each set at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) max_attempts: Option<Opt<Number>>,
    pub(crate) base_delay_ms: Option<Opt<Number>>,
    pub(crate) max_delay_ms: Option<Opt<Number>>,
    pub(crate) jitter: Option<Opt<Ident>>,
    pub(crate) when: Option<Opt<ExprPath>>,
    pub(crate) notify: Option<Opt<ExprPath>>,
    pub(crate) retry_after: Option<Opt<ExprPath>>,
    pub(crate) deadline_ms: Option<Opt<Number>>,
    pub(crate) attempt_timeout_ms: Option<Opt<Number>>,
    pub(crate) budget: Option<Opt<ExprPath>>,
    pub(crate) breaker: Option<Opt<ExprPath>>,
    pub(crate) breaker_counts: Option<Opt<ExprPath>>,
    pub(crate) defaults: Option<Opt<ExprPath>>,
    pub(crate) krate: Option<Opt<Path>>,
}

impl Args {
    /// Parses `key = value, …`, every error collected (see [`options::parse`]).
    pub(crate) fn parse(tokens: proc_macro2::TokenStream, errors: &mut Errors) -> Args {
        let mut args = Args::default();
        options::parse(tokens, &OPTIONS, errors, |name, at, value| match name {
            "max_attempts" => at.set(&mut args.max_attempts, number(name, value)),
            "base_delay_ms" => at.set(&mut args.base_delay_ms, number(name, value)),
            "max_delay_ms" => at.set(&mut args.max_delay_ms, number(name, value)),
            "deadline_ms" => at.set(&mut args.deadline_ms, number(name, value)),
            "attempt_timeout_ms" => at.set(&mut args.attempt_timeout_ms, number(name, value)),
            "jitter" => at.set(&mut args.jitter, jitter(value)),
            "when" => at.set(&mut args.when, function(name, WHEN, value)),
            "notify" => at.set(&mut args.notify, function(name, NOTIFY, value)),
            "retry_after" => at.set(&mut args.retry_after, function(name, RETRY_AFTER, value)),
            "budget" => at.set(&mut args.budget, shared(name, "RetryBudget", value)),
            "breaker" => at.set(&mut args.breaker, shared(name, "CircuitBreaker", value)),
            "breaker_counts" => at.set(
                &mut args.breaker_counts,
                function(name, BREAKER_COUNTS, value),
            ),
            "defaults" => at.set(&mut args.defaults, defaults(value)),
            _ => at.set(&mut args.krate, krate(value)),
        });
        args
    }
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

/// `when`, `notify` and `retry_after`: the path of a function (turbofish allowed).
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

/// `budget` and `breaker`: the path of a `static` shared by every call.
fn shared(name: &str, ty: &str, value: Expr) -> syn::Result<ExprPath> {
    match value {
        Expr::Path(path) => Ok(path),
        other => Err(syn::Error::new_spanned(
            other,
            format!(
                "`{name}` takes the path of a `static` of type `retry_toolkit::{ty}`, shared by every call, such as `{name} = PAYMENTS`"
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
            "`defaults` takes the path of a `const` of type `retry_toolkit::RetryOptions`, such as `defaults = Self::RETRY`",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_names_match_the_runtime() {
        let runtime: Vec<&str> = retry_toolkit::Jitter::ALL
            .iter()
            .map(|j| j.name())
            .collect();
        assert_eq!(runtime, JITTERS);
    }
}
