//! Byte searches for the per-request path: a byte, a pair of bytes, a needle, eight bytes at a
//! time (one `u64` word: wasm32 has 64-bit integers, and `memchr`, in the build through
//! serde_json, works a `usize` of four bytes at a time there; the two were not measured
//! against each other). Nothing here knows JSON, dialects or proxy-wasm: the usage reader, the
//! stream checks and the translators share these.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that may be zero: every zero byte's is set (a byte above
/// a zero one may be flagged too, never a zero one missed).
fn zeros(w: u64) -> u64 {
    w.wrapping_sub(ONES) & !w & HIGHS
}

/// The eight bytes at the start of `b` (shorter: zeros after it) as one little-endian word.
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    if let Some(bytes) = b.get(..8) {
        w.copy_from_slice(bytes);
    }
    u64::from_le_bytes(w)
}

/// Where `a` followed by `b` first is in `hay`: eight places at a time (both bytes tested
/// in one word each, as [`find_byte`] tests one, a place flagged then checked), the last
/// ones one by one. A pair is rarer than either byte (`"e` against `"`, `\n\n` against
/// `\n`), so far fewer places are checked than a search for its first byte stops at.
#[inline(never)]
pub(crate) fn find_pair(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    let (pa, pb) = (ONES * u64::from(a), ONES * u64::from(b));
    let mut i = 0;
    while let Some(w) = hay.get(i..i + 9) {
        let mut m = zeros(word(w) ^ pa) & zeros(word(w.get(1..).unwrap_or_default()) ^ pb);
        while m != 0 {
            let at = i + (m.trailing_zeros() / 8) as usize;
            if hay.get(at..at + 2) == Some(&[a, b]) {
                return Some(at);
            }
            m &= m - 1;
        }
        i += 8;
    }
    while let Some(pair) = hay.get(i..i + 2) {
        if pair == [a, b] {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Where `byte` last is in `hay`: eight bytes at a time from its end (as [`find_byte`]), the
/// rest one by one.
#[inline(never)]
pub(crate) fn rfind_byte(byte: u8, hay: &[u8]) -> Option<usize> {
    let pattern = ONES * u64::from(byte);
    let mut end = hay.len();
    for chunk in hay.rchunks_exact(8) {
        if zeros(word(chunk) ^ pattern) != 0 {
            break;
        }
        end -= 8;
    }
    hay.get(..end)?.iter().rposition(|&b| b == byte)
}

/// Where `byte` first is in `hay`: eight bytes at a time (SWAR: a word's test is exact for
/// "some byte of it matches"), the rest one by one.
#[inline(never)]
pub(crate) fn find_byte(byte: u8, hay: &[u8]) -> Option<usize> {
    let pattern = ONES * u64::from(byte);
    let mut offset = 0;
    for chunk in hay.chunks_exact(8) {
        if zeros(word(chunk) ^ pattern) != 0 {
            break;
        }
        offset += 8;
    }
    hay.get(offset..)?
        .iter()
        .position(|&b| b == byte)
        .map(|n| offset + n)
}

/// Where a line end (`\n` or `\r`) first is in `hay`: eight bytes at a time, as [`find_byte`]
/// (a word that may hold either is searched byte by byte).
#[inline(never)]
pub(crate) fn find_line_end(hay: &[u8]) -> Option<usize> {
    let mut offset = 0;
    for chunk in hay.chunks_exact(8) {
        if line_end_in(word(chunk)) {
            break;
        }
        offset += 8;
    }
    hay.get(offset..)?
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map(|n| offset + n)
}

/// Where a line end (`\n` or `\r`) last is in `hay`: eight bytes at a time from its end.
#[inline(never)]
pub(crate) fn rfind_line_end(hay: &[u8]) -> Option<usize> {
    let mut end = hay.len();
    for chunk in hay.rchunks_exact(8) {
        if line_end_in(word(chunk)) {
            break;
        }
        end -= 8;
    }
    hay.get(..end)?
        .iter()
        .rposition(|&b| b == b'\n' || b == b'\r')
}

/// Whether the word may hold a `\n` or a `\r` (never a miss).
fn line_end_in(w: u64) -> bool {
    zeros(w ^ (ONES * u64::from(b'\n'))) | zeros(w ^ (ONES * u64::from(b'\r'))) != 0
}

/// Where `needle` first occurs in `haystack`.
#[inline(never)]
pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, second, rest) = match needle {
        [] => return Some(0),
        [first] => return find_byte(*first, haystack),
        [first, second, rest @ ..] => (first, *second, rest),
    };
    // Its first two bytes, eight places at a time (most needles are a quoted name: `"` alone
    // is at every other member); then the rest of it there.
    let mut from = 0;
    while let Some(n) = find_pair(first, second, haystack.get(from..)?) {
        let at = from + n;
        if haystack.get(at + 2..at + needle.len()) == Some(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{find_byte, find_line_end, find_pair, rfind_byte, rfind_line_end};

    /// Eight bytes at a time finds what a byte-by-byte search finds, first and last, at every
    /// offset and length (a word's edges, the rest after the last whole word).
    #[test]
    fn word_searches_find_what_a_byte_search_finds() {
        let hay: Vec<u8> = (0..40u8)
            .map(|i| b"ag\ng\"\xff"[usize::from(i % 7) % 6])
            .collect();
        for start in 0..hay.len() {
            for end in start..=hay.len() {
                let h = &hay[start..end];
                for byte in [b'g', b'\n', b'"', 0xff, b'z', 0x7f, 0] {
                    assert_eq!(find_byte(byte, h), h.iter().position(|&b| b == byte));
                    assert_eq!(rfind_byte(byte, h), h.iter().rposition(|&b| b == byte));
                }
                let line_end = |b: &u8| *b == b'\n' || *b == b'\r';
                assert_eq!(find_line_end(h), h.iter().position(line_end));
                assert_eq!(rfind_line_end(h), h.iter().rposition(line_end));
                let no_lf: Vec<u8> = h
                    .iter()
                    .map(|&b| if b == b'\n' { b'\r' } else { b })
                    .collect();
                assert_eq!(find_line_end(&no_lf), no_lf.iter().position(line_end));
                assert_eq!(rfind_line_end(&no_lf), no_lf.iter().rposition(line_end));
            }
        }
    }

    /// The pair search finds what a place-by-place search finds, at every offset and length,
    /// whatever bytes sit around the pair (the word test's false flags: a byte one above a
    /// match's, 0x01 after a zero, a pair across two words).
    #[test]
    fn pair_searches_find_what_a_place_search_finds() {
        let plain = |a: u8, b: u8, h: &[u8]| h.windows(2).position(|w| w == [a, b]);
        let alphabets: [&[u8]; 3] = [b"ag\ng\"\xff", b"\"ee\"\x01\x00\x02", b"\n\n\r\x0b\x0a\x0b"];
        for alphabet in alphabets {
            let hay: Vec<u8> = (0..41usize)
                .map(|i| alphabet[(i * 5 + i / 3) % alphabet.len()])
                .collect();
            for start in 0..hay.len() {
                for end in start..=hay.len() {
                    let h = &hay[start..end];
                    for &a in alphabet {
                        for &b in alphabet {
                            assert_eq!(find_pair(a, b, h), plain(a, b, h), "{a} {b} {h:?}");
                        }
                    }
                }
            }
        }
        for len in 0..30 {
            let mut hay = vec![b'"'; len];
            assert_eq!(find_pair(b'"', b'e', &hay), None);
            for at in 0..len.saturating_sub(1) {
                hay.fill(b'"');
                hay[at + 1] = b'e';
                assert_eq!(find_pair(b'"', b'e', &hay), Some(at), "{len} {at}");
            }
        }
    }
}
