//! Answers the filter makes itself (docs/behaviour.md section 6): an OpenAI-style error body with a message
//! a person can act on, and `x-should-retry` telling clients whether trying again can help.

use crate::classify::Class;
use crate::translate::json::Out;
use crate::translate::{self, Api};

/// A local reply: status, machine-readable code and a human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// OpenAI error `type`.
    pub kind: &'static str,
    /// Stable machine-readable code (documented in docs/errors.md).
    pub code: &'static str,
    pub message: String,
    pub should_retry: bool,
}

impl Reply {
    pub fn model_not_recognized(model: &str) -> Reply {
        Reply {
            status: 400,
            kind: "invalid_request_error",
            code: "model_not_recognized",
            message: format!("No fallback chain serves model {model:?}. Use a model this gateway is configured for."),
            should_retry: false,
        }
    }

    /// A request that names no model and that no chain takes (a GET, a body without `model`).
    pub fn route_not_found(path: &str) -> Reply {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        Reply {
            status: 404,
            kind: "invalid_request_error",
            code: "route_not_found",
            message: format!(
                "This gateway serves no chain for {path:?} without a model: send a JSON body with a \"model\" field, or list the models with GET /v1/models."
            ),
            should_retry: false,
        }
    }

    /// `GET /v1/models/{id}` for a model no chain serves.
    pub fn unknown_model(id: &str) -> Reply {
        Reply {
            status: 404,
            kind: "invalid_request_error",
            code: "model_not_found",
            message: format!(
                "The model {id:?} is not served by this gateway: GET /v1/models lists the models it serves."
            ),
            should_retry: false,
        }
    }

    pub fn no_provider_configured(chain: &str) -> Reply {
        Reply {
            status: 400,
            kind: "invalid_request_error",
            code: "no_provider_configured",
            message: format!("Chain {chain:?} has no provider configured."),
            should_retry: false,
        }
    }

    /// The first entry's provider speaks another API and the request uses something that API
    /// cannot carry (behaviour.md 13; fallbacks that cannot take it are skipped before sending).
    pub fn untranslatable(provider: &str, api: &str, what: &str) -> Reply {
        Reply {
            status: 400,
            kind: "invalid_request_error",
            code: "untranslatable_request",
            message: format!(
                "This request cannot be sent to provider {provider:?}, which speaks the {api} API: {what}. Remove it from the request, or put a provider of your API first in the chain."
            ),
            should_retry: false,
        }
    }

    pub fn model_not_allowed(model: &str, chain: &str) -> Reply {
        Reply {
            status: 400,
            kind: "invalid_request_error",
            code: "model_not_allowed",
            message: format!(
                "No provider in chain {chain:?} that you may use serves model {model:?}. Ask for another model or for access."
            ),
            should_retry: false,
        }
    }

    pub fn circuit_open(chain: &str) -> Reply {
        Reply {
            status: 503,
            kind: "service_unavailable",
            code: "circuit_open",
            message: format!(
                "Every provider in chain {chain:?} is failing and was taken out of service for a cooldown; no provider was contacted. Retry later."
            ),
            should_retry: true,
        }
    }

    /// Every provider the request could use has spent its token budget for the window
    /// (`Retry-After` says when the earliest window rolls over).
    pub fn budget_exhausted(chain: &str) -> Reply {
        Reply {
            status: 429,
            kind: "rate_limit_error",
            code: "budget_exhausted",
            message: format!(
                "Every provider in chain {chain:?} has spent its token budget for now; no provider was contacted. Retry after the time Retry-After gives."
            ),
            should_retry: true,
        }
    }

    /// The caller's own token budget is spent for the window: every provider is spent for it
    /// (`Retry-After` says when its window rolls over).
    pub fn caller_budget_exhausted(caller: &str) -> Reply {
        Reply {
            status: 429,
            kind: "rate_limit_error",
            code: "budget_exhausted",
            message: format!(
                "Caller {caller:?} has spent its token budget for now; no provider was contacted. Retry after the time Retry-After gives."
            ),
            should_retry: true,
        }
    }

    /// Every provider the request could use announced a spent rate limit, or spent its token
    /// budget (`Retry-After` says when the earliest comes back; docs/behaviour.md section 4).
    pub fn rate_limited_ahead(chain: &str) -> Reply {
        Reply {
            status: 429,
            kind: "rate_limit_error",
            code: "rate_limited_ahead",
            message: format!(
                "Every provider in chain {chain:?} announced its rate limit spent; no provider was contacted. Retry after the time Retry-After gives."
            ),
            should_retry: true,
        }
    }

