//! `RawConfig`'s `Deserialize`, written once instead of derived per type: one table of every
//! section's fields ([`Shape`]) and one reader of it ([`Seed`]), which asks the deserializer for
//! each value exactly what serde's derived visitors asked (`deserialize_struct`, `_option`,
//! `_seq`, `_identifier`, `_any` for the two lists that take a name or a list, the primitives'
//! own `Deserialize`), so every accepted configuration, every error message and every error
//! position is what the derived code gave (src/config/raw/read/tests.rs holds it to a derived
//! copy of the model over thousands of broken configurations). Derived, each type's visitor was
//! its own generic code (a map visitor and a sequence visitor per section, the values inlined
//! per field, serde's buffering for the two untagged enums): BENCHMARKS.md "Module size".
//!
//! The reader builds a small tree ([`V`]); the typed model is made from it here, with the
//! defaults raw.rs names.

use super::{
    RawBreaker, RawBudget, RawCapabilities, RawChain, RawChainEntry, RawConfig, RawCredential,
    RawDeadMarks, RawForward, RawProvider, RawRetrySettings, RawTimeouts, RawTrigger, Role,
    Routing, ENTRY_EXPECTED,
};
use crate::duration::serde_duration;
use serde::de::{self, DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// What a field (or a list's element) holds.
enum Ty {
    Str,
    Bool,
    U32,
    U64,
    /// `serde_duration`: a string such as "30s" or a number of seconds.
    Duration,
    Role,
    Routing,
    /// `Vec<String>`.
    Strings,
    /// `BTreeMap<String, String>`.
    StrMap,
    Opt(&'static Ty),
    Struct(&'static Shape),
    List(&'static Ty),
    /// A chain entry: a provider's name or a [`RawChainEntry`] mapping.
    Entry,
    /// `forward_headers`: a list of names or a word (serde's untagged `RawForward`).
    Forward,
    /// A `fallback_on` trigger: a status or a name (serde's untagged `RawTrigger`).
    Trigger,
}

/// One section (a struct of the model): its serde name, its fields in declaration order, what
/// each holds, and which have no default.
struct Shape {
    name: &'static str,
    fields: &'static [&'static str],
    tys: &'static [Ty],
    /// Bit `i`: field `i` must be there.
    required: u32,
}

impl Shape {
    #[inline]
    fn required(&self, i: usize) -> bool {
        i < 32 && (self.required >> i) & 1 == 1
    }
}

/// The whole configuration.
static CONFIG_TY: Ty = Ty::Struct(&CONFIG);

static CONFIG: Shape = Shape {
    name: "RawConfig",
    fields: &[
        "role",
        "routing",
        "hold_answers",
        "body_limit",
        "log_models",
        "ask_stream_usage",
        "providers",
        "chains",
        "breaker",
        "dead_marks",
        "timeouts",
        "opt_out_header",
        "caller_header",
        "gateway_credential_headers",
        "status_path",
        "models_path",
        "liveness_path",
    ],
    tys: &[
        Ty::Role,
        Ty::Routing,
        Ty::Bool,
        Ty::Opt(&Ty::U64),
        Ty::Bool,
        Ty::Bool,
        Ty::List(&Ty::Struct(&PROVIDER)),
        Ty::List(&Ty::Struct(&CHAIN)),
        Ty::Struct(&BREAKER),
        Ty::Struct(&DEAD_MARKS),
        Ty::Struct(&TIMEOUTS),
        Ty::Str,
        Ty::Opt(&Ty::Str),
        Ty::Strings,
        Ty::Opt(&Ty::Str),
        Ty::Str,
        Ty::Str,
    ],
    required: 1 << 6 | 1 << 7,
};

static PROVIDER: Shape = Shape {
    name: "RawProvider",
    fields: &[
        "name",
        "cluster",
        "models",
        "credential",
        "headers",
        "authority",
        "path_prefix",
        "callers",
        "labels",
        "forward_headers",
        "api",
        "max_tokens",
        "residency",
        "budget",
    ],
    tys: &[
        Ty::Str,
        Ty::Opt(&Ty::Str),
        Ty::Strings,
        Ty::Opt(&Ty::Struct(&CREDENTIAL)),
        Ty::StrMap,
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::Str),
        Ty::Strings,
        Ty::StrMap,
        Ty::Opt(&Ty::Forward),
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::U32),
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::Struct(&BUDGET)),
    ],
    required: 1,
};

