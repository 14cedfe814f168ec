//! The order a group's members are tried in, for one request (docs/behaviour.md 2.10): pure,
//! from one random draw the caller makes (and, for `least_busy`, the members' requests in
//! flight). Planning walks the order, leaving out the members that may not take the request,
//! so the first member left is the pick and the others follow, each once.
//!
//! `weighted` draws the members one by one without replacement, each in proportion to its
//! weight among those not drawn yet (a Plackett-Luce order). Leaving members out of such an
//! order keeps the others' relative order distributed the same way (Luce's choice axiom), so
//! the first member that may take the request is picked in proportion to its weight among the
//! members that may: an open or spent member's share goes to the others by their weights.

use crate::config::{EntryGroup, GroupPolicy, MAX_CHAIN_LEN};

/// A group's members in the order a request tries them: indices into the group (0 = its first
/// member), no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    members: [u8; MAX_CHAIN_LEN],
    len: u8,
}

impl Order {
    /// The members' indices in the group, in try order.
    pub fn members(&self) -> &[u8] {
        self.members
            .get(..usize::from(self.len))
            .unwrap_or_default()
    }
}

/// The next number of a splitmix64 sequence: cheap, and good enough to split traffic (not for
/// anything secret).
#[inline]
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `r` (uniform over u64) scaled to `0..n`, without a division.
#[inline]
fn below(r: u64, n: u64) -> u64 {
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

/// The order `group`'s members are tried in for one request. `draw`: a random number for this
/// request (0: none, the heaviest first); `busy(i)`: member `i`'s requests in flight, read only for `least_busy` (fewest
/// first, ties in a random order).
pub fn order(group: &EntryGroup, draw: u64, busy: impl Fn(usize) -> u32) -> Order {
    let n = group.weights.len().min(MAX_CHAIN_LEN);
    let mut members = [0u8; MAX_CHAIN_LEN];
    for (i, m) in members.iter_mut().enumerate().take(n) {
        *m = i as u8;
    }
    let mut state = draw;
    let weight = |m: u8| match group.policy {
        GroupPolicy::Weighted => u64::from(group.weights.get(usize::from(m)).copied().unwrap_or(0)),
        GroupPolicy::LeastBusy => 1,
    };
    // Draw position k among members k..n by weight; the drawn one swaps into place k. No
    // draw (0: `explain`): the heaviest first, ties in written order.
    for k in (0..n).filter(|_| draw != 0) {
        let rest = members.get(k..n).unwrap_or_default();
        let total: u64 = rest.iter().map(|&m| weight(m)).sum();
        if total == 0 {
            break;
        }
        let mut x = below(next(&mut state), total);
        let mut chosen = k;
        for (j, &m) in rest.iter().enumerate() {
            let w = weight(m);
            if x < w {
                chosen = k + j;
                break;
            }
            x -= w;
        }
        members.swap(k, chosen);
    }
    if draw == 0 {
        settle(members.get_mut(..n).unwrap_or_default(), |m| {
            u64::MAX - weight(m)
        });
    }
    if group.policy == GroupPolicy::LeastBusy {
        // Each member's count read once (a shared-data read in the filter).
        let mut counts = [0u32; MAX_CHAIN_LEN];
        for (i, c) in counts.iter_mut().enumerate().take(n) {
            *c = busy(i);
        }
        let busy = |m: u8| u64::from(counts.get(usize::from(m)).copied().unwrap_or(0));
        // Stable: members as busy as each other keep their random order.
        settle(members.get_mut(..n).unwrap_or_default(), busy);
    }
    Order {
        members,
        len: n as u8,
    }
}

/// Sorts `members` by `key`, smallest first, keeping the order of equal keys (an insertion
/// sort: at most 16 members, no allocation).
fn settle(members: &mut [u8], key: impl Fn(u8) -> u64) {
    for k in 1..members.len() {
        let mut j = k;
        while j > 0 {
            let (Some(&a), Some(&b)) = (members.get(j - 1), members.get(j)) else {
                break;
            };
            if key(a) <= key(b) {
                break;
            }
            members.swap(j - 1, j);
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests;
