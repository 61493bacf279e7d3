//! Parsing `#[tool(...)]`'s arguments: what was written, with its spans. Whether the pieces
//! fit together (and fit the function) is `valid.rs`'s question.

use proc_macro2::TokenStream;
use syn::{Expr, ExprLit, Lit, LitStr, Path};

use crate::errors::Errors;
use crate::number::{Number, number};
use crate::options::{self, Opt, backticked, closest, krate, string};

/// Every option, in the order the docs list them.
pub(crate) const OPTIONS: [&str; 5] =
    ["effect", "name", "requires_approval", "timeout_ms", "crate"];

const NAME_TAKES: &str = "`name` takes a string, such as `name = \"send_email\"`";

/// A declared effect, as `retry_toolkit::effects::ToolEffect` names them (a test keeps the two
/// in step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ToolEffect {
    Read,
    IdempotentWrite,
    SideEffect,
}

impl ToolEffect {
    pub(crate) const ALL: [ToolEffect; 3] = [
        ToolEffect::Read,
        ToolEffect::IdempotentWrite,
        ToolEffect::SideEffect,
    ];

    /// The name `effect = "…"` takes.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            ToolEffect::Read => "read",
            ToolEffect::IdempotentWrite => "idempotent-write",
            ToolEffect::SideEffect => "side-effect",
        }
    }

    /// The variant of `ToolEffect`.
    pub(crate) const fn variant(self) -> &'static str {
        match self {
            ToolEffect::Read => "Read",
            ToolEffect::IdempotentWrite => "IdempotentWrite",
            ToolEffect::SideEffect => "SideEffect",
        }
    }
}

/// `effect = "…"` as written: the effect and the literal, for spans.
pub(crate) struct Declared {
    pub(crate) effect: ToolEffect,
    pub(crate) lit: LitStr,
}

/// The arguments of one `#[tool(...)]`, each set at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) effect: Option<Opt<Declared>>,
    pub(crate) name: Option<Opt<LitStr>>,
    pub(crate) requires_approval: Option<Opt<bool>>,
    pub(crate) timeout_ms: Option<Opt<Number>>,
    pub(crate) krate: Option<Opt<Path>>,
}

impl Args {
    /// Parses `key = value, …`, every error collected (see [`options::parse`]).
    pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
        let mut args = Args::default();
        options::parse(tokens, &OPTIONS, errors, |name, at, value| match name {
            "effect" => at.set(&mut args.effect, effect(value)),
            "name" => at.set(&mut args.name, string(value, NAME_TAKES)),
            "requires_approval" => at.set(&mut args.requires_approval, boolean(value)),
            "timeout_ms" => at.set(&mut args.timeout_ms, number(name, value)),
            _ => at.set(&mut args.krate, krate(value)),
        });
        args
    }
}

/// The valid effects, as the runtime's `UnknownEffect` lists them.
fn expected_effects() -> String {
    backticked(&ToolEffect::ALL.map(ToolEffect::name))
}

/// `"read"`, `"idempotent-write"` or `"side-effect"`.
fn effect(value: Expr) -> syn::Result<Declared> {
    let quoted = ToolEffect::ALL
        .map(|e| format!("\"{}\"", e.name()))
        .join(", ");
    let lit = string(value, &format!("`effect` takes a string, one of {quoted}"))?;
    let given = lit.value();
    match ToolEffect::ALL.into_iter().find(|e| e.name() == given) {
        Some(effect) => Ok(Declared { effect, lit }),
        None => Err(syn::Error::new(lit.span(), unknown_effect(&given))),
    }
}

/// The runtime's `UnknownEffect` message, with a guess when one is close.
fn unknown_effect(given: &str) -> String {
    let valid = expected_effects();
    match guess_effect(given) {
        Some(guess) => format!(
            "unknown tool effect `{given}`: did you mean `{}`? Expected one of {valid}",
            guess.name()
        ),
        None => format!("unknown tool effect `{given}`: expected one of {valid}"),
    }
}

/// The effect `given` most likely means: written in another case or with `_` (`SideEffect`,
/// `idempotent_write`), within two typos, or cut short (`idempotent`, `read-only`).
fn guess_effect(given: &str) -> Option<ToolEffect> {
    let normal: String = given
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    let names = ToolEffect::ALL.map(|e| e.name().replace('-', ""));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let by_spelling = closest(&normal, &names);
    let by_prefix = || {
        let mut found = names.iter().filter(|name| {
            let (short, long) = if name.len() < normal.len() {
                (**name, normal.as_str())
            } else {
                (normal.as_str(), **name)
            };
            short.len() >= 4 && long.starts_with(short)
        });
        match (found.next(), found.next()) {
            (Some(name), None) => Some(*name),
            _ => None,
        }
    };
    let name = by_spelling.or_else(by_prefix)?;
    ToolEffect::ALL
        .into_iter()
        .find(|e| e.name().replace('-', "") == name)
}

/// `true` or `false`.
fn boolean(value: Expr) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Ok(lit.value),
        other => Err(syn::Error::new_spanned(
            other,
            "`requires_approval` takes `true` or `false`",
        )),
    }
}

#[cfg(test)]
mod tests {
    use retry_toolkit::effects::ToolEffect as Runtime;

    use super::*;

    #[test]
    fn a2_effect_names_match_the_runtime() {
        let runtime: Vec<&str> = Runtime::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(runtime, ToolEffect::ALL.map(ToolEffect::name));
        for effect in ToolEffect::ALL {
            assert_eq!(
                format!("{:?}", effect.name().parse::<Runtime>().unwrap()),
                effect.variant()
            );
        }
    }

    #[test]
    fn x3_unknown_effect_message_is_the_runtimes() {
        let runtime = "write".parse::<Runtime>().unwrap_err().to_string();
        assert_eq!(unknown_effect("write"), runtime);
    }

    #[test]
    fn x3_guesses_close_spellings_only() {
        let guess = |s| guess_effect(s).map(ToolEffect::name);
        assert_eq!(guess("idempotent_write"), Some("idempotent-write"));
        assert_eq!(guess("IdempotentWrite"), Some("idempotent-write"));
        assert_eq!(guess("SideEffect"), Some("side-effect"));
        assert_eq!(guess("side-efect"), Some("side-effect"));
        assert_eq!(guess("reads"), Some("read"));
        assert_eq!(guess("read-only"), Some("read"));
        assert_eq!(guess("idempotent"), Some("idempotent-write"));
        assert_eq!(guess("write"), None);
        assert_eq!(guess("pure"), None);
        assert_eq!(guess(""), None);
    }
}
