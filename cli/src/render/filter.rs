//! The llm-failover wasm filter (both roles, one VM) and the router after it.

use super::{seq, typed, NAME, WASM};
use crate::input::Gateway;
use crate::version::Runtime;
use serde_yaml_ng::{Mapping, Value};

const STRING_VALUE: &str = "type.googleapis.com/google.protobuf.StringValue";

const DYNAMIC_MODULE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter";

const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

fn vm_config(gw: &Gateway) -> Value {
    let mut vm = map! {
        "vm_id" => NAME,
        "runtime" => "envoy.wasm.runtime.v8",
        "code" => map! { "local" => map! { "filename" => gw.module.as_str() } },
    };
    if !gw.env_keys.is_empty() {
        if let Value::Mapping(m) = &mut vm {
            let keys: Vec<Value> = gw
                .env_keys
                .iter()
                .map(|k| Value::from(k.as_str()))
                .collect();
            m.insert(
                "environment_variables".into(),
                map! { "host_env_keys" => seq(keys) },
            );
        }
    }
    vm
}

/// The filter of one role (or the status endpoint) with its plugin configuration: the wasm
/// plugin, or with `--runtime native` the dynamic module (the same configuration JSON).
pub(crate) fn wasm_filter(gw: &Gateway, plugin_name: &str, configuration: &str) -> Value {
    if gw.runtime == Runtime::Native {
        return native_filter(gw, plugin_name, configuration);
    }
    map! {
        "name" => NAME,
        "typed_config" => typed(WASM, map! {
            "config" => map! {
                "name" => plugin_name,
                "root_id" => NAME,
                "vm_config" => vm_config(gw),
                "allow_on_headers_stop_iteration" => true,
                "configuration" => typed(STRING_VALUE, map! { "value" => configuration }),
            },
        }),
    }
}

/// Envoy's dynamic-modules HTTP filter loading `gw.module` (`libllm_failover.so`), in both
/// roles: the module reads its role from the configuration, like the wasm plugin.
fn native_filter(gw: &Gateway, plugin_name: &str, configuration: &str) -> Value {
    map! {
        "name" => NAME,
        "typed_config" => typed(DYNAMIC_MODULE, map! {
            "dynamic_module_config" => map! {
                "name" => NAME,
                "module" => map! { "local" => map! { "filename" => gw.module.as_str() } },
                "do_not_close" => true,
                // The proxy-wasm build's namespace: the same stat names, so the same tag rules.
                "metrics_namespace" => llm_failover::metrics::ENVOY_NAMESPACE,
            },
            "filter_name" => plugin_name,
            "filter_config" => typed(STRING_VALUE, map! { "value" => configuration }),
        }),
    }
}

/// The downstream filter (goes before the router).
pub fn downstream_filter(gw: &Gateway) -> Value {
    wasm_filter(gw, NAME, &gw.downstream_json)
}

/// The router. `suppress_envoy_headers` keeps Envoy's own timing headers
/// (`x-envoy-expected-rq-timeout-ms` to providers, `x-envoy-upstream-service-time` to callers)
/// out of the traffic; attempt counting still works without them.
pub(super) fn router_filter() -> Value {
    map! {
        "name" => "envoy.filters.http.router",
        "typed_config" => typed(ROUTER, map! { "suppress_envoy_headers" => true }),
    }
}
