//! Which of the caller's own request headers reach a provider (SPEC section 7): a provider is a
//! third party, so by default only the API headers that OpenAI, Azure OpenAI and Anthropic
//! clients send go through; a provider's `forward_headers` adds names (or `prefix*`) to that
//! list, or opens it fully (`all`).
//!
//! The downstream role asks [`HeaderPolicy::verdict`] once per caller header (it reads the
//! header map once anyway): headers no provider takes are removed before routing; headers some
//! providers take and others do not are removed too and kept in filter state, and each attempt's
//! upstream role puts back the ones its provider takes ([`HeaderPolicy::attempt_edits`]). When
//! every provider forwards the same headers, the upstream role has nothing to do.

use crate::header_pairs::HeaderPairs;
use crate::ids::ProviderId;
use crate::pattern::ModelPattern;
use crate::translate::Api;

/// What every provider accepts unless its `forward_headers` says `all`: the request headers
/// the official OpenAI, Azure OpenAI and Anthropic SDKs send that the APIs use.
/// `accept-encoding` is left out on purpose: a compressed error body could not be read to
/// classify it, and Envoy does not decompress.
pub const DEFAULT_FORWARDED: [&str; 9] = [
    "content-type",
    "accept",
    "user-agent",
    "openai-*",
    "anthropic-*",
    "x-stainless-*",
    "idempotency-key",
    "x-client-request-id",
    "x-ms-client-request-id",
];

/// Headers Envoy manages or its router needs: never touched by the forwarding rule.
/// (Caller-sent `x-envoy-*` headers that steer retries are removed separately, SPEC 2.6.)
/// `x-forwarded-proto` is Envoy's: without it Envoy 1.40 finds no route for the request.
pub fn envoy_managed(name: &[u8]) -> bool {
    name.first() == Some(&b':')
        || name.starts_with(b"x-envoy-")
        || matches!(
            name,
            b"x-request-id"
                | b"x-forwarded-proto"
                | b"content-length"
                | b"transfer-encoding"
                | b"te"
                | b"host"
                | b"connection"
                | b"keep-alive"
                | b"upgrade"
                | b"proxy-connection"
        )
}

/// One provider's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// The default list and the provider's own names and `prefix*` patterns (lowercase).
    List(Vec<ModelPattern>),
    /// Every caller header (credentials of the caller and of other providers are still
    /// removed, SPEC section 7).
    All,
}

impl Default for Forward {
    fn default() -> Self {
        Forward::with_extra(std::iter::empty())
    }
}

impl Forward {
    /// The default list plus `extra` names or `prefix*` patterns.
    pub fn with_extra<'a>(extra: impl Iterator<Item = &'a str>) -> Forward {
        Forward::for_api_with_extra(None, extra)
    }

    /// The default list of a provider speaking `api` (see [`Forward::for_api_with_extra`]).
    pub fn for_api(api: Option<Api>) -> Forward {
        Forward::for_api_with_extra(api, std::iter::empty())
    }

    /// The default list plus `extra`, for a provider speaking `api`: one that declares OpenAI's
    /// API does not take the caller's `anthropic-*` headers unless `extra` names them (they
    /// come from an Anthropic caller whose request is translated for it, SPEC 13).
    pub fn for_api_with_extra<'a>(
        api: Option<Api>,
        extra: impl Iterator<Item = &'a str>,
    ) -> Forward {
        let mut list: Vec<ModelPattern> = DEFAULT_FORWARDED
            .iter()
            .filter(|p| !(api == Some(Api::OpenAiChat) && **p == "anthropic-*"))
            .map(|p| ModelPattern::parse(p))
            .collect();
        for name in extra {
            let pattern = ModelPattern::parse(&name.to_ascii_lowercase());
            if !list.contains(&pattern) {
                list.push(pattern);
            }
        }
        Forward::List(list)
    }

    fn allows(&self, name: &str) -> bool {
        match self {
            Forward::All => true,
            Forward::List(list) => list.iter().any(|p| p.matches(name)),
        }
    }
}

