//! Names that cross the boundary between the filter, Envoy's config and the outside world.
//! The CLI renders Envoy configs from these same constants, so they cannot drift apart.

/// Filter-state property written per attempt slot: `wasm.<SLOT_PREFIX><k>` (k from 1) holds the
/// cluster name that the route's matcher maps to a `ClusterAction`.
pub const SLOT_PROPERTY_PREFIX: &str = "llm_failover.try";
/// Slot property names for attempts 1..=16 (`config::MAX_CHAIN_LEN`), spelled out so the hot
/// path never formats them.
pub const SLOT_PROPERTIES: [&str; 16] = [
    "llm_failover.try1",
    "llm_failover.try2",
    "llm_failover.try3",
    "llm_failover.try4",
    "llm_failover.try5",
    "llm_failover.try6",
    "llm_failover.try7",
    "llm_failover.try8",
    "llm_failover.try9",
    "llm_failover.try10",
    "llm_failover.try11",
    "llm_failover.try12",
    "llm_failover.try13",
    "llm_failover.try14",
    "llm_failover.try15",
    "llm_failover.try16",
];
/// Filter-state property naming the cluster a request goes to in grouping mode (Envoy
/// 1.36-1.38, `config::Routing::Groups`): a provider's cluster for a one-attempt plan, else the
/// grouping cluster of the plan's provider order (`crate::group`).
pub const GROUP_PROPERTY: &str = "llm_failover.group";
/// Grouping clusters are named `<GROUP_CLUSTER_PREFIX><cluster>~<cluster>...`.
pub const GROUP_CLUSTER_PREFIX: &str = "llm_failover~";
/// Separator of the provider clusters in a grouping cluster's name.
pub const GROUP_CLUSTER_SEPARATOR: char = '~';
/// Separator of the two provider clusters in a hedging pair's composite cluster name,
/// `<first>+<second>` ([`hedge_cluster`]): not a character provider names use.
pub const HEDGE_CLUSTER_SEPARATOR: char = '+';
/// Envoy's per-request switch for hedging on the per-try timeout (a steering header callers
/// cannot send: the downstream role strips it, then sets it for a hedged request).
pub const HEDGE_HEADER: &str = "x-envoy-hedge-on-per-try-timeout";

/// The composite cluster of a hedging pair (docs/internals.md, hedging): attempt 1 goes to
/// `first`'s sub-cluster, attempt 2 (the hedge, or a fallback) to `second`'s. `None` when both
/// are one cluster: then a hedge keeping the first attempt's cluster is already where it goes.
pub fn hedge_cluster(first: &str, second: &str) -> Option<String> {
    (first != second).then(|| format!("{first}{HEDGE_CLUSTER_SEPARATOR}{second}"))
}
/// Envoy stores wasm-set properties under this prefix in filter state.
pub const ENVOY_WASM_STATE_PREFIX: &str = "wasm.";
/// Names of the route the gateway's traffic takes: the standalone renderer's (and the snippet it
/// prints for hand-merged configurations) and the Istio target's. The liveness answer is given
/// on these routes (and on chains' `routes`), never on a route the user configured otherwise.
pub const GATEWAY_ROUTE_NAMES: [&str; 2] = ["llm_failover", "llm-failover"];
/// Filter-state property the upstream filters append each attempt's record to; also what
/// access logs print: `%FILTER_STATE(wasm.llm_failover.attempts:PLAIN)%`.
pub const ATTEMPTS_PROPERTY: &str = "llm_failover.attempts";
/// Property path (NUL-joined) of the chosen host's provider in its endpoint metadata
/// (`destination::HOST_METADATA_NAMESPACE` / `HOST_METADATA_PROVIDER_KEY`), which grouping
/// clusters carry because their name is not a provider's.
pub const HOST_PROVIDER_PROPERTY: &[u8] =
    b"xds\0upstream_host_metadata\0filter_metadata\0llm_failover\0provider";
/// Property path of the cluster Envoy picked for this attempt.
pub const CLUSTER_NAME_PROPERTY: &[u8] = b"xds\0cluster_name";

/// Filter-state property naming the chain that served the request, for access logs:
/// `%FILTER_STATE(wasm.llm_failover.chain:PLAIN)%`. Written only when the configuration has
/// more than one chain (with one, it can only be that one).
pub const CHAIN_PROPERTY: &str = "llm_failover.chain";

/// Filter-state property naming the request's caller as the `caller` metric label does
/// (`%FILTER_STATE(wasm.llm_failover.caller:PLAIN)%`): a name from `callers`, or `other`;
/// never the raw `caller_header` value (it may be a key). Written only when the file names
/// callers and the request carries the header.
pub const CALLER_PROPERTY: &str = "llm_failover.caller";

/// Filter-state properties of the request's model and of the model its answer's attempt was
/// sent (`%FILTER_STATE(wasm.llm_failover.request_model:PLAIN)%`), for the OpenTelemetry access
/// log's `gen_ai.request.model` and `gen_ai.response.model`. Written only with `log_models`.
pub const REQUEST_MODEL_PROPERTY: &str = "llm_failover.request_model";
pub const RESPONSE_MODEL_PROPERTY: &str = "llm_failover.response_model";

