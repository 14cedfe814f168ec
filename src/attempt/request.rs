//! The request side of an attempt: what attempt k changes on its request's headers and body
//! (docs/behaviour.md sections 4, 7 and 13).

use super::{Attempt, Translation};
use crate::config::{forward, Config, Provider};
use crate::envelope::Envelope;
use crate::ids::ProviderId;
use crate::reply::Reply;
use crate::rewrite;
use crate::translate::entry_settings::{self, EntrySettings};
use crate::translate::{self, Api};
use std::borrow::Cow;

/// What happens to the request body of this attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyEdit {
    /// Forward it as it is.
    Keep,
    /// An earlier attempt may have rewritten the body and its length: restore the planned length.
    RestoreLength(u64),
    /// Hold the headers until the whole body is here, then edit it ([`WholeEdit::apply`]) and
    /// set the new length.
    Whole(WholeEdit),
}

/// The one edit of a whole request body, carried from the request headers to the body and
/// applied there in one go ([`WholeEdit::apply`]), its steps in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WholeEdit {
    /// Translated for the provider's API first (behaviour.md 13).
    pub translate: Option<TranslateEdit>,
    /// Or, same API: what another provider of the chain gave the caller that this one cannot
    /// read, mended ([`Mend`]).
    pub mend: Mend,
    /// The entry's model written in (same API; a translation writes its own).
    pub model: Option<String>,
    /// The entry's request settings, in the dialect the provider gets (behaviour.md 7).
    pub settings: Option<SettingsEdit>,
    /// Then put in the provider's envelope (Bedrock, Vertex: the version field instead of
    /// `model`), with the caller's `anthropic-beta` flags for Bedrock ([`BodyEdit::with_kept`]).
    pub envelope: Option<(Envelope, Option<String>)>,
}

/// What a same-API attempt mends in its caller's body, decided per chain when the
/// configuration loads ([`mend`]); each rule looks for its marker once and copies nothing when
/// the body has none (behaviour.md 13).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mend {
    /// Tool call ids sent without the Gemini signatures they may carry
    /// (`translate::gemini::unsign_ids`).
    pub unsign: bool,
    /// The caller's dialect (Messages or Responses), whose reasoning blocks we wrapped for it
    /// from the other vendor's are taken out (`translate::model::unwrap_reasoning`).
    pub unwrap: Option<Api>,
}

impl Mend {
    /// `body` mended, `None` when nothing in it needed mending.
    pub fn apply(self, body: &[u8]) -> Option<Vec<u8>> {
        let out = self
            .unwrap
            .and_then(|api| translate::model::unwrap_reasoning(body, api));
        let ids = self
            .unsign
            .then(|| translate::gemini::unsign_ids(out.as_deref().unwrap_or(body)));
        ids.flatten().or(out)
    }
}

/// A request translated for its provider's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslateEdit {
    pub translation: Translation,
    /// The model the translated body names (the chain entry's, else the caller's).
    pub model: String,
    /// `max_tokens` for a Messages provider when the caller sets none.
    pub default_max_tokens: u32,
    /// The provider, named in the `400` of a request its API cannot carry.
    pub provider: ProviderId,
    /// The caller asked for a stream.
    pub stream: bool,
}

/// A request body edited ([`WholeEdit::apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditedBody {
    /// The body to send; `None` when it goes as it is.
    pub body: Option<Vec<u8>>,
    /// Its `content-length`.
    pub len: usize,
    /// An OpenAI caller asked for usage in its translated stream (`translate::StreamContext`).
    pub include_usage: bool,
}

impl BodyEdit {
    /// The edit with the caller's `anthropic-beta` header put in a Bedrock envelope: the
    /// downstream role kept the header aside (`kept`, `handoff::FORWARD`), never for Bedrock's
    /// map, which takes the flags in its body only. A translated body goes without them.
    pub fn with_kept(mut self, kept: Option<&[u8]>) -> Self {
        if let BodyEdit::Whole(w) = &mut self {
            if let (None, Some((Envelope::Bedrock, beta)), Some(kept)) =
                (&w.translate, &mut w.envelope, kept)
            {
                *beta = forward::kept_value(kept, crate::wire::ANTHROPIC_BETA).map(str::to_string);
            }
        }
        self
    }
}