/// What the downstream role does with one caller header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every provider takes it (or Envoy manages it): leave it.
    Keep,
    /// No provider takes it: remove it before routing.
    Drop,
    /// Some providers take it: remove it, and keep it for the attempts that may carry it.
    PerProvider,
}

/// One change an attempt makes to the shared request header map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderEdit<'a> {
    pub name: &'a str,
    /// `None` removes the header.
    pub value: Option<&'a [u8]>,
    /// Add another value instead of replacing (a repeated header).
    pub append: bool,
}

/// The forwarding rules of every provider, indexed like `Config::providers`.
#[derive(Debug, Clone, Default)]
pub struct HeaderPolicy {
    rules: Vec<Forward>,
    /// Headers the configuration owns (credentials, the caller's gateway key, headers a
    /// provider sets): the caller's copies never go on, whatever the rules say.
    never: Vec<String>,
    uniform: bool,
}

impl HeaderPolicy {
    pub fn new(rules: Vec<Forward>, never: Vec<String>) -> HeaderPolicy {
        let uniform = rules.iter().skip(1).all(|r| rules.first() == Some(r));
        HeaderPolicy {
            rules,
            never,
            uniform,
        }
    }

    fn owned(&self, name: &[u8]) -> bool {
        self.never.iter().any(|n| n.as_bytes() == name)
    }

    /// Every provider forwards the same headers: attempts never need to change them.
    pub fn uniform(&self) -> bool {
        self.uniform
    }

    /// Whether `provider` may receive the caller's header `name` (lowercase).
    pub fn allows(&self, provider: ProviderId, name: &[u8]) -> bool {
        envoy_managed(name)
            || (!self.owned(name)
                && std::str::from_utf8(name).is_ok_and(|n| {
                    self.rules
                        .get(provider.index())
                        .is_some_and(|r| r.allows(n))
                }))
    }

    /// What the downstream role does with the caller's header `name` (lowercase, as Envoy
    /// hands names over).
    pub fn verdict(&self, name: &[u8]) -> Verdict {
        if envoy_managed(name) {
            return Verdict::Keep;
        }
        if self.owned(name) {
            return Verdict::Drop;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            return Verdict::Drop;
        };
        let mut rules = self.rules.iter();
        let Some(first) = rules.next() else {
            return Verdict::Drop;
        };
        let first = first.allows(name);
        if self.uniform || rules.clone().all(|r| r.allows(name) == first) {
            return if first { Verdict::Keep } else { Verdict::Drop };
        }
        Verdict::PerProvider
    }

    /// The edits that give `provider`'s attempt exactly the kept headers it takes: `kept` is
    /// what the downstream role stored ([`encode_kept`]). Envoy shares one header map across
    /// attempts, so a header an earlier attempt put back is removed again where not allowed.
    pub fn attempt_edits<'a>(&self, provider: ProviderId, kept: &'a [u8]) -> Vec<HeaderEdit<'a>> {
        let mut edits: Vec<HeaderEdit<'a>> = Vec::new();
        for (name, value) in HeaderPairs::new(kept) {
            let Ok(text) = std::str::from_utf8(name) else {
                continue;
            };
            let seen = edits.iter().any(|e| e.name == text);
            if self.allows(provider, name) {
                edits.push(HeaderEdit {
                    name: text,
                    value: Some(value),
                    append: seen,
                });
            } else if !seen {
                edits.push(HeaderEdit {
                    name: text,
                    value: None,
                    append: false,
                });
            }
        }
        edits
    }
}

