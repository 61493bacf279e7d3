//! The function under `#[retry]`, checked for the shape a retried body needs: a `Result`, a
//! receiver that can be lent to every attempt, and — for a plain (blocking) `fn` — no limit
//! that would have to cut a running body short.

use syn::{FnArg, ReceiverKind, Type};

use super::valid::Options;
use crate::errors::Errors;
use crate::function::{Function, from_async_trait, peel, result_type};

/// Records every reason `function` cannot be retried as written under `options` (`None`
/// when the options themselves had errors).
pub(crate) fn check(function: &Function, options: Option<&Options>, errors: &mut Errors) {
    let sig = &function.sig;
    if from_async_trait(sig) {
        errors.push(syn::Error::new_spanned(sig.fn_token, ASYNC_TRAIT));
        return;
    }
    if sig.asyncness.is_none() {
        if let Some(limit) = options.and_then(|o| o.attempt_timeout.as_ref()) {
            errors.push(syn::Error::new(limit.key.span(), BLOCKING_TIMEOUT));
        }
    }
    if let Err(not_result) = result_type(sig) {
        errors.push(not_result.error(sig, "retry", "an error is what tells it to try again"));
    }
    for input in &sig.inputs {
        let FnArg::Receiver(receiver) = input else {
            continue;
        };
        let borrowed = match &receiver.kind {
            ReceiverKind::Reference(..) => true,
            ReceiverKind::Typed(_, ty) => matches!(peel(ty), Type::Reference(_)),
            _ => false,
        };
        if !borrowed {
            errors.push(syn::Error::new_spanned(
                receiver,
                "`#[retry]` runs the body once per attempt, so it cannot take `self` by value: take `&self` or `&mut self`",
            ));
        }
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            "`#[retry]` does not support variadic functions",
        ));
    }
}

/// `#[async_trait]` has rewritten the method before `#[retry]` sees it.
const ASYNC_TRAIT: &str = "`#[retry]` does not support `#[async_trait]` methods: `#[async_trait]` has already turned this `async fn` into a boxed future. Use an `async fn` in the trait (stable since Rust 1.75) or call a `#[retry]` inherent method from this one";

/// `attempt_timeout_ms` on a blocking function.
const BLOCKING_TIMEOUT: &str = "`attempt_timeout_ms` needs an `async fn`: a blocking call cannot be cut short. Use `deadline_ms`, which is checked before each attempt and each wait";
