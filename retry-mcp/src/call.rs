//! One tool call on a [`ToolServer`]: connect if needed, send once, and say what the answer —
//! or its absence — means. Nothing here sends a call twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_toolkit::Clock;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, JsonObject, MetaObject, RequestMetaObject,
};
use rmcp::model::{CallToolResponse, ContentBlock};

use crate::TARGET;
use crate::error::CallError;
use crate::server::{Live, ToolServer, race};

/// What a call sends, and how long it may take.
pub(crate) struct Outgoing<'a> {
    pub(crate) tool: &'a str,
    pub(crate) arguments: JsonObject,
    pub(crate) meta: JsonObject,
    /// Bounds the connecting (on the server's clock): past it, the call is not sent.
    pub(crate) connect_by: Option<Instant>,
    /// Bounds the wait for the answer once sent.
    pub(crate) timeout: Option<Duration>,
}

impl<C> ToolServer<C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    /// Calls `tool` with `arguments`, once.
    ///
    /// Connects first if no connection is open (retrying under the server's options). If the
    /// connection fails after the call was sent, the call is not sent again: it fails with
    /// [`CallError::ConnectionLost`], the connection is dropped, and the next call connects
    /// anew. A result the tool marks as an error is [`CallError::ToolFailed`].
    ///
    /// # Errors
    /// [`CallError`]; [`CallError::answer_lost`] says whether the tool may have acted.
    pub async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, CallError> {
        self.send(Outgoing {
            tool,
            arguments,
            meta: JsonObject::new(),
            connect_by: None,
            timeout: None,
        })
        .await
    }

    /// Like [`call`](ToolServer::call), waiting at most `timeout` (on the server's clock) for
    /// the answer once the call is sent. Past it the server is told to cancel the call, and the
    /// call fails with [`CallError::TimedOut`]; the connection stays open.
    ///
    /// # Errors
    /// As [`call`](ToolServer::call).
    pub async fn call_within(
        &self,
        tool: &str,
        arguments: JsonObject,
        timeout: Duration,
    ) -> Result<CallToolResult, CallError> {
        self.send(Outgoing {
            tool,
            arguments,
            meta: JsonObject::new(),
            connect_by: None,
            timeout: Some(timeout),
        })
        .await
    }

    /// Sends `out` once. Dropping the future while the call is in flight tells the server to
    /// cancel it (rmcp sends `notifications/cancelled`).
    pub(crate) async fn send(&self, out: Outgoing<'_>) -> Result<CallToolResult, CallError> {
        let live = self
            .connection_by(out.connect_by)
            .await
            .map_err(CallError::Unreachable)?;
        let mut params =
            CallToolRequestParams::new(out.tool.to_owned()).with_arguments(out.arguments);
        if !out.meta.is_empty() {
            params.meta = Some(RequestMetaObject(MetaObject(out.meta)));
        }
        // Taken before the request is handed over: if the connection fails and this is still
        // the count of bytes written, the request never left.
        let mark = live.written();
        let call = live.service.call_tool_once(params);
        let answer = match out.timeout {
            None => call.await,
            Some(timeout) => match race(call, self.clock().sleep(timeout)).await {
                Some(answer) => answer,
                None => {
                    tracing::warn!(
                        target: TARGET, server = %self.name(), tool = %out.tool, ?timeout,
                        "no answer in time; the server was asked to cancel the call"
                    );
                    return Err(CallError::TimedOut {
                        server: self.name().to_owned(),
                        tool: out.tool.to_owned(),
                        timeout,
                    });
                }
            },
        };
        self.judge(&live, out.tool, mark, answer)
    }

    /// What an answer (or its absence) means.
    fn judge(
        &self,
        live: &Arc<Live>,
        tool: &str,
        mark: u64,
        answer: Result<CallToolResponse, ServiceError>,
    ) -> Result<CallToolResult, CallError> {
        let server = || self.name().to_owned();
        let unanswered = |what| CallError::Unanswered {
            server: server(),
            tool: tool.to_owned(),
            what,
        };
        match answer {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                Err(CallError::ToolFailed {
                    tool: tool.to_owned(),
                    message: error_text(&result.content),
                    result: Box::new(result),
                })
            }
            Ok(CallToolResponse::Complete(result)) => Ok(result),
            Ok(CallToolResponse::InputRequired(_)) => Err(unanswered("a request for more input")),
            Ok(CallToolResponse::Task(_)) => Err(unanswered("a task to poll")),
            Ok(_) => Err(unanswered("an unknown kind of result")),
            Err(ServiceError::McpError(error)) => Err(CallError::Refused {
                server: server(),
                tool: tool.to_owned(),
                code: error.code.0,
                message: error.message.into_owned(),
            }),
            Err(ServiceError::UnexpectedResponse) => {
                Err(unanswered("an answer that is not a tool result"))
            }
            Err(error) => {
                let fault = live.fault().cloned();
                let cause = match &fault {
                    Some(message) => format!("the server sent {message}"),
                    None => error.to_string(),
                };
                self.invalidate(live.number, &cause);
                if live.written() == mark {
                    tracing::warn!(
                        target: TARGET, server = %self.name(), %tool, %cause,
                        "the connection failed before the call was written; it was not sent"
                    );
                    return Err(CallError::NotSent {
                        server: server(),
                        tool: tool.to_owned(),
                        cause,
                    });
                }
                tracing::warn!(
                    target: TARGET, server = %self.name(), %tool, %cause,
                    "the connection failed during a call; whether it acted is unknown, and it is not sent again"
                );
                Err(match fault {
                    Some(message) => CallError::Unreadable {
                        server: server(),
                        tool: tool.to_owned(),
                        message,
                    },
                    None => CallError::ConnectionLost {
                        server: server(),
                        tool: tool.to_owned(),
                        cause,
                    },
                })
            }
        }
    }
}

/// The text blocks of an error result, as the model should read them.
fn error_text(content: &[ContentBlock]) -> String {
    let text: Vec<&str> = content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect();
    if text.is_empty() {
        "the tool reported an error without a message".to_owned()
    } else {
        text.join("\n")
    }
}