impl WholeEdit {
    /// The body to send for the caller's `body`: translated, the model and the entry's settings
    /// written in, put in the envelope, each step only when the edit has it. A body that is not
    /// a JSON object goes as it is, except to a translation: then the `400` the caller gets
    /// (planning refuses such a request before any attempt and skips such fallbacks,
    /// behaviour.md 2.4: this is the last guard, for a body planning did not read).
    pub fn apply(&self, config: &Config, body: &[u8]) -> Result<EditedBody, Reply> {
        let mut out: Option<Vec<u8>> = None;
        let mut include_usage = false;
        if let Some(t) = &self.translate {
            let (caller, provider) = (t.translation.caller, t.translation.provider);
            include_usage = caller == Api::OpenAiChat && translate::wants_stream_usage(body);
            let cx = translate::RequestContext {
                model: &t.model,
                default_max_tokens: t.default_max_tokens,
                stream: t.stream,
            };
            let translated = translate::request(caller, provider, body, &cx).map_err(|why| {
                let name = config.provider(t.provider).map_or("", |p| p.name.as_str());
                Reply::untranslatable(name, provider.as_str(), why.what())
            })?;
            out = Some(translated);
        }
        out = self.mend.apply(body).or(out);
        if let Some(model) = &self.model {
            let base = out.as_deref().unwrap_or(body);
            let scan = rewrite::scan_top_level(base).ok();
            out = scan
                .and_then(|scan| rewrite::rewrite(base, &scan, Some(model), false))
                .or(out);
        }
        if let Some((dialect, settings)) = &self.settings {
            out = entry_settings::apply(out.as_deref().unwrap_or(body), *dialect, settings).or(out);
        }
        if let Some((envelope, beta)) = &self.envelope {
            out = envelope
                .body(out.as_deref().unwrap_or(body), beta.as_deref())
                .or(out);
        }
        let len = out.as_ref().map_or(body.len(), Vec::len);
        Ok(EditedBody {
            body: out,
            len,
            include_usage,
        })
    }
}

/// Everything attempt k changes on its request, in the order to apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEdits<'a> {
    /// Removed first: every provider's credential and extra headers, and the caller's.
    pub clear: &'a [String],
    /// Then, when providers take different caller headers: put back this provider's share of
    /// them (`handoff::FORWARD`, applied with `config::forward::HeaderPolicy::attempt_edits`).
    pub forwarded: bool,
    /// Then set: this provider's own.
    pub set: &'a [(String, String)],
    /// New `:authority`, if any.
    pub authority: Option<&'a str>,
    /// New `:path`, if any.
    pub path: Option<Cow<'a, str>>,
    /// Remove `x-envoy-max-retries` (the router consumed it before the first attempt).
    pub drop_max_retries: bool,
    pub body: BodyEdit,
}

/// What to change on the request of attempt `a` (`end_of_stream`: the request has no body).
pub fn request_edits<'a>(
    config: &'a Config,
    a: &Attempt<'a, 'a>,
    end_of_stream: bool,
) -> RequestEdits<'a> {
    let later = a.number > 1;
    let authority = match &a.provider.authority {
        Some(authority) => Some(authority.as_str()),
        None if later => Some(a.plan.authority),
        None => None,
    };
    let path = provider_path(
        a.provider,
        a.translation.map(|t| t.provider),
        a.plan.path,
        a.model(),
        a.plan.stream,
    )
    .or_else(|| later.then_some(Cow::Borrowed(a.plan.path)));
    let has_body = a.plan.body_len > 0 && !end_of_stream;
    let envelope = a.provider.envelope.filter(|e| e.edits_body() && has_body);
    let rewrite_to = a
        .entry
        .model
        .as_deref()
        .filter(|m| *m != a.plan.model && has_body);
    // A translated attempt to an envelope's provider: translated, then put in the envelope
    // (the upstream role does both in one pause).
    let settings = settings_edit(a).filter(|_| has_body);
    let mend = mend(a).filter(|_| has_body).unwrap_or_default();
    let whole = |w: WholeEdit| {
        BodyEdit::Whole(WholeEdit {
            settings,
            mend,
            ..w
        })
    };
    let body = match (a.translation, envelope, rewrite_to) {
        (Some(translation), _, _) if has_body => whole(WholeEdit {
            translate: Some(TranslateEdit {
                translation,
                model: a.model().to_string(),
                default_max_tokens: a.provider.max_tokens,
                provider: a.provider_id,
                stream: a.plan.stream,
            }),
            envelope: a
                .provider
                .envelope
                .filter(|e| e.edits_body())
                .map(|e| (e, None)),
            ..WholeEdit::default()
        }),
        (_, Some(envelope), _) => whole(WholeEdit {
            envelope: Some((envelope, None)),
            ..WholeEdit::default()
        }),
        (_, _, model) if model.is_some() || settings.is_some() || mend != Mend::default() => {
            whole(WholeEdit {
                model: model.map(str::to_string),
                ..WholeEdit::default()
            })
        }
        _ if later => BodyEdit::RestoreLength(a.plan.body_len),
        _ => BodyEdit::Keep,
    };
    RequestEdits {
        clear: &config.cleared_headers,
        forwarded: !config.forwarding.uniform(),
        set: &a.provider.set_headers,
        authority,
        path,
        drop_max_retries: a.number == 1,
        body,
    }
}

