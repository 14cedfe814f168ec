//! The generic half of the reader: the value tree ([`V`]) and the serde visitors that fill it
//! from a section's [`Shape`](super::Shape), one per kind of [`Ty`](super::Ty). Adding a field
//! never touches this file: the tables and the typed model are in read.rs.

use super::super::{RawForward, RawTrigger, Role, Routing, ENTRY_EXPECTED};
use super::{Shape, Ty, ENTRY};
use crate::duration::serde_duration;
use serde::de::{self, DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// A value read: what the typed model is made from.
pub(super) enum V {
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

/// Reads one value of a type.
pub(super) struct Seed(pub(super) &'static Ty);

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
    pub(super) fn str(self) -> Option<String> {
        match self {
            V::Str(s) => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn num(self) -> Option<u64> {
        match self {
            V::Num(n) => Some(n),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn small(self) -> Option<u32> {
        self.num().and_then(|n| u32::try_from(n).ok())
    }

    #[inline]
    pub(super) fn bool(self) -> Option<bool> {
        match self {
            V::Bool(b) => Some(b),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn strings(self) -> Option<Vec<String>> {
        match self {
            V::Strings(s) => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn map(self) -> BTreeMap<String, String> {
        match self {
            V::Map(m) => m,
            _ => BTreeMap::new(),
        }
    }

    #[inline]
    pub(super) fn list<T>(self, each: fn(V) -> T) -> Vec<T> {
        match self {
            V::List(l) => l.into_iter().map(each).collect(),
            _ => Vec::new(),
        }
    }

    /// A section that is there (`None`: absent).
    #[inline]
    pub(super) fn section<T>(self, make: fn(V) -> T) -> Option<T> {
        match self {
            V::Absent => None,
            v => Some(make(v)),
        }
    }

    /// A section's `N` fields (all absent when it is).
    #[inline]
    pub(super) fn fields<const N: usize>(self) -> [V; N] {
        let mut fields = std::array::from_fn(|_| V::Absent);
        self.fill(&mut fields);
        fields
    }

    /// [`V::fields`] for every `N`.
    #[inline(never)]
    pub(super) fn fill(self, out: &mut [V]) {
        if let V::Obj(fields) = self {
            for (slot, v) in out.iter_mut().zip(fields) {
                *slot = v;
            }
        }
    }
}