    pub fn fallbacks_exhausted(chain: &str, attempts: usize) -> Reply {
        Reply {
            status: 503,
            kind: "service_unavailable",
            code: "fallbacks_exhausted",
            message: format!("All {attempts} attempts along chain {chain:?} failed. Retry later."),
            should_retry: true,
        }
    }

    pub fn invalid_body(problem: &str) -> Reply {
        Reply {
            status: 400,
            kind: "invalid_request_error",
            code: "invalid_body",
            message: format!("The request body could not be read: {problem}. Send a JSON object with a \"model\" field."),
            should_retry: false,
        }
    }

    /// The request line or a header the filter must read cannot be decoded.
    pub fn invalid_request(problem: &str) -> Reply {
        Reply {
            status: 400,
            kind: "invalid_request_error",
            code: "invalid_request",
            message: format!("The request could not be read: {problem}."),
            should_retry: false,
        }
    }

    /// An attempt Envoy was about to start (after a refused connection, a reset or a per-try
    /// timeout) would begin with less than `min_remaining` of the time budget left: the caller
    /// gets the last attempt's failure instead (docs/behaviour.md section 5). Statuses are Envoy's own for
    /// that failure: 504 after a timeout, 503 otherwise; the code is the failure's class.
    pub fn total_time_spent(last_provider: &str, last_class: Class, total_time_ms: u64) -> Reply {
        let status = if last_class == Class::Timeout {
            504
        } else {
            503
        };
        Reply {
            status,
            kind: "server_error",
            code: last_class.as_str(),
            message: format!(
                "Provider {last_provider:?} failed ({}) and the request's time budget ({total_time_ms} ms) has too little left for another attempt.",
                last_class.as_str()
            ),
            // The gateway already spent the time a retry would need (behaviour.md 6).
            should_retry: false,
        }
    }

    /// Envoy's own answer when the walk's last attempt could not reach its provider (refused,
    /// reset, closed before answering); served through Envoy's `local_reply_config`.
    pub fn upstream_unreachable() -> Reply {
        Reply {
            status: 503,
            kind: "service_unavailable",
            code: "upstream_unreachable",
            message: "The last provider tried could not be reached (connection refused, reset or closed before it answered). Retry later.".into(),
            should_retry: true,
        }
    }

    /// Envoy's own answer when the walk's last attempt got no answer in time.
    pub fn upstream_timeout() -> Reply {
        Reply {
            status: 504,
            kind: "timeout",
            code: "upstream_timeout",
            message: "The last provider tried did not answer in time. Retry later.".into(),
            should_retry: true,
        }
    }

    /// Whether a caller should retry an error answer with this status (behaviour.md 6; the gateway's
    /// own and a provider's passed on alike): 5xx, 429 and 408 can pass, other client errors
    /// will fail the same way again. `answer::should_retry` adds the time budget.
    pub fn status_is_retriable(status: u16) -> bool {
        status >= 500 || status == 429 || status == 408
    }

    pub fn body_too_large(limit: usize) -> Reply {
        Reply {
            status: 413,
            kind: "invalid_request_error",
            code: "body_too_large",
            message: format!(
                "The request body is larger than this gateway accepts ({limit} bytes)."
            ),
            should_retry: false,
        }
    }

    /// The upstream role refused to send an attempt Envoy routed elsewhere than the plan said
    /// (docs/behaviour.md section 7, fail closed): a deployment fault that retrying will not fix.
    pub fn misrouted_attempt(attempt: usize, provider: &str, cluster: &str, actual: &str) -> Reply {
        Reply {
            status: 502,
            kind: "server_error",
            code: "misrouted_attempt",
            message: format!(
                "The gateway is misconfigured: attempt {attempt} was planned for provider {provider:?} (cluster {cluster:?}) but Envoy sent it to {actual}, so it was not sent and no credential left the gateway. Check that the route has refresh_cluster_on_retry: true (Envoy 1.39 or later) or render the configuration for this Envoy version."
            ),
            should_retry: false,
        }
    }

    /// The two roles run different configurations (one was updated before the other): the
    /// attempt was not sent. Usually brief, so a retry may succeed.
    pub fn config_mismatch(planned: &str, running: &str) -> Reply {
        Reply {
            status: 502,
            kind: "server_error",
            code: "config_mismatch",
            message: format!(
                "The gateway's two llm-failover filters run different configurations (the request was planned under {planned}, the provider-side filter runs {running}), so the attempt was not sent. Update both filters' configuration together."
            ),
            should_retry: true,
        }
    }