static BUDGET: Shape = Shape {
    name: "RawBudget",
    fields: &["tokens", "window"],
    tys: &[Ty::U64, Ty::Duration],
    required: 0b11,
};

static CREDENTIAL: Shape = Shape {
    name: "RawCredential",
    fields: &["header", "value", "env", "prefix"],
    tys: &[Ty::Str, Ty::Opt(&Ty::Str), Ty::Opt(&Ty::Str), Ty::Str],
    required: 1,
};

static CHAIN: Shape = Shape {
    name: "RawChain",
    fields: &[
        "name",
        "models",
        "routes",
        "paths",
        "callers",
        "providers",
        "max_attempts",
        "fallback_on",
        "try_last",
        "fallbacks_exhausted",
        "context_window",
        "content_policy",
        "retry_in_place",
        "same_residency",
    ],
    tys: &[
        Ty::Str,
        Ty::Strings,
        Ty::Strings,
        Ty::Strings,
        Ty::Strings,
        Ty::List(&Ty::Entry),
        Ty::U32,
        Ty::Opt(&Ty::List(&Ty::Trigger)),
        Ty::Bool,
        Ty::Bool,
        Ty::List(&Ty::Entry),
        Ty::List(&Ty::Entry),
        Ty::Opt(&Ty::Struct(&RETRY)),
        Ty::Bool,
    ],
    required: 1 | 1 << 5,
};

static RETRY: Shape = Shape {
    name: "RawRetrySettings",
    fields: &["back_off", "max_retry_after"],
    tys: &[Ty::Duration, Ty::Duration],
    required: 0,
};

static ENTRY: Shape = Shape {
    name: "RawChainEntry",
    fields: &["provider", "model", "capabilities", "effort", "max_tokens"],
    tys: &[
        Ty::Str,
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::Struct(&CAPABILITIES)),
        Ty::Opt(&Ty::Str),
        Ty::Opt(&Ty::U32),
    ],
    required: 1,
};

static CAPABILITIES: Shape = Shape {
    name: "RawCapabilities",
    fields: &["vision", "tools", "context_window"],
    tys: &[Ty::Opt(&Ty::Bool), Ty::Opt(&Ty::Bool), Ty::Opt(&Ty::U64)],
    required: 0,
};

static BREAKER: Shape = Shape {
    name: "RawBreaker",
    fields: &["failures", "window", "cooldown", "max_cooldown"],
    tys: &[Ty::U32, Ty::Duration, Ty::Duration, Ty::Duration],
    required: 0,
};

static DEAD_MARKS: Shape = Shape {
    name: "RawDeadMarks",
    fields: &["model_not_found", "setup_fault", "quota_exhausted"],
    tys: &[Ty::Duration, Ty::Duration, Ty::Duration],
    required: 0,
};

static TIMEOUTS: Shape = Shape {
    name: "RawTimeouts",
    fields: &["attempt", "stall", "budget", "min_remaining", "first_token"],
    tys: &[
        Ty::Duration,
        Ty::Duration,
        Ty::Duration,
        Ty::Duration,
        Ty::Duration,
    ],
    required: 0,
};

/// A value read: what the typed model is made from.
enum V {
    /// Not there (a field left out, `null` for an option), or (from [`Any`]) not a match.
    Absent,
    Str(String),
    Bool(bool),
    Num(u64),
    Role(Role),
    Routing(Routing),
    Strings(Vec<String>),
    Map(BTreeMap<String, String>),
    List(Vec<V>),
    /// A section's fields, in declaration order.
    Obj(Vec<V>),
    Forward(RawForward),
    Trigger(RawTrigger),
}

impl<'de> Deserialize<'de> for RawConfig {
    #[inline]
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Seed(&CONFIG_TY).deserialize(d).map(config)
    }
}

