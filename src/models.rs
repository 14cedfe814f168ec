//! `GET /v1/models` and `GET /v1/models/{id}` answered from the configuration (behaviour.md 12), so
//! SDK calls such as `models.list()` work without contacting a provider. The answers are built
//! from the configuration when such a request comes ([`answer`]; the `Config` holds only
//! `models_path` and does not know this module): any other request costs a prefix comparison
//! ([`asked`]). Building them is cold code: every function here but [`asked`] is `#[inline]`,
//! compiled where `roles::LocalAnswers::new` takes [`answer`]'s address, which in the wasm
//! module is the module crate at opt-level "z" (BENCHMARKS.md "Module size").
//!
//! Listed: every concrete model name a chain serves, that is, exact names in chains' and
//! providers' `models`, and the models chain entries rewrite to, kept when a chain's patterns
//! match the name and one of that chain's providers serves it. A pattern (`gpt-*`) lists
//! nothing by itself. Two dialects: OpenAI's list (the default) and, for requests carrying
//! `anthropic-version`, Anthropic's.

use crate::config::{any_matches, Chain, Config, ModelPattern};
use crate::reply::Reply;
use crate::translate::json::Out;
use std::collections::BTreeMap;

/// The prebuilt answers.
#[derive(Debug, Clone, Default)]
pub struct ModelList {
    /// Path that lists the models (`models_path`); `None` when turned off.
    path: Option<String>,
    /// Model name -> (OpenAI object, Anthropic object), sorted by name.
    models: BTreeMap<String, (String, String)>,
    openai_list: String,
    anthropic_list: String,
}

/// A local answer: status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<'a> {
    pub status: u16,
    pub body: std::borrow::Cow<'a, str>,
    /// `x-should-retry` for error answers.
    pub should_retry: Option<bool>,
}

/// One model in OpenAI's list and in Anthropic's, members in the order a `serde_json::Value`
/// (sorted keys) printed them. Written by hand (`translate::json::Out`), as the filter's other
/// JSON: serde's serialiser is not in the module.
#[inline]
fn objects(name: &str, owner: &str) -> (String, String) {
    let text = |out: Out| String::from_utf8(out.0).unwrap_or_default();
    let mut openai = Out::with_capacity(64 + name.len() + owner.len());
    (openai.open().key("created").num(0).key("id").str(name))
        .key("object")
        .str("model")
        .key("owned_by")
        .str(owner)
        .close();
    let mut anthropic = Out::with_capacity(96 + 2 * name.len());
    (anthropic
        .open()
        .key("created_at")
        .str("1970-01-01T00:00:00Z"))
    .key("display_name")
    .str(name)
    .key("id")
    .str(name)
    .key("type")
    .str("model")
    .close();
    (text(openai), text(anthropic))
}

/// A model name as a JSON string, or `null`.
#[inline]
fn name_or_null(name: Option<&String>) -> String {
    let mut out = Out::with_capacity(32);
    match name {
        Some(name) => out.str(name),
        None => out.null(),
    };
    String::from_utf8(out.0).unwrap_or_default()
}

/// The first provider of `chain` that serves `model` (after the entry's rewrite).
#[inline]
fn first_server<'c>(config: &'c Config, chain: &Chain, model: &str) -> Option<&'c str> {
    chain.entries.iter().find_map(|e| {
        let provider = config.provider(e.provider)?;
        any_matches(&provider.models, e.model.as_deref().unwrap_or(model))
            .then_some(provider.name.as_str())
    })
}

/// The part of `path` (query ignored) below the models path `base`: `""` or `"/"` for the
/// list, `"/{id}"` for one model; `None` when `path` is neither.
fn below<'p>(base: &str, path: &'p str) -> Option<&'p str> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let rest = path.strip_prefix(base)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Whether `path` is `models_path` or one of its models: the only requests [`answer`] answers
/// (a prefix comparison, made for every request).
pub fn asked(config: &Config, path: &str) -> bool {
    (config.models_path.as_deref()).is_some_and(|base| below(base, path).is_some())
}

