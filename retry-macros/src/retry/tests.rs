//! Snapshots of the expansion, pretty-printed: any change to the generated code shows up as a
//! snapshot diff to review (`cargo insta review`).

use proc_macro2::TokenStream;
use quote::quote;

fn expand(args: TokenStream, item: TokenStream) -> String {
    crate::pretty(super::expand(args, item))
}

#[test]
fn x1_plain_fn() {
    insta::assert_snapshot!(expand(
        quote!(
            max_attempts = 5,
            base_delay_ms = 500,
            max_delay_ms = 10_000,
            jitter = "equal",
            when = is_transient,
            notify = log_retry
        ),
        quote! {
            /// Fetches a page.
            #[inline]
            pub async fn fetch(url: String, timeout: &Duration) -> Result<Page, FetchError> {
                let page = client().get(&url, *timeout).await?;
                Ok(page)
            }
        },
    ));
}

#[test]
fn x4_mut_self_method() {
    insta::assert_snapshot!(expand(
        quote!(
            defaults = Self::RETRY,
            deadline_ms = 2_000,
            attempt_timeout_ms = TIMEOUT_MS
        ),
        quote! {
            pub(crate) async fn next_batch(&mut self, mut limit: usize) -> Result<Vec<Item>, QueueError> {
                limit = limit.min(self.max);
                self.queue.pop(limit).await
            }
        },
    ));
}

#[test]
fn x4_generic_fn() {
    insta::assert_snapshot!(expand(
        quote!(max_attempts = MAX_ATTEMPTS, crate = "my_retry"),
        quote! {
            async fn call<'a, S, R>(service: &'a S, (id, tag): (u64, R), key: impl AsRef<str> + Clone) -> io::Result<S::Output>
            where
                S: Service + ?Sized,
                R: Clone,
            {
                #![allow(clippy::needless_borrow)]
                service.call(id, tag, key.as_ref()).await
            }
        },
    ));
}

#[test]
fn x2_errors_keep_the_function() {
    insta::assert_snapshot!(expand(
        quote!(max_attempts = 0, base_delay_ms = 2.5, bogus = 1),
        quote! {
            async fn untouched(x: u32) -> Result<u32, ()> { Ok(x) }
        },
    ));
}

#[test]
fn r9_blocking_fn() {
    insta::assert_snapshot!(expand(
        quote!(max_attempts = 4, deadline_ms = 2_000),
        quote! {
            /// Reads a register, blocking.
            pub fn read(&mut self, register: u8, label: String) -> Result<u16, DeviceError> {
                let value = self.bus.read(register)?;
                Ok(value)
            }
        },
    ));
}

#[test]
fn x4_ref_self_method() {
    insta::assert_snapshot!(expand(
        quote!(max_attempts = 3, attempt_timeout_ms = 100),
        quote! {
            async fn lookup(&self, key: &str, _: &Trace, label: String) -> Result<&str, LookupError> {
                self.table.get(key, &label).await
            }
        },
    ));
}

/// Bodies that lend nothing mutably hand the driver a closure (`run`); any `&mut` or a
/// reference bound `mut` keeps the loop (`attempt`), which lends the function's own bindings
/// to each attempt in turn. (`self` by value is refused before this choice.)
#[test]
fn x4_only_bodies_that_lend_nothing_mutably_get_a_closure() {
    let cases = [
        (
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
            true,
        ),
        (
            quote!(
                async fn f(a: u32, b: String) -> Result<(), E> {
                    Ok(())
                }
            ),
            true,
        ),
        (
            quote!(
                async fn f(mut a: u32) -> Result<(), E> {
                    Ok(())
                }
            ),
            true,
        ),
        (
            quote!(
                async fn f(&self, a: &str, _: &u8) -> Result<(), E> {
                    Ok(())
                }
            ),
            true,
        ),
        (
            quote!(
                async fn f<'a>(self: &'a Self) -> Result<(), E> {
                    Ok(())
                }
            ),
            true,
        ),
        (
            quote!(
                async fn f((a, b): (u32, u8)) -> Result<(), E> {
                    Ok(())
                }
            ),
            true,
        ),
        (
            quote!(
                async fn f(&mut self) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f(self: &mut Self) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f(mut self: &Self) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f(a: &mut Vec<u8>) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f<'a>(a: &'a mut u8) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f(a: Option<&mut u8>) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f(a: *mut u8) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f(mut a: &str) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
        (
            quote!(
                async fn f(&(a, b): &(u8, u8)) -> Result<(), E> {
                    Ok(())
                }
            ),
            false,
        ),
    ];
    for (item, closure) in cases {
        let expanded = expand(quote!(max_attempts = 2), item.clone());
        assert_eq!(expanded.contains(".run("), closure, "{item}\n{expanded}");
        assert_eq!(
            expanded.contains(".attempt("),
            !closure,
            "{item}\n{expanded}"
        );
    }
}
