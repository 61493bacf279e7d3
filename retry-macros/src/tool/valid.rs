//! The rules of a tool declaration, checked while the user is still typing: a name the
//! runtime accepts, a positive timeout, a function the runner can call with JSON arguments,
//! an idempotency key wherever a write claims to be idempotent, and no `#[retry]`
//! around a side effect — found by `#[retry]`'s mark in the function (see
//! `marks.rs`), here when `#[retry]` expanded first, in `check.rs` when it expands after.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::{FnArg, GenericParam, Ident, LitStr, Pat, Path, Safety, Type};

use super::args::{Args, ToolEffect};
use crate::errors::Errors;
use crate::function::{Function, from_async_trait, peel, result_type};
use crate::number::{Rule, Value, field, not_positive};
use crate::options::Opt;

/// `timeout_ms`'s rule, with messages in the style of the runtime's option errors.
const TIMEOUT: Rule = Rule {
    not_positive: TIMEOUT_NOT_POSITIVE,
    not_integer: "tool.timeout_ms must be an integer",
    too_small: not_positive,
    max: u64::MAX,
    name: "tool.timeout_ms",
};

/// The expansion needs it for a `const` path.
pub(crate) const TIMEOUT_NOT_POSITIVE: &str = "tool.timeout_ms must be > 0";

/// A tool declaration that passed every check a macro can make.
pub(crate) struct Tool {
    /// The name the model calls it by.
    pub(crate) name: String,
    /// `None` when undeclared: the runtime's default, a side effect.
    pub(crate) effect: Option<ToolEffect>,
    pub(crate) requires_approval: bool,
    pub(crate) timeout: Value<u64>,
    pub(crate) krate: Option<Path>,
    /// The function's parameters, in order.
    pub(crate) params: Vec<Param>,
}

/// What the runner hands one parameter of the function.
pub(crate) struct Param {
    pub(crate) kind: Kind,
    /// Whether the function takes it by value, `&` or `&mut`.
    pub(crate) pass: Pass,
}

pub(crate) enum Kind {
    /// A field of the call's JSON object, named after the parameter; `ty` is the type without
    /// the outer reference.
    Arg { ident: Ident, ty: Box<Type> },
    /// The call's `IdempotencyKey`.
    Key,
    /// The call's `ToolContext`.
    Context,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    Value,
    Ref,
    RefMut,
}

impl Tool {
    /// Checks the options, the function, and the two together. Every failure is recorded;
    /// `None` if there was one.
    /// `retried`: a `#[retry]` already expanded on the function (it was written above this
    /// attribute, however spelled).
    pub(crate) fn check(
        args: Args,
        function: &Function,
        retried: bool,
        errors: &mut Errors,
    ) -> Option<Tool> {
        let before = errors.len();
        // Whether the options parsed: an effect lost to a typo is not "undeclared".
        let options_parsed = errors.is_empty();
        let timeout = field(args.timeout_ms, &TIMEOUT, errors).value;
        let name = tool_name(args.name.as_ref(), &function.sig.ident, errors);
        let params = signature(function, errors);
        let effect = args.effect.as_ref().map(|opt| opt.value.effect);
        if effect == Some(ToolEffect::IdempotentWrite) {
            key_taken(function, errors);
        }
        if retried && (effect.is_some() || options_parsed) {
            if let Some(message) = retry_conflict(effect) {
                // At the effect, or at this `#[tool]` when there is none.
                let at = args
                    .effect
                    .as_ref()
                    .map_or_else(Span::call_site, |opt| opt.value.lit.span());
                errors.push(syn::Error::new(at, message));
            }
        }
        (errors.len() == before).then(|| Tool {
            name,
            effect,
            requires_approval: args.requires_approval.is_some_and(|opt| opt.value),
            timeout,
            krate: args.krate.map(|opt| opt.value),
            params,
        })
    }
}