/// Reads one value of a type.
struct Seed(&'static Ty);

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = V;

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V, D::Error> {
        Ok(match self.0 {
            Ty::Str => V::Str(String::deserialize(d)?),
            Ty::Bool => V::Bool(bool::deserialize(d)?),
            Ty::U32 => V::Num(u32::deserialize(d)?.into()),
            Ty::U64 => V::Num(u64::deserialize(d)?),
            Ty::Duration => V::Num(serde_duration::deserialize(d)?),
            Ty::Role => V::Role(Role::deserialize(d)?),
            Ty::Routing => V::Routing(Routing::deserialize(d)?),
            Ty::Strings => V::Strings(Vec::deserialize(d)?),
            Ty::StrMap => V::Map(BTreeMap::deserialize(d)?),
            Ty::Opt(ty) => d.deserialize_option(Opt(ty))?,
            Ty::Struct(shape) => d.deserialize_struct(shape.name, shape.fields, Struct(shape))?,
            Ty::List(ty) => d.deserialize_seq(List(ty))?,
            Ty::Entry => d.deserialize_any(Entry)?,
            // serde's untagged enums: the whole value is read, then matched against the variants.
            Ty::Forward | Ty::Trigger => match d.deserialize_any(Any(self.0))? {
                V::Absent => {
                    let name = match self.0 {
                        Ty::Forward => "RawForward",
                        _ => "RawTrigger",
                    };
                    return Err(D::Error::custom(format_args!(
                        "data did not match any variant of untagged enum {name}"
                    )));
                }
                v => v,
            },
        })
    }
}

/// `Option<T>`'s visitor.
struct Opt(&'static Ty);

impl<'de> Visitor<'de> for Opt {
    type Value = V;

    #[inline]
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("option")
    }

    #[inline]
    fn visit_unit<E: Error>(self) -> Result<V, E> {
        Ok(V::Absent)
    }

    #[inline]
    fn visit_none<E: Error>(self) -> Result<V, E> {
        Ok(V::Absent)
    }

    #[inline]
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V, D::Error> {
        Seed(self.0).deserialize(d)
    }
}

/// `Vec<T>`'s visitor.
struct List(&'static Ty);

impl<'de> Visitor<'de> for List {
    type Value = V;

    #[inline]
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }

    #[inline]
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<V, A::Error> {
        let mut list = Vec::new();
        while let Some(v) = seq.next_element_seed(Seed(self.0))? {
            list.push(v);
        }
        Ok(V::List(list))
    }
}

/// A section's visitor, as serde derives it (`deny_unknown_fields`): a mapping of its fields,
/// or a sequence of them in declaration order.
struct Struct(&'static Shape);

impl<'de> Visitor<'de> for Struct {
    type Value = V;

    #[inline]
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "struct {}", self.0.name)
    }

    #[inline]
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<V, A::Error> {
        let shape = self.0;
        let mut fields = Vec::with_capacity(shape.tys.len());
        for (i, ty) in shape.tys.iter().enumerate() {
            match seq.next_element_seed(Seed(ty))? {
                Some(v) => fields.push(v),
                None if shape.required(i) => {
                    return Err(A::Error::invalid_length(i, &Elements(shape)));
                }
                None => fields.push(V::Absent),
            }
        }
        Ok(V::Obj(fields))
    }

    #[inline]
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V, A::Error> {
        let shape = self.0;
        let mut fields: Vec<V> = shape.tys.iter().map(|_| V::Absent).collect();
        // Bit `i`: field `i` was there (a `null` option too).
        let mut seen = 0u32;
        while let Some(i) = map.next_key_seed(Field(shape))? {
            let (Some(slot), Some(ty), Some(name)) =
                (fields.get_mut(i), shape.tys.get(i), shape.fields.get(i))
            else {
                continue;
            };
            let bit = 1 << (i & 31);
            if seen & bit != 0 {
                return Err(A::Error::duplicate_field(name));
            }
            seen |= bit;
            *slot = map.next_value_seed(Seed(ty))?;
        }
        for (i, name) in shape.fields.iter().enumerate() {
            if shape.required(i) && seen & 1 << (i & 31) == 0 {
                return Err(A::Error::missing_field(name));
            }
        }
        Ok(V::Obj(fields))
    }
}

/// What a section read as a sequence expects: "struct RawBreaker with 4 elements".
struct Elements(&'static Shape);

impl de::Expected for Elements {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let n = self.0.fields.len();
        let s = if n == 1 { "" } else { "s" };
        write!(f, "struct {} with {n} element{s}", self.0.name)
    }
}

