//! [`ToolEffect`]: what a tool does to the world, declared up front.

use std::fmt;
use std::str::FromStr;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// What running a tool does to the world outside the process.
///
/// The runtime decides what it may repeat from this declaration alone, so the default is the
/// most careful one: a tool that says nothing is a [`SideEffect`](ToolEffect::SideEffect). A
/// forgotten declaration costs a manual reconciliation, never a second e-mail.
///
/// The serialized names are the ones `#[tool(effect = "...")]` accepts:
///
/// ```
/// use retry_toolkit::effects::ToolEffect;
///
/// assert_eq!(ToolEffect::default(), ToolEffect::SideEffect);
/// assert_eq!("idempotent-write".parse::<ToolEffect>(), Ok(ToolEffect::IdempotentWrite));
/// let err = "write".parse::<ToolEffect>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "unknown tool effect `write`: expected one of `read`, `idempotent-write`, `side-effect`"
/// );
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum ToolEffect {
    /// Changes nothing: running it twice is harmless (a lookup, a search, a GET).
    Read,
    /// Changes something, but a repeat with the same idempotency key is a no-op downstream
    /// (an upsert keyed by the key, a payment API that deduplicates on it). The runtime hands
    /// the tool a stable key, the same on every attempt; the promise holds only if the tool passes it on.
    IdempotentWrite,
    /// Changes something and a repeat does it again (an e-mail, a transfer, an append). The
    /// default. Never replayed automatically once it may have started.
    #[default]
    SideEffect,
}

impl ToolEffect {
    /// Every effect, from the most to the least repeatable.
    pub const ALL: [ToolEffect; 3] = [
        ToolEffect::Read,
        ToolEffect::IdempotentWrite,
        ToolEffect::SideEffect,
    ];

    /// The declared name: `read`, `idempotent-write` or `side-effect`.
    pub const fn name(self) -> &'static str {
        match self {
            ToolEffect::Read => "read",
            ToolEffect::IdempotentWrite => "idempotent-write",
            ToolEffect::SideEffect => "side-effect",
        }
    }

    /// The more careful of two declarations: when a tool's declaration changed between the
    /// call being recorded and being recovered, recovery trusts the stricter one.
    ///
    /// ```
    /// use retry_toolkit::effects::ToolEffect;
    ///
    /// assert_eq!(ToolEffect::Read.stricter(ToolEffect::SideEffect), ToolEffect::SideEffect);
    /// ```
    pub fn stricter(self, other: ToolEffect) -> ToolEffect {
        self.max(other)
    }
}

impl fmt::Display for ToolEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that names no [`ToolEffect`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool effect `{given}`: expected one of `read`, `idempotent-write`, `side-effect`")]
pub struct UnknownEffect {
    /// The string that was given.
    pub given: String,
}

impl FromStr for ToolEffect {
    type Err = UnknownEffect;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ToolEffect::ALL
            .into_iter()
            .find(|effect| effect.name() == s)
            .ok_or_else(|| UnknownEffect {
                given: s.to_owned(),
            })
    }
}