/// The headers kept for some providers, in the layout proxy-wasm uses for header maps (read
/// back with [`HeaderPairs`]).
pub fn encode_kept(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
    let size = 4 + pairs
        .iter()
        .map(|(n, v)| 8 + n.len() + v.len() + 2)
        .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (n, v) in pairs {
        out.extend_from_slice(&(n.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (n, v) in pairs {
        out.extend_from_slice(n);
        out.push(0);
        out.extend_from_slice(v);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(extra: &[&str]) -> Forward {
        Forward::with_extra(extra.iter().copied())
    }

    #[test]
    fn the_default_list_forwards_sdk_headers_and_nothing_private() {
        let p = HeaderPolicy::new(vec![Forward::default(), Forward::default()], Vec::new());
        assert!(p.uniform());
        for keep in [
            "content-type",
            "accept",
            "user-agent",
            "openai-organization",
            "anthropic-version",
            "anthropic-beta",
            "x-stainless-lang",
            "x-stainless-retry-count",
            "idempotency-key",
            ":path",
            ":authority",
            "x-envoy-attempt-count",
            "x-request-id",
            "content-length",
            "transfer-encoding",
        ] {
            assert_eq!(p.verdict(keep.as_bytes()), Verdict::Keep, "{keep}");
        }
        for drop in [
            "cookie",
            "x-client-secret",
            "x-tenant",
            "traceparent",
            "x-b3-traceid",
            "authorization",
            "x-forwarded-for",
            "accept-encoding",
            "x-gateway-consumer",
        ] {
            assert_eq!(p.verdict(drop.as_bytes()), Verdict::Drop, "{drop}");
        }
        assert_eq!(p.verdict(b"x-\xff"), Verdict::Drop);
    }

    #[test]
    fn extra_names_and_all_open_the_list_per_provider() {
        let p = HeaderPolicy::new(
            vec![
                Forward::default(),
                list(&["x-tenant", "x-org-*"]),
                Forward::All,
            ],
            vec!["authorization".into(), "x-api-key".into()],
        );
        assert!(!p.uniform());
        assert_eq!(p.verdict(b"x-tenant"), Verdict::PerProvider);
        assert_eq!(p.verdict(b"x-org-id"), Verdict::PerProvider);
        assert_eq!(
            p.verdict(b"cookie"),
            Verdict::PerProvider,
            "provider 2 takes all"
        );
        assert_eq!(p.verdict(b"accept"), Verdict::Keep);
        assert!(p.allows(1.into(), b"x-org-id") && !p.allows(0.into(), b"x-org-id"));
        assert!(p.allows(2.into(), b"cookie") && !p.allows(1.into(), b"cookie"));
        assert_eq!(
            p.verdict(b"authorization"),
            Verdict::Drop,
            "never the caller's key"
        );
        assert!(!p.allows(2.into(), b"x-api-key"));
        let only_list = HeaderPolicy::new(vec![Forward::default(), list(&["x-tenant"])], vec![]);
        assert_eq!(only_list.verdict(b"cookie"), Verdict::Drop);
    }

    #[test]
    fn attempts_put_back_only_what_their_provider_takes() {
        let p = HeaderPolicy::new(vec![Forward::default(), list(&["x-tenant"])], vec![]);
        let kept = encode_kept(&[
            (b"x-tenant", b"acme"),
            (b"x-tenant", b"caf\xe9"),
            (b"cookie", b"a=1"),
        ]);
        let edits = p.attempt_edits(1.into(), &kept);
        assert_eq!(
            edits,
            vec![
                HeaderEdit {
                    name: "x-tenant",
                    value: Some(b"acme"),
                    append: false
                },
                HeaderEdit {
                    name: "x-tenant",
                    value: Some(b"caf\xe9"),
                    append: true
                },
                HeaderEdit {
                    name: "cookie",
                    value: None,
                    append: false
                },
            ]
        );
        let edits = p.attempt_edits(0.into(), &kept);
        assert_eq!(
            edits.iter().map(|e| (e.name, e.value)).collect::<Vec<_>>(),
            vec![("x-tenant", None), ("cookie", None)]
        );
        assert!(p.attempt_edits(0.into(), b"garbage").is_empty());
    }
}
