//! Which of the caller's own request headers reach a provider (docs/behaviour.md section 7): a provider is a
//! third party, so by default only the API headers that OpenAI, Azure OpenAI and Anthropic
//! clients send go through; a provider's `forward_headers` adds names (or `prefix*`) to that
//! list, or opens it fully (`all`).
//!
//! The downstream role asks [`HeaderPolicy::verdict`] once per caller header (it reads the
//! header map once anyway): headers no provider takes are removed before routing; headers some
//! providers take and others do not are removed too and kept in filter state, and each attempt's
//! upstream role puts back the ones its provider takes ([`HeaderPolicy::attempt_edits`]). When
//! every provider forwards the same headers, the upstream role has nothing to do.

use super::Provider;
use crate::header_pairs::HeaderPairs;
use crate::ids::ProviderId;
use crate::pattern::ModelPattern;
use crate::translate::Api;
use crate::wire::ANTHROPIC_BETA;

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
/// (Caller-sent `x-envoy-*` headers that steer retries are removed separately, behaviour.md 2.6.)
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
    /// removed, docs/behaviour.md section 7).
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
    /// come from an Anthropic caller whose request is translated for it, behaviour.md 13).
    pub fn for_api_with_extra<'a>(
        api: Option<Api>,
        extra: impl Iterator<Item = &'a str>,
    ) -> Forward {
        let mut list: Vec<ModelPattern> = DEFAULT_FORWARDED
            .iter()
            .filter(|p| {
                !(matches!(api, Some(Api::OpenAiChat | Api::OpenAiResponses))
                    && **p == "anthropic-*")
            })
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

/// Which caller headers reach which provider: each provider's rule (`Provider::forward`) and
/// the headers it has its own value for (`Provider::owns`), read from `Config::providers`.
#[derive(Debug, Clone, Default)]
pub struct HeaderPolicy {
    /// Every header a provider sets (`Config::cleared_headers`): the caller's copies of the
    /// credentials among them (every provider's, the signer's, the caller's gateway key) never
    /// go on, whatever the rules say; those of the others (`Provider::sets_extra`) go to the
    /// providers that take them.
    never: Vec<String>,
    /// Some provider takes the caller's `anthropic-beta` into its body (Bedrock): it is kept
    /// even when no provider takes it as a header.
    beta_in_body: bool,
    uniform: bool,
}

impl HeaderPolicy {
    pub fn new(providers: &[Provider], never: Vec<String>) -> HeaderPolicy {
        let beta_in_body = providers
            .iter()
            .any(|p| p.envelope == Some(crate::envelope::Envelope::Bedrock));
        let mut p = HeaderPolicy {
            never,
            beta_in_body,
            uniform: false,
        };
        // Uniform: the rules are the same and no header some provider has its own value for
        // goes to only some providers (then every attempt would have to edit it).
        let first = providers.first().map(|p| &p.forward);
        let mut uniform = true;
        for provider in providers {
            uniform &= Some(&provider.forward) == first;
            for own in provider.own_names() {
                uniform &= p.verdict(providers, own.as_bytes()) != Verdict::PerProvider;
            }
        }
        p.uniform = uniform;
        p
    }

    fn owned(&self, providers: &[Provider], name: &str) -> bool {
        self.never.iter().any(|n| n == name) && !providers.iter().any(|p| p.sets_extra(name))
    }

    /// Every provider forwards the same headers: attempts never need to change them.
    pub fn uniform(&self) -> bool {
        self.uniform
    }

    /// Whether `provider` may receive the caller's header `name` (lowercase).
    pub fn allows(&self, providers: &[Provider], provider: ProviderId, name: &[u8]) -> bool {
        envoy_managed(name)
            || std::str::from_utf8(name).is_ok_and(|name| {
                !self.owned(providers, name) && takes(providers.get(provider.index()), name)
            })
    }

    /// What the downstream role does with the caller's header `name` (lowercase, as Envoy
    /// hands names over).
    #[inline(never)]
    pub fn verdict(&self, providers: &[Provider], name: &[u8]) -> Verdict {
        if envoy_managed(name) {
            return Verdict::Keep;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            return Verdict::Drop;
        };
        if self.owned(providers, name) {
            return Verdict::Drop;
        }
        let taking = if self.uniform {
            // Every provider decides as the first does.
            usize::from(takes(providers.first(), name)) * providers.len()
        } else {
            providers.iter().filter(|&p| takes(Some(p), name)).count()
        };
        if taking == providers.len() && taking > 0 {
            Verdict::Keep
        } else if taking > 0 || (self.beta_in_body && name == ANTHROPIC_BETA) {
            Verdict::PerProvider
        } else {
            Verdict::Drop
        }
    }

    /// The edits that give `provider`'s attempt exactly the kept headers it takes: `kept` is
    /// what the downstream role stored ([`encode_kept`]). Envoy shares one header map across
    /// attempts, so a header an earlier attempt put back is removed again where not allowed.
    pub fn attempt_edits<'a>(
        &self,
        providers: &[Provider],
        provider: ProviderId,
        kept: &'a [u8],
    ) -> Vec<HeaderEdit<'a>> {
        let mut edits: Vec<HeaderEdit<'a>> = Vec::new();
        for (name, value) in HeaderPairs::new(kept) {
            let Ok(text) = std::str::from_utf8(name) else {
                continue;
            };
            let seen = edits.iter().any(|e| e.name == text);
            if self.allows(providers, provider, name) {
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

/// Whether provider `p`'s rule takes the caller's `name` and it has no value of its own.
fn takes(p: Option<&Provider>, name: &str) -> bool {
    p.is_some_and(|p| p.forward.allows(name) && !p.owns(name))
}

/// The caller's (first) value of header `name` among the kept headers ([`encode_kept`]).
pub fn kept_value<'k>(kept: &'k [u8], name: &str) -> Option<&'k str> {
    let pairs = HeaderPairs::new(kept);
    let (_, value) = pairs.iter().find(|(n, _)| *n == name.as_bytes())?;
    std::str::from_utf8(value).ok()
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
    use crate::config::Config;

    /// The policy of providers `p0`, `p1`, ... (each given as the JSON members after its
    /// name), read as the filter reads it.
    struct Policy(Config);

    impl Policy {
        fn of(providers: &[&str]) -> Policy {
            let list: Vec<String> = (providers.iter().enumerate())
                .map(|(i, p)| format!(r#"{{"name": "p{i}", "cluster": "c{i}"{p}}}"#))
                .collect();
            let names: Vec<String> = (0..providers.len()).map(|i| format!(r#""p{i}""#)).collect();
            let json = format!(
                r#"{{"providers": [{}], "chains": [{{"name": "c", "models": ["*"], "providers": [{}]}}]}}"#,
                list.join(","),
                names.join(",")
            );
            Policy(Config::from_json(json.as_bytes(), &|_| None).expect("valid"))
        }

        fn uniform(&self) -> bool {
            self.0.forwarding.uniform()
        }

        fn verdict(&self, name: &[u8]) -> Verdict {
            self.0.forwarding.verdict(&self.0.providers, name)
        }

        fn allows(&self, provider: ProviderId, name: &[u8]) -> bool {
            self.0.forwarding.allows(&self.0.providers, provider, name)
        }

        fn attempt_edits<'a>(&self, provider: ProviderId, kept: &'a [u8]) -> Vec<HeaderEdit<'a>> {
            (self.0.forwarding).attempt_edits(&self.0.providers, provider, kept)
        }
    }

    #[test]
    fn the_default_list_forwards_sdk_headers_and_nothing_private() {
        let p = Policy::of(&["", ""]);
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
        let p = Policy::of(&[
            r#", "credential": {"header": "authorization", "value": "k0"}"#,
            r#", "forward_headers": ["x-tenant", "x-org-*"], "credential": {"header": "x-api-key", "value": "k1"}"#,
            r#", "forward_headers": "all""#,
        ]);
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
        let only_list = Policy::of(&["", r#", "forward_headers": ["x-tenant"]"#]);
        assert_eq!(only_list.verdict(b"cookie"), Verdict::Drop);
    }

    #[test]
    fn attempts_put_back_only_what_their_provider_takes() {
        let p = Policy::of(&["", r#", "forward_headers": ["x-tenant"]"#]);
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

    #[test]
    fn a_header_a_provider_sets_itself_goes_to_the_others_from_the_caller() {
        // An `api: anthropic` provider (its default `anthropic-version`) and one that declares
        // no API (it takes what the caller sends).
        let p = Policy::of(&[
            r#", "api": "anthropic", "credential": {"header": "x-api-key", "value": "k"}"#,
            "",
        ]);
        assert!(!p.uniform(), "attempts must edit it");
        assert_eq!(p.verdict(b"anthropic-version"), Verdict::PerProvider);
        assert_eq!(p.verdict(b"anthropic-beta"), Verdict::Keep);
        assert_eq!(p.verdict(b"x-api-key"), Verdict::Drop, "a credential");
        let kept = encode_kept(&[(b"anthropic-version", b"2024-01-01")]);
        let edits = |i: u8| {
            p.attempt_edits(i.into(), &kept)
                .iter()
                .map(|e| (e.name, e.value))
                .collect::<Vec<_>>()
        };
        assert_eq!(edits(0), vec![("anthropic-version", None)], "its own");
        assert_eq!(
            edits(1),
            vec![("anthropic-version", Some(&b"2024-01-01"[..]))],
            "the caller's"
        );
        // A header set by `headers:` alike.
        let p = Policy::of(&[
            r#", "headers": {"X-Team": "gw"}"#,
            r#", "forward_headers": ["x-team"]"#,
        ]);
        assert_eq!(p.verdict(b"x-team"), Verdict::PerProvider);
        assert!(!p.allows(0.into(), b"x-team") && p.allows(1.into(), b"x-team"));
        // Every provider has its own: nothing to carry, and nothing changes per attempt.
        let all_own = Policy::of(&[r#", "api": "anthropic""#, r#", "api": "anthropic""#]);
        assert!(all_own.uniform());
        assert_eq!(all_own.verdict(b"anthropic-version"), Verdict::Drop);
        assert_eq!(all_own.verdict(b"anthropic-beta"), Verdict::Keep);
    }

    #[test]
    fn bedrock_gets_the_callers_beta_flags_only_for_its_body() {
        let bedrock = r#", "api": "bedrock", "models": ["m"]"#;
        let p = Policy::of(&[r#", "api": "anthropic""#, bedrock]);
        assert!(!p.uniform());
        assert_eq!(p.verdict(b"anthropic-beta"), Verdict::PerProvider);
        assert_eq!(p.verdict(b"anthropic-version"), Verdict::Drop);
        let kept = encode_kept(&[(b"anthropic-beta", b"a-1, b-2"), (b"x-tenant", b"t")]);
        let names = |i: u8| {
            p.attempt_edits(i.into(), &kept)
                .iter()
                .map(|e| e.value.is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(0), vec![true, false], "anthropic takes it");
        assert_eq!(names(1), vec![false, false], "removed for Bedrock");
        assert_eq!(kept_value(&kept, ANTHROPIC_BETA), Some("a-1, b-2"));
        assert_eq!(kept_value(&kept, "anthropic-version"), None);
        // Bedrock alone: no provider takes the header, but Bedrock's body needs it.
        let alone = Policy::of(&[bedrock]);
        assert_eq!(alone.verdict(b"anthropic-beta"), Verdict::PerProvider);
        assert_eq!(alone.verdict(b"anthropic-version"), Verdict::Drop);
        assert_eq!(alone.verdict(b"x-stainless-lang"), Verdict::Keep);
        assert_eq!(alone.verdict(b"x-amz-date"), Verdict::Drop);
    }
}