/// A section's field name, as its index.
struct Field(&'static Shape);

impl<'de> DeserializeSeed<'de> for Field {
    type Value = usize;

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for Field {
    type Value = usize;

    #[inline]
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("field identifier")
    }

    #[inline]
    fn visit_u64<E: Error>(self, v: u64) -> Result<usize, E> {
        match usize::try_from(v) {
            Ok(i) if i < self.0.fields.len() => Ok(i),
            _ => Err(E::invalid_value(
                de::Unexpected::Unsigned(v),
                &FieldIndex(self.0.fields.len()),
            )),
        }
    }

    #[inline]
    fn visit_str<E: Error>(self, v: &str) -> Result<usize, E> {
        let fields = self.0.fields;
        (fields.iter().position(|f| *f == v)).ok_or_else(|| E::unknown_field(v, fields))
    }

    #[inline]
    fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<usize, E> {
        let fields = self.0.fields;
        match fields.iter().position(|f| f.as_bytes() == v) {
            Some(i) => Ok(i),
            None => Err(E::unknown_field(&String::from_utf8_lossy(v), fields)),
        }
    }
}

/// What a field index read as a number expects.
struct FieldIndex(usize);

impl de::Expected for FieldIndex {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "field index 0 <= i < {}", self.0)
    }
}

/// A chain entry: a provider's name (`V::Str`) or a [`RawChainEntry`] mapping (`V::Obj`).
struct Entry;

impl<'de> Visitor<'de> for Entry {
    type Value = V;

    #[inline]
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(ENTRY_EXPECTED)
    }

    #[inline]
    fn visit_str<E: Error>(self, name: &str) -> Result<V, E> {
        Ok(V::Str(name.to_string()))
    }

    #[inline]
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V, A::Error> {
        Struct(&ENTRY).visit_map(map)
    }
}