/// What same-API attempt `a` mends in its caller's body (`None`: nothing; a translated
/// request is written without either, behaviour.md 13). Only a chain that can give a caller
/// such things looks (decided when the configuration loads):
/// - a chain with a Gemini-native entry (`Chain::signs_calls`): a Chat, Messages or
///   Responses caller's tool call ids go to a provider that is not Gemini's without their
///   signatures (a Gemini-native provider takes them back);
/// - a Messages caller's in a chain with an `openai_responses` entry (`Chain::wraps_thinking`),
///   a Responses caller's in one with a Messages entry (`Chain::wraps_reasoning`): the
///   reasoning we wrapped for it from the other vendor's goes to neither vendor as it is
///   (each refuses a signature or encrypted content it did not make).
pub fn mend(a: &Attempt<'_, '_>) -> Option<Mend> {
    let caller = a.plan.caller_api.filter(|_| a.translation.is_none())?;
    let mend = Mend {
        unsign: a.chain.signs_calls && a.provider.api != Some(Api::Gemini) && caller != Api::Gemini,
        unwrap: Some(caller).filter(|c| match c {
            Api::AnthropicMessages => a.chain.wraps_thinking,
            Api::OpenAiResponses => a.chain.wraps_reasoning,
            _ => false,
        }),
    };
    (mend != Mend::default()).then_some(mend)
}

/// The `:path` an attempt to `provider` goes out on, for a caller's request on `caller_path`
/// translated to `translated_to` (if at all), sending `model`, streamed or not; `None`: the
/// caller's path as it is. The upstream role sends it ([`request_edits`]) and `explain` prints
/// it: one place says where an attempt goes.
pub fn provider_path<'a>(
    provider: &Provider,
    translated_to: Option<Api>,
    caller_path: &'a str,
    model: &str,
    stream: bool,
) -> Option<Cow<'a, str>> {
    let prefix = provider.path_prefix.as_deref();
    // The provider API's endpoint when translated (the caller's query is for the caller's API).
    let endpoint = translated_to.map(Api::endpoint);
    match (provider.envelope, endpoint, prefix) {
        (Some(envelope), _, _) => Some(Cow::Owned(envelope.path(
            prefix,
            endpoint.unwrap_or(caller_path),
            model,
            stream,
        ))),
        (None, Some(endpoint), _) => {
            Some(Cow::Owned(format!("{}{endpoint}", prefix.unwrap_or(""))))
        }
        // The caller's API as it is: a Gemini caller's model is in its path, so the entry's is
        // written there (as `model` is in the others' bodies), and so is a gathered attempt's
        // stream.
        (None, None, _) => match (
            translate::gemini::with_model(caller_path, model, stream),
            prefix,
        ) {
            (Some(path), _) => Some(Cow::Owned(format!("{}{path}", prefix.unwrap_or("")))),
            (None, Some(prefix)) => Some(Cow::Owned(format!("{prefix}{caller_path}"))),
            (None, None) => None,
        },
    }
}

/// A chain entry's request settings and the API (dialect) of the body they are written into.
pub type SettingsEdit = (Api, EntrySettings);

/// What attempt `a`'s entry sends besides the model (`effort`, `max_tokens`), in the dialect
/// the provider gets: the translated API's, else the caller's (from its path). `None` when the
/// entry sets nothing, or for an endpoint that takes neither (embeddings).
pub fn settings_edit(a: &Attempt<'_, '_>) -> Option<SettingsEdit> {
    let settings = EntrySettings {
        stream: a.plan.gather,
        // A translated attempt's provider reports its usage anyway (the translator asks).
        usage: a.plan.ask_usage && a.translation.is_none(),
        stream_options: a.plan.stream_options,
        ..a.entry.settings
    };
    if settings.is_empty() {
        return None;
    }
    let dialect = match a.translation {
        Some(t) => t.provider,
        None => Api::of_path(a.plan.path)?,
    };
    Some((dialect, settings))
}