/// The answer to a request for `path` under `config` (see [`ModelList::answer`]), built from
/// the chains; `None` when `path` is not [`asked`] for. `anthropic`: the request carries
/// `anthropic-version`.
#[inline]
pub fn answer(config: &Config, path: &str, anthropic: bool) -> Option<Answer<'static>> {
    if !asked(config, path) {
        return None;
    }
    let list = ModelList::build(config, config.models_path.as_deref());
    let answer = list.answer(path, || anthropic)?;
    Some(Answer {
        body: answer.body.into_owned().into(),
        ..answer
    })
}

impl ModelList {
    /// Builds the answers for `config`; `path` is where they are served (`None`: nowhere).
    #[inline]
    pub fn build(config: &Config, path: Option<&str>) -> ModelList {
        let exact = |patterns: &[ModelPattern]| -> Vec<String> {
            patterns
                .iter()
                .filter_map(|p| match p {
                    ModelPattern::Exact(name) => Some(name.clone()),
                    _ => None,
                })
                .collect()
        };
        let mut candidates: Vec<String> = Vec::new();
        for chain in &config.chains {
            candidates.extend(exact(&chain.models));
            candidates.extend(chain.entries.iter().filter_map(|e| e.model.clone()));
        }
        for provider in &config.providers {
            candidates.extend(exact(&provider.models));
        }
        let mut models = BTreeMap::new();
        for name in candidates {
            if models.contains_key(&name) {
                continue;
            }
            let owner = config
                .chains
                .iter()
                .filter(|c| any_matches(&c.models, &name))
                .find_map(|c| first_server(config, c, &name));
            let Some(owner) = owner else { continue };
            let objects = objects(&name, owner);
            models.insert(name, objects);
        }
        let joined = |pick: fn(&(String, String)) -> &str| -> String {
            models.values().map(pick).collect::<Vec<_>>().join(",")
        };
        let openai_list = format!(r#"{{"object":"list","data":[{}]}}"#, joined(|m| &m.0));
        let anthropic_list = format!(
            r#"{{"data":[{}],"has_more":false,"first_id":{},"last_id":{}}}"#,
            joined(|m| &m.1),
            name_or_null(models.keys().next()),
            name_or_null(models.keys().next_back()),
        );
        ModelList {
            path: path.filter(|p| !p.is_empty()).map(str::to_string),
            models,
            openai_list,
            anthropic_list,
        }
    }

    /// The model names listed, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// The answer to a request for `path` (query ignored), or `None` when the path is not the
    /// models path or one of its items. `anthropic` tells whether the request carries
    /// `anthropic-version` (asked only for the models path).
    #[inline]
    pub fn answer(&self, path: &str, anthropic: impl FnOnce() -> bool) -> Option<Answer<'_>> {
        let rest = below(self.path.as_deref()?, path)?;
        let anthropic = anthropic();
        if rest.is_empty() || rest == "/" {
            let list = if anthropic {
                &self.anthropic_list
            } else {
                &self.openai_list
            };
            return Some(Answer {
                status: 200,
                body: list.as_str().into(),
                should_retry: None,
            });
        }
        let id = &rest[1..];
        Some(match self.models.get(id) {
            Some((openai, anthropic_object)) => Answer {
                status: 200,
                body: if anthropic { anthropic_object } else { openai }
                    .as_str()
                    .into(),
                should_retry: None,
            },
            None => {
                let reply = Reply::unknown_model(id);
                Answer {
                    status: reply.status,
                    body: reply.body().into(),
                    should_retry: Some(reply.should_retry),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(json: &str) -> ModelList {
        let c = Config::from_json(json.as_bytes(), &|_| None).expect("test config is valid");
        ModelList::build(&c, Some("/v1/models"))
    }

    const GW: &str = r#"{"providers":[
          {"name":"openai","models":["gpt-*","o3"]},
          {"name":"anthropic","models":["claude-*"]},
          {"name":"local","models":["llama-3"]}],
        "chains":[
          {"name":"gpt","models":["gpt-*","o3"],"providers":["openai",{"provider":"anthropic","model":"claude-sonnet-4-5"},{"provider":"openai","model":"gpt-4.1"}]},
          {"name":"claude","models":["claude-*"],"providers":["anthropic"]}]}"#;

    #[test]
    fn lists_the_concrete_names_chains_serve_in_openai_format() {
        let l = list(GW);
        // llama-3: a provider declares it, but no chain serves it.
        assert_eq!(
            l.names().collect::<Vec<_>>(),
            vec!["claude-sonnet-4-5", "gpt-4.1", "o3"]
        );
        let a = l.answer("/v1/models", || false).unwrap();
        assert_eq!(a.status, 200);
        let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["id"], "claude-sonnet-4-5");
        assert_eq!(v["data"][0]["object"], "model");
        assert_eq!(v["data"][0]["owned_by"], "anthropic");
        assert_eq!(v["data"][1]["owned_by"], "openai");
        assert_eq!(
            l.answer("/v1/models?limit=5", || false).unwrap().body,
            a.body
        );
    }

    #[test]
    fn one_model_and_unknown_ones() {
        let l = list(GW);
        let a = l.answer("/v1/models/gpt-4.1", || false).unwrap();
        let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!((a.status, v["id"].as_str()), (200, Some("gpt-4.1")));
        let a = l.answer("/v1/models/nope", || false).unwrap();
        assert_eq!((a.status, a.should_retry), (404, Some(false)));
        let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["error"]["code"], "model_not_found");
        assert!(l.answer("/v1/chat/completions", || false).is_none());
        assert!(l.answer("/v1/modelsx", || false).is_none());
    }

    #[test]
    fn objects_are_byte_for_byte_what_json_values_print() {
        use serde_json::json;
        let l = list(GW);
        let name = "gpt-4.1";
        let openai = json!({"id": name, "object": "model", "created": 0, "owned_by": "openai"});
        let anthropic = json!({"type": "model", "id": name, "display_name": name,
            "created_at": "1970-01-01T00:00:00Z"});
        let one = |anthropic| l.answer("/v1/models/gpt-4.1", || anthropic).unwrap().body;
        assert_eq!(one(false), openai.to_string());
        assert_eq!(one(true), anthropic.to_string());
        let page = l.answer("/v1/models", || true).unwrap().body;
        assert!(
            page.ends_with(r#""has_more":false,"first_id":"claude-sonnet-4-5","last_id":"o3"}"#)
        );
        let empty =
            list(r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}]}"#);
        assert_eq!(
            empty.answer("/v1/models", || true).unwrap().body,
            r#"{"data":[],"has_more":false,"first_id":null,"last_id":null}"#
        );
    }

