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