/// Why `#[retry]` cannot wrap a tool declared `effect` (`None`: undeclared), if it cannot.
pub(crate) fn retry_conflict(effect: Option<ToolEffect>) -> Option<String> {
    let (what, declare) = match effect {
        Some(ToolEffect::Read | ToolEffect::IdempotentWrite) => return None,
        Some(ToolEffect::SideEffect) => ("a `side-effect` tool:", "Declare"),
        None => (
            "this tool: it declares no effect, so it is a `side-effect` tool, and",
            "Declare `effect = \"read\"` if it changes nothing, or",
        ),
    };
    Some(format!(
        "`#[retry]` cannot wrap {what} a retry may repeat an effect that already happened when only its answer was lost (nothing promises exactly-once: see `retry_toolkit::effects`). \
         {declare} `effect = \"idempotent-write\"` and pass the tool's `IdempotencyKey` to the system it writes to, so that a repeat is recognised there; \
         or remove `#[retry]` and leave an unknown outcome to reconciliation"
    ))
}

/// The tool's name: `name = "…"` or the function's, in the runtime's alphabet.
fn tool_name(given: Option<&Opt<LitStr>>, ident: &Ident, errors: &mut Errors) -> String {
    let (name, span, index) = match given {
        Some(opt) => (opt.value.value(), opt.value.span(), opt.index),
        None => (ident.unraw().to_string(), ident.span(), usize::MAX),
    };
    if !valid_name(&name) {
        let mut message = invalid_name(&name);
        if given.is_none() {
            message.push_str("; choose one with `name = \"…\"`");
        }
        errors.push_at(index, syn::Error::new(span, message));
    }
    name
}

/// The rule `Toolbox::register` applies: 1 to 64 of `[A-Za-z0-9_-]`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `ToolboxError::InvalidName`'s message (a test keeps them in step).
fn invalid_name(name: &str) -> String {
    format!("`{name}` is not a valid tool name: use 1 to 64 of `A-Z`, `a-z`, `0-9`, `_`, `-`")
}

/// Records every reason the runner cannot call `function` as a tool, and reads its parameters.
fn signature(function: &Function, errors: &mut Errors) -> Vec<Param> {
    let sig = &function.sig;
    let async_trait = from_async_trait(sig);
    if sig.asyncness.is_none() && !async_trait {
        errors.push(syn::Error::new_spanned(
            sig.fn_token,
            "`#[tool]` works on an `async fn` only: add `async`",
        ));
    }
    match result_type(sig) {
        Ok(output) if mentions_impl(output) => errors.push(syn::Error::new_spanned(
            output,
            "`#[tool]` needs the output and error types by name, for the tool's descriptor: replace `impl Trait` with the type",
        )),
        Ok(_) => {}
        Err(_) if async_trait => {}
        Err(not_result) => errors.push(not_result.error(
            sig,
            "tool",
            "`T` is the tool's output, stored as JSON, and `E` its failure, whose `Display` the model reads",
        )),
    }
    if let Safety::Unsafe(unsafety) = &sig.safety {
        errors.push(syn::Error::new_spanned(
            unsafety,
            "`#[tool]` does not support `unsafe fn`: the runner calls the tool with no way to uphold its safety contract",
        ));
    }
    for param in &sig.generics.params {
        let what = match param {
            GenericParam::Lifetime(_) => continue,
            GenericParam::Type(_) => "type",
            GenericParam::Const(_) => "const",
        };
        errors.push(syn::Error::new_spanned(
            param,
            format!(
                "`#[tool]` does not support {what} parameters: a tool has one set of arguments, read from JSON, and one output. Declare a tool for each concrete type"
            ),
        ));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            "`#[tool]` does not support variadic functions",
        ));
    }
    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => errors.push(syn::Error::new_spanned(
                receiver,
                "`#[tool]` goes on a free `async fn`, not on a method: the tool it declares is a value of its own, with no `self` to call the method on. \
                 For a tool with state, implement `retry_toolkit::effects::Tool` for your type, or pass a closure that captures the state to `retry_toolkit::effects::tool_fn`",
            )),
            FnArg::Typed(typed) => match param(&typed.pat, &typed.ty) {
                Ok(param) => params.push(param),
                Err(e) => errors.push(e),
            },
        }
    }
    params
}

