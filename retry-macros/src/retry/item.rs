//! The function under `#[retry]`, checked for the shape a retried body needs: an `async fn`,
//! a `Result`, a receiver that can be lent to every attempt.

use syn::{FnArg, ReceiverKind, Signature, Type};

use crate::errors::Errors;
use crate::function::{Function, from_async_trait, peel, result_type};

/// Records every reason `function` cannot be retried as written.
pub(crate) fn check(function: &Function, errors: &mut Errors) {
    let sig = &function.sig;
    if sig.asyncness.is_none() {
        errors.push(not_async(sig));
        if from_async_trait(sig) {
            return;
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

/// A function that is not `async`, with a special word for `#[async_trait]`'s output.
fn not_async(sig: &Signature) -> syn::Error {
    let message = if from_async_trait(sig) {
        "`#[retry]` does not support `#[async_trait]` methods: `#[async_trait]` has already turned this `async fn` into a boxed future. Use an `async fn` in the trait (stable since Rust 1.75) or call a `#[retry]` inherent method from this one"
    } else {
        "`#[retry]` works on an `async fn` only: add `async`, or retry a future yourself with `RetryPolicy::retry`"
    };
    syn::Error::new_spanned(sig.fn_token, message)
}
