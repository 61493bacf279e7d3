//! The options' validation rules, applied while the user is still typing.
//!
//! Literals are checked here, each against its own rule, and then — after layering over the
//! built-in values, exactly as `RetryOptions::resolve` does — against the cross-field
//! rule: `#[retry(base_delay_ms = 5000)]` fails because the built-in `max_delay_ms` is 3000.
//! A value given as a `const` path, or a `defaults = PATH` layer, cannot be read by a macro;
//! the expansion checks those by const evaluation instead, with the same messages.

use syn::{ExprPath, Ident, Path};

use super::args::Args;
use crate::errors::Errors;
use crate::number::{Checked, ConstPath, Number, Rule, Value, field, not_positive};
use crate::options::Opt;

/// The built-in layer; `RetryOptions::BUILTIN` in retry-toolkit.
const BUILTIN_BASE_DELAY_MS: u64 = 100;
const BUILTIN_MAX_DELAY_MS: u64 = 3000;

/// The validation messages: `retry_toolkit::OptionsError`'s `Display` (a test keeps them in step).
pub(crate) const MAX_ATTEMPTS_BELOW_ONE: &str = "retry.max_attempts must be >= 1";
pub(crate) const MAX_ATTEMPTS_NOT_INTEGER: &str = "retry.max_attempts must be an integer";
pub(crate) const BASE_DELAY_NOT_POSITIVE: &str = "retry.base_delay_ms must be > 0";
pub(crate) const BASE_DELAY_NOT_INTEGER: &str = "retry.base_delay_ms must be an integer";
pub(crate) const MAX_DELAY_NOT_POSITIVE: &str = "retry.max_delay_ms must be > 0";
pub(crate) const MAX_DELAY_NOT_INTEGER: &str = "retry.max_delay_ms must be an integer";
pub(crate) const BASE_ABOVE_MAX: &str = "retry.base_delay_ms must be <= retry.max_delay_ms";

/// The shared protection: a budget's and a breaker's `static`, which errors count against
/// the breaker, and the key to report a missing `From<CircuitOpen>` at.
#[derive(Default)]
pub(crate) struct Protection {
    pub(crate) budget: Option<ExprPath>,
    pub(crate) breaker: Option<(Ident, ExprPath)>,
    pub(crate) breaker_counts: Option<ExprPath>,
}

/// A limit (`deadline_ms`, `attempt_timeout_ms`): its key, for spans, and its value.
pub(crate) struct Limit {
    pub(crate) key: Ident,
    pub(crate) value: Value<u64>,
}

/// Options that passed every check a macro can make.
pub(crate) struct Options {
    pub(crate) max_attempts: Value<u32>,
    pub(crate) base_delay_ms: Value<u64>,
    pub(crate) max_delay_ms: Value<u64>,
    pub(crate) jitter: Option<Ident>,
    pub(crate) when: Option<ExprPath>,
    pub(crate) notify: Option<ExprPath>,
    pub(crate) retry_after: Option<ExprPath>,
    pub(crate) deadline: Option<Limit>,
    pub(crate) attempt_timeout: Option<Limit>,
    pub(crate) protection: Protection,
    pub(crate) defaults: Option<ConstPath>,
    pub(crate) krate: Option<Path>,
}

const MAX_ATTEMPTS: Rule = Rule {
    not_positive: MAX_ATTEMPTS_BELOW_ONE,
    not_integer: MAX_ATTEMPTS_NOT_INTEGER,
    too_small: |f| f < 1.0,
    max: u32::MAX as u64,
    name: "retry.max_attempts",
};
const BASE_DELAY: Rule = Rule {
    not_positive: BASE_DELAY_NOT_POSITIVE,
    not_integer: BASE_DELAY_NOT_INTEGER,
    too_small: not_positive,
    max: u64::MAX,
    name: "retry.base_delay_ms",
};
const MAX_DELAY: Rule = Rule {
    not_positive: MAX_DELAY_NOT_POSITIVE,
    not_integer: MAX_DELAY_NOT_INTEGER,
    too_small: not_positive,
    max: u64::MAX,
    name: "retry.max_delay_ms",
};
const DEADLINE: Rule = Rule {
    not_positive: "retry.deadline_ms must be > 0",
    not_integer: "retry.deadline_ms must be an integer",
    too_small: not_positive,
    max: u64::MAX,
    name: "retry.deadline_ms",
};
const ATTEMPT_TIMEOUT: Rule = Rule {
    not_positive: "retry.attempt_timeout_ms must be > 0",
    not_integer: "retry.attempt_timeout_ms must be an integer",
    too_small: not_positive,
    max: u64::MAX,
    name: "retry.attempt_timeout_ms",
};