/// One typed parameter: the key, the context, or a named argument read from JSON.
fn param(pat: &Pat, ty: &Type) -> syn::Result<Param> {
    let (pass, referent) = match peel(ty) {
        Type::Reference(reference) if reference.mutability.is_some() => {
            (Pass::RefMut, &*reference.elem)
        }
        Type::Reference(reference) => (Pass::Ref, &*reference.elem),
        other => (Pass::Value, other),
    };
    let kind = match last_segment(referent) {
        Some(name) if name == "IdempotencyKey" => Kind::Key,
        Some(name) if name == "ToolContext" => Kind::Context,
        _ => {
            if mentions_impl(ty) {
                return Err(syn::Error::new_spanned(
                    ty,
                    "`#[tool]` does not support `impl Trait` arguments: each argument is read from JSON into one concrete type",
                ));
            }
            let Pat::Ident(binding) = pat else {
                return Err(syn::Error::new_spanned(
                    pat,
                    "`#[tool]` needs a name for this parameter: the model passes a tool's arguments as a JSON object, one field per parameter, named after it",
                ));
            };
            Kind::Arg {
                ident: binding.ident.clone(),
                ty: Box::new(referent.clone()),
            }
        }
    };
    Ok(Param { kind, pass })
}

/// The last segment of a plain path type, without generic arguments: how the key and the
/// context are recognised (`IdempotencyKey`, `effects::IdempotencyKey`).
fn last_segment(ty: &Type) -> Option<&Ident> {
    let Type::Path(path) = peel(ty) else {
        return None;
    };
    let last = path.path.segments.last()?;
    (path.qself.is_none() && last.arguments.is_none()).then_some(&last.ident)
}

fn mentions_impl(ty: &Type) -> bool {
    fn any_impl(tokens: proc_macro2::TokenStream) -> bool {
        tokens.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(ident) => ident == "impl",
            proc_macro2::TokenTree::Group(group) => any_impl(group.stream()),
            _ => false,
        })
    }
    any_impl(quote::ToTokens::to_token_stream(ty))
}

/// An `idempotent-write` tool must take the key, and not drop it: a key the tool
/// ignores deduplicates nothing.
fn key_taken(function: &Function, errors: &mut Errors) {
    let sig = &function.sig;
    let mut keys = sig.inputs.iter().filter_map(|input| match input {
        FnArg::Typed(typed) if is_key(&typed.ty) => Some(&*typed.pat),
        _ => None,
    });
    match keys.next() {
        None => errors.push(syn::Error::new(
            sig.paren_token.span.join(),
            "an `idempotent-write` tool must take the idempotency key: add a parameter `key: IdempotencyKey` and pass the key to the system it writes to. A key the tool ignores deduplicates nothing",
        )),
        Some(pat @ Pat::Wild(_)) => errors.push(syn::Error::new_spanned(
            pat,
            "this parameter drops the idempotency key, but an `idempotent-write` tool must pass it to the system it writes to: name it (`key: IdempotencyKey`) and use it",
        )),
        Some(_) => {}
    }
}

fn is_key(ty: &Type) -> bool {
    let referent = match peel(ty) {
        Type::Reference(reference) => &*reference.elem,
        other => other,
    };
    last_segment(referent).is_some_and(|name| name == "IdempotencyKey")
}

#[cfg(test)]
mod tests {
    use retry_toolkit::effects::{ToolContext, ToolSpec, Toolbox, ToolboxError, tool_fn};

    use super::*;

    #[test]
    fn x3_retry_conflict_names_the_effect() {
        let side_effect = retry_conflict(Some(ToolEffect::SideEffect)).unwrap();
        assert!(side_effect.starts_with("`#[retry]` cannot wrap a `side-effect` tool"));
        let undeclared = retry_conflict(None).unwrap();
        assert!(undeclared.contains("it declares no effect"));
        assert_eq!(retry_conflict(Some(ToolEffect::Read)), None);
        assert_eq!(retry_conflict(Some(ToolEffect::IdempotentWrite)), None);
    }

    #[test]
    fn tool_names_follow_the_toolbox() {
        for name in ["send_email", "a", "get-page-2", &"x".repeat(64)] {
            assert!(valid_name(name), "{name}");
        }
        for name in ["", "météo", "send email", "a.b", &"x".repeat(65)] {
            assert!(!valid_name(name), "{name}");
        }
        let bad = tool_fn(ToolSpec::new("a.b"), |_: (), _: ToolContext| async {
            Ok::<_, String>(())
        });
        let runtime = Toolbox::new().with(bad).unwrap_err();
        assert_eq!(runtime, ToolboxError::InvalidName("a.b"));
        assert_eq!(invalid_name("a.b"), runtime.to_string());
    }
}