/// Filter-state properties of the served answer's input and output tokens, for the
/// OpenTelemetry access log's `gen_ai.usage.input_tokens` and `output_tokens`. Written only
/// with `log_models`, when the answer reported its usage (docs/behaviour.md section 15).
pub const INPUT_TOKENS_PROPERTY: &str = "llm_failover.input_tokens";
pub const OUTPUT_TOKENS_PROPERTY: &str = "llm_failover.output_tokens";

/// Response header an upstream filter adds to an answer that must fall over; the route's
/// retry policy lists it in `retriable_headers`. Never reaches the caller.
pub const RETRY_MARKER_HEADER: &str = "x-llm-failover-retry";
/// The marker's value that makes the route retry. An answer that falls over with no attempt
/// left carries another value ("0"): the downstream filter still sees the chain exhausted.
pub const RETRY_MARKER_RETRY: &str = "1";
/// Request header Envoy sets on each attempt (`include_request_attempt_count`).
pub const ATTEMPT_COUNT_HEADER: &str = "x-envoy-attempt-count";
/// Envoy request headers a caller could use to change retries and timeouts (behaviour.md 2.6).
pub const ENVOY_STEERING_HEADERS: [&str; 8] = [
    "x-envoy-retry-on",
    "x-envoy-retriable-status-codes",
    "x-envoy-retriable-header-names",
    "x-envoy-max-retries",
    "x-envoy-upstream-rq-timeout-ms",
    "x-envoy-upstream-rq-per-try-timeout-ms",
    "x-envoy-attempt-count",
    "x-envoy-hedge-on-per-try-timeout",
];
pub const MAX_RETRIES_HEADER: &str = "x-envoy-max-retries";
/// Envoy's per-request override of the route's `per_try_timeout` (read once per request).
pub const PER_TRY_TIMEOUT_HEADER: &str = "x-envoy-upstream-rq-per-try-timeout-ms";

/// Public response headers (docs/behaviour.md section 6, fixed names).
pub const PROVIDER_HEADER: &str = "x-llm-provider";
pub const ATTEMPTS_HEADER: &str = "x-llm-attempts";
pub const FALLBACK_COUNT_HEADER: &str = "x-llm-fallback-count";
pub const FALLBACK_REASON_HEADER: &str = "x-llm-fallback-reason";
pub const SHOULD_RETRY_HEADER: &str = "x-should-retry";

const HEALTH_KEY_PREFIX: &str = "llm_failover.health.";

/// The shared-data key of a provider's health record.
pub fn health_key(provider: &str) -> String {
    format!("{HEALTH_KEY_PREFIX}{provider}")
}

/// Calls `f` with [`health_key`]`(provider)` built on the stack: planning reads one record per
/// provider it considers, and this keeps the key off the heap for names up to 108 bytes.
pub fn with_health_key<R>(provider: &str, f: impl FnOnce(&str) -> R) -> R {
    with_key(HEALTH_KEY_PREFIX, provider, f)
}

/// Calls `f` with `prefix` and `provider` joined, on the stack when they fit in 128 bytes.
pub fn with_key<R>(prefix: &str, provider: &str, f: impl FnOnce(&str) -> R) -> R {
    let mut buf = [0u8; 128];
    match join_key(&mut buf, prefix, provider) {
        Ok(key) => f(key),
        Err(long) => f(&long),
    }
}

/// `prefix` and `provider` joined in `buf`, or on the heap when they do not fit (one copy of
/// this for every caller of [`with_key`]).
#[inline(never)]
fn join_key<'b>(buf: &'b mut [u8; 128], prefix: &str, provider: &str) -> Result<&'b str, String> {
    let len = prefix.len() + provider.len();
    if let Some(room) = buf.get_mut(..len) {
        let (head, name) = room.split_at_mut(prefix.len());
        head.copy_from_slice(prefix.as_bytes());
        name.copy_from_slice(provider.as_bytes());
        // Two UTF-8 strings joined are UTF-8; the check is cheap at this size.
        if let Ok(key) = std::str::from_utf8(room) {
            return Ok(key);
        }
    }
    Err(format!("{prefix}{provider}"))
}

/// The header Bedrock takes into its body ([`crate::envelope::Envelope::body`]): the caller's
/// value is kept aside for it (`config::forward::HeaderPolicy`).
pub const ANTHROPIC_BETA: &str = "anthropic-beta";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_built_health_keys_equal_the_formatted_ones() {
        for name in [
            "p",
            "openai.primary",
            "é-provider",
            &"x".repeat(108),
            &"y".repeat(300),
        ] {
            assert_eq!(with_health_key(name, str::to_string), health_key(name));
        }
    }

    #[test]
    fn the_host_provider_path_names_the_metadata_destination_checks() {
        use crate::destination::{HOST_METADATA_NAMESPACE, HOST_METADATA_PROVIDER_KEY};
        let path = format!(
            "xds\0upstream_host_metadata\0filter_metadata\0{HOST_METADATA_NAMESPACE}\0{HOST_METADATA_PROVIDER_KEY}"
        );
        assert_eq!(HOST_PROVIDER_PROPERTY, path.as_bytes());
    }

    #[test]
    fn slot_properties_follow_the_prefix() {
        assert_eq!(SLOT_PROPERTIES.len(), crate::config::MAX_CHAIN_LEN);
        for (i, name) in SLOT_PROPERTIES.iter().enumerate() {
            assert_eq!(*name, format!("{SLOT_PROPERTY_PREFIX}{}", i + 1));
        }
    }
}