    #[test]
    fn anthropic_clients_get_anthropic_pages() {
        let l = list(GW);
        let v: serde_json::Value =
            serde_json::from_str(&l.answer("/v1/models", || true).unwrap().body).unwrap();
        assert_eq!(v["data"][0]["type"], "model");
        assert_eq!(v["has_more"], false);
        assert_eq!(v["first_id"], "claude-sonnet-4-5");
        assert_eq!(v["last_id"], "o3");
        let v: serde_json::Value =
            serde_json::from_str(&l.answer("/v1/models/o3", || true).unwrap().body).unwrap();
        assert_eq!(v["display_name"], "o3");
    }

    #[test]
    fn answered_from_the_configuration_at_its_models_path_only() {
        let c = Config::from_json(GW.as_bytes(), &|_| None).unwrap();
        let built = list(GW);
        let a = answer(&c, "/v1/models?x=1", false).unwrap();
        assert_eq!(a, built.answer("/v1/models", || false).unwrap());
        let one = answer(&c, "/v1/models/o3", true).unwrap();
        assert_eq!(one, built.answer("/v1/models/o3", || true).unwrap());
        assert!(asked(&c, "/v1/models/o3") && asked(&c, "/v1/models/"));
        for other in ["/v1/chat/completions", "/v1/modelsx"] {
            assert!(!asked(&c, other));
            assert!(answer(&c, other, false).is_none());
        }
        let off = GW.replacen('{', r#"{"models_path":"","#, 1);
        let off = Config::from_json(off.as_bytes(), &|_| None).unwrap();
        assert!(!asked(&off, "/v1/models"));
        assert!(answer(&off, "/v1/models", false).is_none());
    }

    #[test]
    fn off_when_no_path() {
        let c = Config::from_json(GW.as_bytes(), &|_| None).unwrap();
        assert!(ModelList::build(&c, None)
            .answer("/v1/models", || false)
            .is_none());
        let empty =
            list(r#"{"providers":[{"name":"a"}],"chains":[{"name":"c","providers":["a"]}]}"#);
        assert_eq!(
            empty.answer("/v1/models", || false).unwrap().body,
            r#"{"object":"list","data":[]}"#
        );
    }
}
