//! Small pieces the listeners, the clusters and the OpenTelemetry logger share (kept apart so
//! that none of them imports another).

use llm_failover::wire;
use serde_yaml_ng::{Mapping, Value};

/// One line per request: what the route did and the filter's per-attempt record.
pub fn access_log_format() -> String {
    format!(
        "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" %RESPONSE_CODE% %RESPONSE_FLAGS% \
         %BYTES_RECEIVED% %BYTES_SENT% %DURATION%ms attempts=%UPSTREAM_REQUEST_ATTEMPT_COUNT% cluster=%UPSTREAM_CLUSTER% \
         chain=%FILTER_STATE({p}{}:PLAIN)% caller=%FILTER_STATE({p}{}:PLAIN)% llm_failover=%FILTER_STATE({p}{}:PLAIN)% request_id=%REQ(X-REQUEST-ID)%\n",
        wire::CHAIN_PROPERTY,
        wire::CALLER_PROPERTY,
        wire::ATTEMPTS_PROPERTY,
        p = wire::ENVOY_WASM_STATE_PREFIX,
    )
}

/// An Envoy `address` of `address:port`.
pub(super) fn socket_address(address: &str, port: u16) -> Value {
    map! { "socket_address" => map! { "address" => address, "port_value" => u64::from(port) } }
}
