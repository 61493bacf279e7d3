//! Walking an error's `source()` chain: the tests that a store's error keeps the driver's.

use std::error::Error;

/// The first error of type `T` in `error`'s chain, `error` included, and how many links down.
pub(crate) fn find<'a, T: Error + 'static>(
    error: &'a (dyn Error + 'static),
) -> Option<(usize, &'a T)> {
    let mut next = Some(error);
    let mut depth = 0;
    while let Some(link) = next {
        if let Some(found) = link.downcast_ref::<T>() {
            return Some((depth, found));
        }
        next = link.source();
        depth += 1;
    }
    None
}
