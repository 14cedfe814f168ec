//! `render --reloadable DIR`: both roles' configuration from watched files (extension config
//! discovery), and the bootstrap that reads them.

use super::{
    bootstrap, seq, to_yaml, typed, wasm_filter, HTTP_PROTOCOL_OPTIONS, NAME, UPSTREAM_PLUGIN_NAME,
    WASM,
};
use crate::input::Gateway;
use serde_yaml_ng::{Mapping, Value};

/// ECDS resource names of the two roles' plugin configurations (`--reloadable`).
pub const DOWNSTREAM_RESOURCE: &str = NAME;

pub const UPSTREAM_RESOURCE: &str = UPSTREAM_PLUGIN_NAME;

/// The files `render --reloadable DIR` writes: each role's filter configuration as an
/// extension config discovery response Envoy reads from a watched file.
pub fn extension_files(gw: &Gateway) -> Vec<(String, String)> {
    let file = |resource: &str, plugin: &str, json: &str| {
        let filter = wasm_filter(gw, plugin, json);
        let typed_config = filter.get("typed_config").cloned().unwrap_or(Value::Null);
        let body = map! {
            "resources" => seq(vec![typed(
                "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
                map! { "name" => resource, "typed_config" => typed_config },
            )]),
        };
        (
            format!("{resource}.yaml"),
            format!(
                "# The llm-failover plugin configuration, rendered by `llm-failover render --reloadable`;\n\
                 # Envoy watches this file: render again to change it under traffic.\n{}",
                to_yaml(&body)
            ),
        )
    };
    vec![
        file(DOWNSTREAM_RESOURCE, NAME, &gw.downstream_json),
        file(UPSTREAM_RESOURCE, UPSTREAM_PLUGIN_NAME, &gw.upstream_json),
    ]
}

/// A filter whose configuration comes from `dir/<resource>.yaml` (extension config discovery
/// from a watched file), Wasm only: a missing or refused configuration fails closed.
fn discovered(resource: &str, dir: &str) -> Value {
    discovered_from(
        resource,
        map! {
            "path_config_source" => map! {
                "path" => format!("{dir}/{resource}.yaml"),
                "watched_directory" => map! { "path" => dir },
            },
            "resource_api_version" => "V3",
        },
    )
}

/// A filter named `resource` whose configuration comes by extension config discovery from
/// `config_source`, accepting the Wasm type only and with no default configuration (also the
/// Istio target's references, `crate::istio`).
pub(crate) fn discovered_from(resource: &str, config_source: Value) -> Value {
    map! {
        "name" => resource,
        "config_discovery" => map! {
            "config_source" => config_source,
            "type_urls" => seq(vec![WASM.into()]),
        },
    }
}

/// The bootstrap of `render --reloadable DIR`: the same as [`bootstrap`], with the listener's
/// and every cluster's llm-failover filter taking its configuration from DIR.
pub fn reloadable_bootstrap(gw: &Gateway, dir: &str) -> Value {
    let mut b = bootstrap(gw);
    let replace = |filters: &mut Value, resource: &str| {
        if let Value::Sequence(list) = filters {
            for f in list.iter_mut() {
                if f.get("name").and_then(Value::as_str) == Some(NAME) {
                    *f = discovered(resource, dir);
                }
            }
        }
    };
    if let Some(res) = b.get_mut("static_resources") {
        if let Some(Value::Sequence(listeners)) = res.get_mut("listeners") {
            for l in listeners.iter_mut() {
                if l.get("name").and_then(Value::as_str) != Some(NAME) {
                    continue;
                }
                if let Some(Value::Sequence(chains)) = l.get_mut("filter_chains") {
                    for c in chains.iter_mut() {
                        if let Some(Value::Sequence(fs)) = c.get_mut("filters") {
                            for f in fs.iter_mut() {
                                if let Some(hf) = f
                                    .get_mut("typed_config")
                                    .and_then(|t| t.get_mut("http_filters"))
                                {
                                    replace(hf, DOWNSTREAM_RESOURCE);
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(Value::Sequence(clusters)) = res.get_mut("clusters") {
            for c in clusters.iter_mut() {
                if let Some(hf) = c
                    .get_mut("typed_extension_protocol_options")
                    .and_then(|o| o.get_mut(HTTP_PROTOCOL_OPTIONS))
                    .and_then(|o| o.get_mut("http_filters"))
                {
                    replace(hf, UPSTREAM_RESOURCE);
                }
            }
        }
    }
    b
}

pub fn reloadable_bootstrap_text(gw: &Gateway, source: &str, dir: &str) -> String {
    format!(
        "# Envoy bootstrap for the llm-failover gateway, rendered by `llm-failover render {source} --reloadable {dir}`.\n\
         # The filters' configuration lives in {dir} and is reloaded when it changes: render again with the\n\
         # same --reloadable DIR. Changes to listen, admin, providers' endpoints, the set of providers or the\n\
         # longest chain need this bootstrap rendered again and Envoy restarted.\n{}",
        to_yaml(&reloadable_bootstrap(gw, dir))
    )
}