/// Any value, read whole (as serde buffers an untagged enum's), and what it matches as a
/// `RawForward` (`Ty::Forward`), a `RawTrigger` (`Ty::Trigger`) or an element of
/// `RawForward::Names` (`Ty::Str`); `V::Absent` when it matches nothing (or is skipped: any
/// other `Ty`).
struct Any(&'static Ty);

impl Any {
    #[inline]
    fn text<E: Error>(self, s: &str) -> Result<V, E> {
        Ok(match self.0 {
            Ty::Forward => V::Forward(RawForward::Word(s.to_string())),
            Ty::Trigger => V::Trigger(RawTrigger::Name(s.to_string())),
            Ty::Str => V::Str(s.to_string()),
            _ => V::Absent,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Any {
    type Value = V;

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Any {
    type Value = V;

    #[inline]
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    #[inline]
    fn visit_bool<E: Error>(self, _: bool) -> Result<V, E> {
        Ok(V::Absent)
    }

    #[inline]
    fn visit_i64<E: Error>(self, v: i64) -> Result<V, E> {
        Ok(match self.0 {
            Ty::Trigger => V::Trigger(RawTrigger::Status(v)),
            _ => V::Absent,
        })
    }

    #[inline]
    fn visit_u64<E: Error>(self, v: u64) -> Result<V, E> {
        match i64::try_from(v) {
            Ok(v) => self.visit_i64(v),
            Err(_) => Ok(V::Absent),
        }
    }

    #[inline]
    fn visit_f64<E: Error>(self, _: f64) -> Result<V, E> {
        Ok(V::Absent)
    }

    #[inline]
    fn visit_str<E: Error>(self, v: &str) -> Result<V, E> {
        self.text(v)
    }

    #[inline]
    fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<V, E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.text(s),
            Err(_) => Ok(V::Absent),
        }
    }

    #[inline]
    fn visit_unit<E: Error>(self) -> Result<V, E> {
        Ok(V::Absent)
    }

    #[inline]
    fn visit_none<E: Error>(self) -> Result<V, E> {
        Ok(V::Absent)
    }

    #[inline]
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V, D::Error> {
        d.deserialize_any(Any(&Ty::Bool)).map(|_| V::Absent)
    }

    #[inline]
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V, D::Error> {
        d.deserialize_any(Any(&Ty::Bool)).map(|_| V::Absent)
    }

    #[inline]
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<V, A::Error> {
        let forward = matches!(self.0, Ty::Forward);
        let element = Any(if forward { &Ty::Str } else { &Ty::Bool });
        let mut names = Some(Vec::new());
        while let Some(v) = seq.next_element_seed(Any(element.0))? {
            match (v, &mut names) {
                (V::Str(name), Some(names)) => names.push(name),
                _ => names = None,
            }
        }
        Ok(match names {
            Some(names) if forward => V::Forward(RawForward::Names(names)),
            _ => V::Absent,
        })
    }

    #[inline]
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V, A::Error> {
        while map.next_key_seed(Any(&Ty::Bool))?.is_some() {
            map.next_value_seed(Any(&Ty::Bool))?;
        }
        Ok(V::Absent)
    }

    #[inline]
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<V, A::Error> {
        Err(A::Error::custom(
            "untagged and internally tagged enums do not support enum input",
        ))
    }
}

// The typed model from the tree, with raw.rs's defaults for what is absent.

impl V {
    #[inline]
    fn str(self) -> Option<String> {
        match self {
            V::Str(s) => Some(s),
            _ => None,
        }
    }

    #[inline]
    fn num(self) -> Option<u64> {
        match self {
            V::Num(n) => Some(n),
            _ => None,
        }
    }

    #[inline]
    fn small(self) -> Option<u32> {
        self.num().and_then(|n| u32::try_from(n).ok())
    }

    #[inline]
    fn bool(self) -> Option<bool> {
        match self {
            V::Bool(b) => Some(b),
            _ => None,
        }
    }

    #[inline]
    fn strings(self) -> Option<Vec<String>> {
        match self {
            V::Strings(s) => Some(s),
            _ => None,
        }
    }

    #[inline]
    fn map(self) -> BTreeMap<String, String> {
        match self {
            V::Map(m) => m,
            _ => BTreeMap::new(),
        }
    }

    #[inline]
    fn list<T>(self, each: fn(V) -> T) -> Vec<T> {
        match self {
            V::List(l) => l.into_iter().map(each).collect(),
            _ => Vec::new(),
        }
    }

    /// A section that is there (`None`: absent).
    #[inline]
    fn section<T>(self, make: fn(V) -> T) -> Option<T> {
        match self {
            V::Absent => None,
            v => Some(make(v)),
        }
    }

    /// A section's `N` fields (all absent when it is).
    #[inline]
    fn fields<const N: usize>(self) -> [V; N] {
        let mut fields = std::array::from_fn(|_| V::Absent);
        self.fill(&mut fields);
        fields
    }

    /// [`V::fields`] for every `N`.
    #[inline(never)]
    fn fill(self, out: &mut [V]) {
        if let V::Obj(fields) = self {
            for (slot, v) in out.iter_mut().zip(fields) {
                *slot = v;
            }
        }
    }
}

#[inline]
fn config(v: V) -> RawConfig {
    let [role, routing, hold_answers, body_limit, log_models, ask_stream_usage, providers, chains, breaker, dead_marks, timeouts, opt_out_header, caller_header, gateway_credential_headers, status_path, models_path, liveness_path] =
        v.fields();
    RawConfig {
        role: match role {
            V::Role(r) => r,
            _ => Role::default(),
        },
        routing: match routing {
            V::Routing(r) => r,
            _ => Routing::default(),
        },
        hold_answers: (hold_answers.bool()).unwrap_or_else(RawConfig::default_hold_answers),
        body_limit: body_limit.num(),
        log_models: log_models.bool().unwrap_or_default(),
        ask_stream_usage: (ask_stream_usage.bool())
            .unwrap_or_else(RawConfig::default_ask_stream_usage),
        providers: providers.list(provider),
        chains: chains.list(chain),
        breaker: self::breaker(breaker),
        dead_marks: self::dead_marks(dead_marks),
        timeouts: self::timeouts(timeouts),
        opt_out_header: (opt_out_header.str()).unwrap_or_else(RawConfig::default_opt_out_header),
        caller_header: caller_header.str(),
        gateway_credential_headers: (gateway_credential_headers.strings())
            .unwrap_or_else(RawConfig::default_gateway_credential_headers),
        status_path: status_path.str(),
        models_path: (models_path.str()).unwrap_or_else(RawConfig::default_models_path),
        liveness_path: (liveness_path.str()).unwrap_or_else(RawConfig::default_liveness_path),
    }
}

#[inline]
fn provider(v: V) -> RawProvider {
    let [name, cluster, models, credential, headers, authority, path_prefix, callers, labels, forward_headers, api, max_tokens, residency, budget] =
        v.fields();
    RawProvider {
        name: name.str().unwrap_or_default(),
        cluster: cluster.str(),
        models: models.strings().unwrap_or_else(super::default_any_model),
        credential: credential.section(self::credential),
        headers: headers.map(),
        authority: authority.str(),
        path_prefix: path_prefix.str(),
        callers: callers.strings().unwrap_or_default(),
        labels: labels.map(),
        forward_headers: match forward_headers {
            V::Forward(f) => Some(f),
            _ => None,
        },
        api: api.str(),
        max_tokens: max_tokens.small(),
        residency: residency.str(),
        budget: budget.section(|v| {
            let [tokens, window] = v.fields();
            RawBudget {
                tokens: tokens.num().unwrap_or_default(),
                window: window.num().unwrap_or_default(),
            }
        }),
    }
}

#[inline]
fn credential(v: V) -> RawCredential {
    let [header, value, env, prefix] = v.fields();
    RawCredential {
        header: header.str().unwrap_or_default(),
        value: value.str(),
        env: env.str(),
        prefix: prefix.str().unwrap_or_default(),
    }
}

#[inline]
fn chain(v: V) -> RawChain {
    let [name, models, routes, paths, callers, providers, max_attempts, fallback_on, try_last, fallbacks_exhausted, context_window, content_policy, retry_in_place, same_residency] =
        v.fields();
    RawChain {
        name: name.str().unwrap_or_default(),
        models: models.strings().unwrap_or_else(super::default_any_model),
        routes: routes.strings().unwrap_or_default(),
        paths: paths.strings().unwrap_or_default(),
        callers: callers.strings().unwrap_or_default(),
        providers: providers.list(entry),
        max_attempts: max_attempts.small().unwrap_or_else(super::default_attempts),
        fallback_on: fallback_on.section(|v| {
            v.list(|t| match t {
                V::Trigger(t) => t,
                _ => RawTrigger::Status(0),
            })
        }),
        try_last: try_last.bool().unwrap_or_default(),
        fallbacks_exhausted: fallbacks_exhausted.bool().unwrap_or_default(),
        context_window: context_window.list(entry),
        content_policy: content_policy.list(entry),
        retry_in_place: retry_in_place.section(|v| {
            let d = RawRetrySettings::default();
            let [back_off, max_retry_after] = v.fields();
            RawRetrySettings {
                back_off: back_off.num().unwrap_or(d.back_off),
                max_retry_after: max_retry_after.num().unwrap_or(d.max_retry_after),
            }
        }),
        same_residency: same_residency.bool().unwrap_or_default(),
    }
}

#[inline]
fn entry(v: V) -> RawChainEntry {
    let [provider, model, capabilities, effort, max_tokens] = match v {
        // A bare name: the provider, the rest absent.
        V::Str(name) => [V::Str(name), V::Absent, V::Absent, V::Absent, V::Absent],
        v => v.fields(),
    };
    RawChainEntry {
        provider: provider.str().unwrap_or_default(),
        model: model.str(),
        capabilities: capabilities.section(|v| {
            let [vision, tools, context_window] = v.fields();
            RawCapabilities {
                vision: vision.bool(),
                tools: tools.bool(),
                context_window: context_window.num(),
            }
        }),
        effort: effort.str(),
        max_tokens: max_tokens.small(),
    }
}

#[inline]
fn breaker(v: V) -> RawBreaker {
    let d = RawBreaker::default();
    let [failures, window, cooldown, max_cooldown] = v.fields();
    RawBreaker {
        failures: failures.small().unwrap_or(d.failures),
        window: window.num().unwrap_or(d.window),
        cooldown: cooldown.num().unwrap_or(d.cooldown),
        max_cooldown: max_cooldown.num().unwrap_or(d.max_cooldown),
    }
}

#[inline]
fn dead_marks(v: V) -> RawDeadMarks {
    let d = RawDeadMarks::default();
    let [model_not_found, setup_fault, quota_exhausted] = v.fields();
    RawDeadMarks {
        model_not_found: model_not_found.num().unwrap_or(d.model_not_found),
        setup_fault: setup_fault.num().unwrap_or(d.setup_fault),
        quota_exhausted: quota_exhausted.num().unwrap_or(d.quota_exhausted),
    }
}

#[inline]
fn timeouts(v: V) -> RawTimeouts {
    let d = RawTimeouts::default();
    let [attempt, stall, budget, min_remaining, first_token] = v.fields();
    RawTimeouts {
        attempt: attempt.num().unwrap_or(d.attempt),
        stall: stall.num().unwrap_or(d.stall),
        budget: budget.num().unwrap_or(d.budget),
        min_remaining: min_remaining.num().unwrap_or(d.min_remaining),
        first_token: first_token.num().unwrap_or(d.first_token),
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