    /// The body in the shape of the caller's API: for a Messages caller Anthropic's error
    /// shape, `{"type": "error", "error": {"type", "message"}}` with the error type its SDK
    /// reads from the status (`translate::common::error_type`), plus the gateway's `code`
    /// (behaviour.md 6: machine-readable, documented; SDKs keep unknown members); else [`Reply::body`].
    pub fn body_for(&self, caller: Option<Api>) -> Vec<u8> {
        if caller == Some(Api::Gemini) {
            return translate::gemini::error_body(self.status, &self.message, Some(self.code));
        }
        if caller != Some(Api::AnthropicMessages) {
            return self.body().into_bytes();
        }
        let mut out = Out::with_capacity(64 + self.message.len());
        (out.open().key("type").str("error").key("error").open())
            .key("type")
            .str(translate::common::error_type(self.status))
            .key("message")
            .str(&self.message)
            .key("code")
            .str(self.code)
            .close()
            .close();
        out.0
    }

    /// The JSON body: `{"error": {"code", "message", "type"}}` (members in this order, the
    /// order `body_value` prints them in). Written by hand (`translate::json::Out`, as the
    /// translators write): serde's serialiser is not in the module.
    pub fn body(&self) -> String {
        let mut out = Out::with_capacity(64 + self.message.len());
        (out.open().key("error").open().key("code").str(self.code))
            .key("message")
            .str(&self.message)
            .key("type")
            .str(self.kind)
            .close()
            .close();
        String::from_utf8(out.0).unwrap_or_default()
    }

    /// The body as a JSON value (the renderer turns it into Envoy's `json_format`).
    pub fn body_value(&self) -> serde_json::Value {
        serde_json::json!({"error": {"type": self.kind, "code": self.code, "message": self.message}})
    }

    pub fn should_retry_header(&self) -> &'static str {
        if self.should_retry {
            "true"
        } else {
            "false"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_openai_style_errors() {
        let r = Reply::model_not_allowed("llama \"3\"", "main");
        let v: serde_json::Value = serde_json::from_str(&r.body()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "model_not_allowed");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("llama \\\"3\\\""));
        assert!(!r.should_retry);
        let open = Reply::circuit_open("main");
        assert_eq!(open.status, 503);
        assert!(open.should_retry);
    }

    #[test]
    fn the_body_is_byte_for_byte_the_json_value_the_renderer_uses() {
        for r in [
            Reply::model_not_allowed("llama \"3\" \u{1F600} \n\t\\", "main"),
            Reply::circuit_open("main"),
            Reply::invalid_request("the request's :path is not valid UTF-8"),
        ] {
            assert_eq!(r.body(), r.body_value().to_string());
        }
    }

    #[test]
    fn a_messages_callers_body_is_anthropics_error_in_this_order() {
        let r = Reply::model_not_allowed("llama \"3\" \n", "main");
        let body = String::from_utf8(r.body_for(Some(Api::AnthropicMessages))).unwrap();
        let message = serde_json::to_string(&r.message).unwrap();
        assert_eq!(
            body,
            format!(
                r#"{{"type":"error","error":{{"type":"invalid_request_error","message":{message},"code":"{}"}}}}"#,
                r.code
            )
        );
    }

    #[test]
    fn a_spent_budget_answers_with_the_last_failure() {
        let r = Reply::total_time_spent("secondary", Class::Timeout, 3000);
        assert_eq!((r.status, r.code, r.should_retry), (504, "timeout", false));
        assert!(r.message.contains("secondary") && r.message.contains("budget"));
        let r = Reply::total_time_spent("secondary", Class::ConnectionError, 3000);
        assert_eq!((r.status, r.code), (503, "connection_error"));
    }

    #[test]
    fn retriable_statuses_are_5xx_429_and_408() {
        for (status, retry) in [
            (500, true),
            (503, true),
            (529, true),
            (429, true),
            (408, true),
            (400, false),
            (401, false),
            (404, false),
            (413, false),
            (422, false),
        ] {
            assert_eq!(Reply::status_is_retriable(status), retry, "{status}");
        }
        assert!(Reply::upstream_unreachable().should_retry);
        assert_eq!(Reply::upstream_timeout().status, 504);
        assert!(!Reply::body_too_large(10).should_retry);
    }

    #[test]
    fn an_unreadable_request_is_a_400_not_worth_retrying() {
        let r = Reply::invalid_request("the request's :path is not valid UTF-8");
        let v: serde_json::Value = serde_json::from_str(&r.body()).unwrap();
        assert_eq!((r.status, r.should_retry), (400, false));
        assert_eq!(v["error"]["code"], "invalid_request");
        assert!(v["error"]["message"].as_str().unwrap().contains(":path"));
    }
}