/// The messages of the limits, which the expansion needs for `const` paths.
pub(crate) const DEADLINE_NOT_POSITIVE: &str = DEADLINE.not_positive;
pub(crate) const ATTEMPT_TIMEOUT_NOT_POSITIVE: &str = ATTEMPT_TIMEOUT.not_positive;

impl Options {
    /// Checks every option on its own, then the cross-field rule when both delays are known.
    /// Every failure is recorded; `None` if there was one.
    pub(crate) fn check(args: Args, errors: &mut Errors) -> Option<Options> {
        let before = errors.len();
        let max_attempts = field(args.max_attempts, &MAX_ATTEMPTS, errors)
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX));
        let base_delay_ms = field(args.base_delay_ms, &BASE_DELAY, errors);
        let max_delay_ms = field(args.max_delay_ms, &MAX_DELAY, errors);
        let deadline = limit(args.deadline_ms, &DEADLINE, errors);
        let attempt_timeout = limit(args.attempt_timeout_ms, &ATTEMPT_TIMEOUT, errors);
        let protection = protection(args.budget, args.breaker, args.breaker_counts, errors);
        if errors.len() > before {
            return None;
        }
        let defaults = args.defaults.map(|o| ConstPath {
            key: o.key,
            path: o.value,
        });
        cross_field(&base_delay_ms, &max_delay_ms, defaults.is_some(), errors)?;
        Some(Options {
            max_attempts: max_attempts.value,
            base_delay_ms: base_delay_ms.value,
            max_delay_ms: max_delay_ms.value,
            jitter: args.jitter.map(|o| o.value),
            when: args.when.map(|o| o.value),
            notify: args.notify.map(|o| o.value),
            retry_after: args.retry_after.map(|o| o.value),
            deadline,
            attempt_timeout,
            protection,
            defaults,
            krate: args.krate.map(|o| o.value),
        })
    }
}

/// `breaker_counts` says which errors count against a breaker: without one it means nothing.
fn protection(
    budget: Option<Opt<ExprPath>>,
    breaker: Option<Opt<ExprPath>>,
    counts: Option<Opt<ExprPath>>,
    errors: &mut Errors,
) -> Protection {
    if let (Some(counts), None) = (&counts, &breaker) {
        errors.push_at(
            counts.index,
            syn::Error::new(
                counts.key.span(),
                "`breaker_counts` says which errors count against a `breaker`, and there is none: add `breaker = …` or remove it",
            ),
        );
    }
    Protection {
        budget: budget.map(|o| o.value),
        breaker: breaker.map(|o| (o.key, o.value)),
        breaker_counts: counts.map(|o| o.value),
    }
}

fn limit(opt: Option<Opt<Number>>, rule: &Rule, errors: &mut Errors) -> Option<Limit> {
    let key = opt.as_ref()?.key.clone();
    let checked = field(opt, rule, errors);
    Some(Limit {
        key,
        value: checked.value,
    })
}

