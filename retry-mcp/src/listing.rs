//! What a server says about its tools: [`ListedTool`] and the [`ToolHints`] a caller may
//! choose to trust.

use std::time::Duration;

use retry_toolkit::Clock;
use retry_toolkit::effects::ToolEffect;
use rmcp::ServiceError;
use rmcp::model::{JsonObject, PaginatedRequestParams, Tool, ToolAnnotations};

use crate::error::ListError;
use crate::server::{ToolServer, race};

/// The most pages of tools [`ToolServer::list_tools`] reads before it stops: a server that
/// keeps handing out cursors cannot keep the caller listing forever.
pub const MAX_TOOL_PAGES: usize = 100;

/// A tool as its server describes it: what to show a model, and hints about its effect.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ListedTool {
    /// The name the server calls it by.
    pub name: String,
    /// A human-readable title, if the server gives one.
    pub title: Option<String>,
    /// What it does, for the model.
    pub description: Option<String>,
    /// The JSON Schema of its arguments, for the model.
    pub input_schema: JsonObject,
    /// What the server claims about its effect. Untrusted unless you choose otherwise.
    pub hints: ToolHints,
}

/// What a server claims about one of its tools (the protocol's tool annotations).
///
/// They are the server's word, not a guarantee: a remote tool is a side effect unless the
/// caller declares otherwise, and these hints count only where the caller opts in with
/// [`RemoteTool::trust_hints`](crate::RemoteTool::trust_hints).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ToolHints {
    /// The tool does not change its environment.
    pub read_only: Option<bool>,
    /// The tool may change or delete what exists (rather than only add).
    pub destructive: Option<bool>,
    /// Calling the tool again with the same arguments changes nothing more.
    pub idempotent: Option<bool>,
    /// The tool reaches an open world of external entities.
    pub open_world: Option<bool>,
}

impl ToolHints {
    /// Hints with every claim set as given.
    pub const fn new(
        read_only: Option<bool>,
        destructive: Option<bool>,
        idempotent: Option<bool>,
        open_world: Option<bool>,
    ) -> Self {
        ToolHints {
            read_only,
            destructive,
            idempotent,
            open_world,
        }
    }

    /// The effect these hints claim: [`Read`](ToolEffect::Read) for a read-only tool,
    /// [`IdempotentWrite`](ToolEffect::IdempotentWrite) for an idempotent one, `None` when
    /// they claim neither (which leaves the tool a side effect).
    ///
    /// ```
    /// use retry_toolkit::effects::ToolEffect;
    /// use retry_mcp::ToolHints;
    ///
    /// assert_eq!(ToolHints::new(Some(true), None, None, None).effect(), Some(ToolEffect::Read));
    /// assert_eq!(ToolHints::new(Some(false), Some(true), Some(true), None).effect(), Some(ToolEffect::IdempotentWrite));
    /// assert_eq!(ToolHints::default().effect(), None);
    /// ```
    pub const fn effect(&self) -> Option<ToolEffect> {
        match (self.read_only, self.idempotent) {
            (Some(true), _) => Some(ToolEffect::Read),
            (_, Some(true)) => Some(ToolEffect::IdempotentWrite),
            _ => None,
        }
    }
}

impl From<&ToolAnnotations> for ToolHints {
    fn from(a: &ToolAnnotations) -> Self {
        ToolHints::new(
            a.read_only_hint,
            a.destructive_hint,
            a.idempotent_hint,
            a.open_world_hint,
        )
    }
}

impl From<Tool> for ListedTool {
    fn from(tool: Tool) -> Self {
        ListedTool {
            hints: tool
                .annotations
                .as_ref()
                .map(ToolHints::from)
                .unwrap_or_default(),
            name: tool.name.into_owned(),
            title: tool.title,
            description: tool.description.map(|d| d.into_owned()),
            input_schema: (*tool.input_schema).clone(),
        }
    }
}

impl<C> ToolServer<C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    /// Every tool the server lists, page after page (at most [`MAX_TOOL_PAGES`]); connects
    /// first if needed.
    ///
    /// Connecting is bounded by the server's options; the listing itself waits as long as the
    /// server takes — use [`list_tools_within`](ToolServer::list_tools_within) to bound the
    /// whole of it. An answer the connection cannot deliver (too large, not a protocol message)
    /// fails it at once.
    ///
    /// # Errors
    /// [`ListError`]: no connection, a connection lost or closed on an unreadable message while
    /// listing (it is dropped), a refusal, or too many pages.
    pub async fn list_tools(&self) -> Result<Vec<ListedTool>, ListError> {
        self.list(None).await
    }

    /// Like [`list_tools`](ToolServer::list_tools), all of it — connecting included — within
    /// `timeout` (on the server's clock), as a call is within its deadline. A connection not
    /// made by then is [`ListError::Unreachable`]; a listing not finished,
    /// [`ListError::TimedOut`].
    ///
    /// # Errors
    /// As [`list_tools`](ToolServer::list_tools), and [`ListError::TimedOut`].
    pub async fn list_tools_within(&self, timeout: Duration) -> Result<Vec<ListedTool>, ListError> {
        let deadline = self.clock().now().checked_add(timeout);
        let listing = self.list(deadline);
        let Some(deadline) = deadline else {
            return listing.await; // beyond what an `Instant` can hold: no bound
        };
        let left = deadline.saturating_duration_since(self.clock().now());
        race(listing, self.clock().sleep(left))
            .await
            .unwrap_or_else(|| {
                Err(ListError::TimedOut {
                    server: self.name().to_owned(),
                    timeout,
                })
            })
    }

    async fn list(
        &self,
        deadline: Option<std::time::Instant>,
    ) -> Result<Vec<ListedTool>, ListError> {
        let live = self
            .connection_by(deadline)
            .await
            .map_err(ListError::Unreachable)?;
        let server = || self.name().to_owned();
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page = match live.service.list_tools(Some(params)).await {
                Ok(page) => page,
                Err(ServiceError::McpError(error)) => {
                    return Err(ListError::Refused {
                        server: server(),
                        message: error.message.into_owned(),
                    });
                }
                Err(ServiceError::UnexpectedResponse) => {
                    return Err(ListError::Refused {
                        server: server(),
                        message: "its answer was not a list of tools".to_owned(),
                    });
                }
                Err(error) => {
                    let cause = error.to_string();
                    self.invalidate(live.number, &cause);
                    return Err(match live.fault() {
                        Some(message) => ListError::Unreadable {
                            server: server(),
                            message: message.clone(),
                        },
                        None => ListError::ConnectionLost {
                            server: server(),
                            cause,
                        },
                    });
                }
            };
            tools.extend(page.tools.into_iter().map(ListedTool::from));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(ListError::TooManyPages {
            server: server(),
            pages: MAX_TOOL_PAGES,
        })
    }
}
