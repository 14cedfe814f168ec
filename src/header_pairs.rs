//! Reads a header map in the layout proxy-wasm hands it over (`proxy_get_header_map_pairs`),
//! in place: no allocation per header, and no assumption that values are UTF-8.
//!
//! The SDK's own reader copies every name and value into a `String` and panics on a value that
//! is not UTF-8. HTTP allows such bytes (obs-text) and Envoy forwards them, so one caller
//! sending `x-note: caf\xe9` would take the worker's wasm VM down. Here values stay bytes;
//! the filter decodes only the few it uses, and treats undecodable ones as absent.
//!
//! Layout (little-endian): `u32` count `n`, then `n` pairs of `u32` name and value lengths,
//! then each name and value followed by a NUL byte.

/// The pairs of one serialized header map. A truncated or inconsistent buffer yields the pairs
/// that are whole and then stops: nothing here panics on what the host hands over.
#[derive(Debug, Clone, Copy)]
pub struct HeaderPairs<'a> {
    bytes: &'a [u8],
}

impl<'a> HeaderPairs<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        HeaderPairs { bytes }
    }

    pub fn iter(&self) -> PairIter<'a> {
        let count = read_u32(self.bytes, 0).unwrap_or(0);
        // The size table must fit in the buffer; otherwise there is nothing to read.
        let table_end = count
            .checked_mul(8)
            .and_then(|t| t.checked_add(4))
            .filter(|end| *end <= self.bytes.len());
        PairIter {
            bytes: self.bytes,
            remaining: if table_end.is_some() { count } else { 0 },
            entry: 4,
            data: table_end.unwrap_or(0),
        }
    }
}

impl<'a> IntoIterator for HeaderPairs<'a> {
    type Item = (&'a [u8], &'a [u8]);
    type IntoIter = PairIter<'a>;

    fn into_iter(self) -> PairIter<'a> {
        self.iter()
    }
}

#[derive(Debug, Clone)]
pub struct PairIter<'a> {
    bytes: &'a [u8],
    remaining: usize,
    /// Offset of the next pair's lengths in the size table.
    entry: usize,
    /// Offset of the next pair's name in the data area.
    data: usize,
}

impl<'a> Iterator for PairIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let pair = self.read_pair();
        if pair.is_none() {
            self.remaining = 0;
        } else {
            self.remaining -= 1;
        }
        pair
    }
}

impl<'a> PairIter<'a> {
    fn read_pair(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        let name_len = read_u32(self.bytes, self.entry)?;
        let value_len = read_u32(self.bytes, self.entry + 4)?;
        let name = self
            .bytes
            .get(self.data..self.data.checked_add(name_len)?)?;
        let value_start = self.data + name_len + 1;
        let value = self
            .bytes
            .get(value_start..value_start.checked_add(value_len)?)?;
        self.entry += 8;
        self.data = value_start + value_len + 1;
        Some((name, value))
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<usize> {
    let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(raw)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's layout, built the way proxy-wasm hosts build it.
    fn serialize(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut out = (pairs.len() as u32).to_le_bytes().to_vec();
        for (name, value) in pairs {
            out.extend((name.len() as u32).to_le_bytes());
            out.extend((value.len() as u32).to_le_bytes());
        }
        for (name, value) in pairs {
            out.extend(*name);
            out.push(0);
            out.extend(*value);
            out.push(0);
        }
        out
    }

    fn collect(bytes: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        HeaderPairs::new(bytes)
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect()
    }

    #[test]
    fn reads_every_pair_in_order_with_bytes_that_are_not_utf8() {
        let pairs: [(&[u8], &[u8]); 4] = [
            (b":path", b"/v1/chat/completions"),
            (b"x-note", b"caf\xe9"),
            (b"empty", b""),
            (b"x-note", b"second"),
        ];
        let got = collect(&serialize(&pairs));
        let want: Vec<(Vec<u8>, Vec<u8>)> = pairs
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn empty_and_zero_count_buffers_have_no_pairs() {
        assert!(collect(&[]).is_empty());
        assert!(collect(&serialize(&[])).is_empty());
    }

    #[test]
    fn a_truncated_buffer_yields_the_whole_pairs_and_stops() {
        let full = serialize(&[(b"a", b"1"), (b"bb", b"22")]);
        for cut in 0..full.len() {
            let got = collect(&full[..cut]);
            // Never more than what is whole, and what is returned is right.
            assert!(got.len() <= 2, "cut {cut}");
            if let Some(first) = got.first() {
                assert_eq!(first, &(b"a".to_vec(), b"1".to_vec()), "cut {cut}");
            }
        }
        assert_eq!(collect(&full).len(), 2);
    }

    #[test]
    fn a_count_larger_than_the_buffer_reads_nothing() {
        let mut bytes = serialize(&[(b"a", b"1")]);
        bytes[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(collect(&bytes).is_empty());
    }

    #[test]
    fn lengths_pointing_past_the_end_stop_the_walk() {
        let mut bytes = serialize(&[(b"a", b"1"), (b"b", b"2")]);
        // Second pair's value length: huge.
        bytes[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(collect(&bytes), vec![(b"a".to_vec(), b"1".to_vec())]);
    }

    #[cfg(not(target_arch = "wasm32"))]
    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_pairs_round_trip(pairs in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..20),
                 proptest::collection::vec(any::<u8>(), 0..40)), 0..12)) {
                let borrowed: Vec<(&[u8], &[u8])> =
                    pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice())).collect();
                prop_assert_eq!(collect(&serialize(&borrowed)), pairs);
            }

            #[test]
            fn any_bytes_are_read_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
                let n = HeaderPairs::new(&bytes).iter().count();
                prop_assert!(n <= bytes.len() / 8 + 1);
            }
        }
    }
}
