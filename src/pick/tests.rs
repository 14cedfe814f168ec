use super::*;

fn group(weights: &[u32], policy: GroupPolicy) -> EntryGroup {
    EntryGroup {
        first: 0,
        weights: weights.to_vec(),
        policy,
    }
}

/// How often each member comes first over `n` requests, each drawing as a worker does (one
/// number of its own splitmix64 sequence per request), leaving out the members `out` names
/// (open, dead, spent: planning walks past them).
fn split(g: &EntryGroup, n: usize, out: &[u8]) -> Vec<f64> {
    let mut counts = vec![0usize; g.weights.len()];
    let mut worker = 0x1234_5678u64;
    for _ in 0..n {
        let o = order(g, next(&mut worker), |_| 0);
        let first = o.members().iter().find(|m| !out.contains(m)).copied();
        counts[usize::from(first.expect("a member is left"))] += 1;
    }
    counts
        .iter()
        .map(|&c| c as f64 * 100.0 / n as f64)
        .collect()
}

fn within(measured: &[f64], expected: &[f64], pp: f64) {
    for (m, e) in measured.iter().zip(expected) {
        assert!(
            (m - e).abs() <= pp,
            "split {measured:?}, expected {expected:?}"
        );
    }
}

#[test]
fn every_member_once_in_each_order() {
    let g = group(&[5, 1, 1, 3], GroupPolicy::Weighted);
    let mut state = 7u64;
    for _ in 0..1000 {
        let o = order(&g, next(&mut state), |_| 0);
        let mut seen = o.members().to_vec();
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3]);
    }
}

#[test]
fn the_first_pick_follows_the_weights_within_two_points_over_10000_requests() {
    let g = group(&[2, 1, 1], GroupPolicy::Weighted);
    within(&split(&g, 10_000, &[]), &[50.0, 25.0, 25.0], 2.0);
    let g = group(&[1, 1], GroupPolicy::Weighted);
    within(&split(&g, 10_000, &[]), &[50.0, 50.0], 2.0);
    let g = group(&[7, 2, 1], GroupPolicy::Weighted);
    within(&split(&g, 10_000, &[]), &[70.0, 20.0, 10.0], 2.0);
}

#[test]
fn a_member_left_out_shares_its_part_among_the_others_by_weight() {
    // azure-east (2) open: the other two split its requests by their weights, 1:3.
    let g = group(&[2, 1, 3], GroupPolicy::Weighted);
    within(&split(&g, 10_000, &[0]), &[0.0, 25.0, 75.0], 2.0);
    within(&split(&g, 10_000, &[2]), &[66.7, 33.3, 0.0], 2.0);
}

#[test]
fn the_member_after_the_pick_follows_the_weights_of_those_left() {
    // After member 0 failed, the next tried is 1 or 2 as 1:3.
    let g = group(&[2, 1, 3], GroupPolicy::Weighted);
    let mut second = [0usize; 3];
    let mut firsts = 0;
    let mut state = 99u64;
    for _ in 0..20_000 {
        let o = order(&g, next(&mut state), |_| 0);
        if o.members()[0] == 0 {
            firsts += 1;
            second[usize::from(o.members()[1])] += 1;
        }
    }
    let share = second[2] as f64 * 100.0 / firsts as f64;
    assert!((share - 75.0).abs() < 3.0, "{second:?}");
}

#[test]
fn least_busy_puts_the_fewest_in_flight_first_and_breaks_ties_at_random() {
    let g = group(&[1, 1, 1], GroupPolicy::LeastBusy);
    let busy = [4u32, 0, 2];
    let o = order(&g, 5, |i| busy[i]);
    assert_eq!(o.members(), &[1, 2, 0]);
    // All idle: each member first about a third of the time.
    let mut firsts = [0usize; 3];
    let mut state = 3u64;
    for _ in 0..9_000 {
        firsts[usize::from(order(&g, next(&mut state), |_| 0).members()[0])] += 1;
    }
    for f in firsts {
        assert!((2_700..3_300).contains(&f), "{firsts:?}");
    }
    // Two tied at the fewest: they share the first place.
    let busy = [1u32, 1, 5];
    let mut firsts = [0usize; 3];
    for _ in 0..2_000 {
        let o = order(&g, next(&mut state), |i| busy[i]);
        assert_eq!(o.members()[2], 2);
        firsts[usize::from(o.members()[0])] += 1;
    }
    assert!(firsts[0] > 800 && firsts[1] > 800, "{firsts:?}");
}

#[test]
fn no_draw_orders_the_heaviest_first_ties_as_written() {
    let g = group(&[1, 3, 1, 2], GroupPolicy::Weighted);
    assert_eq!(order(&g, 0, |_| 0).members(), &[1, 3, 0, 2]);
}