/// The cross-field rule (base not above maximum) after layering over the built-in values, when the macro can see both
/// delays: each is a literal, or unset with no `defaults` layer under it.
fn cross_field(
    base: &Checked<u64>,
    max: &Checked<u64>,
    has_defaults: bool,
    errors: &mut Errors,
) -> Option<()> {
    let known = |c: &Checked<u64>, builtin: u64| match c.value {
        Value::Lit(v) => Some(v),
        Value::Unset if !has_defaults => Some(builtin),
        _ => None,
    };
    let (Some(b), Some(m)) = (
        known(base, BUILTIN_BASE_DELAY_MS),
        known(max, BUILTIN_MAX_DELAY_MS),
    ) else {
        return Some(());
    };
    if b <= m {
        return Some(());
    }
    // Point at the base delay when it was written, else at the ceiling that undercuts the
    // built-in base.
    // Both built-in values pass, so at least one delay was written.
    let Some((tokens, index)) = base.tokens.as_ref().or(max.tokens.as_ref()) else {
        return Some(());
    };
    errors.push_at(*index, syn::Error::new_spanned(tokens, BASE_ABOVE_MAX));
    None
}

#[cfg(test)]
mod tests {
    use retry_toolkit::OptionsError;

    use super::*;
    use crate::number::{LitValue, literal};

    #[test]
    fn o3_messages_match_the_runtime() {
        let pairs = [
            (MAX_ATTEMPTS_BELOW_ONE, OptionsError::MaxAttemptsBelowOne),
            (
                MAX_ATTEMPTS_NOT_INTEGER,
                OptionsError::MaxAttemptsNotInteger,
            ),
            (BASE_DELAY_NOT_POSITIVE, OptionsError::BaseDelayNotPositive),
            (BASE_DELAY_NOT_INTEGER, OptionsError::BaseDelayNotInteger),
            (MAX_DELAY_NOT_POSITIVE, OptionsError::MaxDelayNotPositive),
            (MAX_DELAY_NOT_INTEGER, OptionsError::MaxDelayNotInteger),
            (BASE_ABOVE_MAX, OptionsError::BaseAboveMax),
        ];
        for (ours, runtime) in pairs {
            assert_eq!(ours, runtime.to_string());
        }
    }

    #[test]
    fn o1_builtin_layer_matches_the_runtime() {
        assert_eq!(
            Some(BUILTIN_BASE_DELAY_MS),
            retry_toolkit::RetryOptions::BUILTIN.base_delay_ms
        );
        assert_eq!(
            Some(BUILTIN_MAX_DELAY_MS),
            retry_toolkit::RetryOptions::BUILTIN.max_delay_ms
        );
    }

    #[test]
    fn o3_literal_rules_in_order() {
        let check = |v| literal(v, &MAX_ATTEMPTS);
        assert_eq!(
            check(LitValue::Int(Some(0))).unwrap_err(),
            MAX_ATTEMPTS_BELOW_ONE
        );
        assert_eq!(
            check(LitValue::Int(Some(-1))).unwrap_err(),
            MAX_ATTEMPTS_BELOW_ONE
        );
        assert_eq!(
            check(LitValue::Float(0.5)).unwrap_err(),
            MAX_ATTEMPTS_BELOW_ONE
        );
        assert_eq!(
            check(LitValue::Float(-1.5)).unwrap_err(),
            MAX_ATTEMPTS_BELOW_ONE
        );
        assert_eq!(
            check(LitValue::Float(2.5)).unwrap_err(),
            MAX_ATTEMPTS_NOT_INTEGER
        );
        assert_eq!(check(LitValue::Int(Some(5))), Ok(5));
        assert_eq!(
            check(LitValue::Int(Some(1 << 40))).unwrap_err(),
            "retry.max_attempts must be <= 4294967295"
        );
        assert_eq!(
            check(LitValue::Int(None)).unwrap_err(),
            "retry.max_attempts must be <= 4294967295"
        );
        let delay = |v| literal(v, &BASE_DELAY);
        assert_eq!(
            delay(LitValue::Float(0.5)).unwrap_err(),
            BASE_DELAY_NOT_INTEGER
        );
        assert_eq!(
            delay(LitValue::Float(0.0)).unwrap_err(),
            BASE_DELAY_NOT_POSITIVE
        );
        assert_eq!(
            delay(LitValue::Int(Some(0))).unwrap_err(),
            BASE_DELAY_NOT_POSITIVE
        );
    }
}
