//! Maglev table properties (spec/backend-selection.md "Consistent hashing").
//! The measured churn figures are printed (`cargo test --test maglev -- --nocapture`) and
//! recorded in docs/maglev.md.

use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use spillway_shared::maglev::{MaglevEntry, MaglevTable};

const M: u32 = 65537;

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("backend-{i:03}")).collect()
}

fn build(names: &[String], weights: &[f64], m: u32) -> (MaglevTable, Vec<String>) {
    let e: Vec<MaglevEntry<'_>> = names.iter().zip(weights).map(|(n, w)| MaglevEntry { name: n, weight: *w }).collect();
    (MaglevTable::build(&e, m), names.to_vec())
}

/// Slot → backend name.
fn by_name(t: &MaglevTable, names: &[String]) -> Vec<String> {
    t.slots().iter().map(|&i| names[usize::from(i)].clone()).collect()
}

#[test]
fn order_independent() {
    let n = names(50);
    let w: Vec<f64> = (0..50).map(|i| f64::from(1 + (i % 7))).collect();
    let (t1, _) = build(&n, &w, M);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut pairs: Vec<(String, f64)> = n.iter().cloned().zip(w.iter().copied()).collect();
    for _ in 0..5 {
        pairs.shuffle(&mut rng);
        let (sn, sw): (Vec<String>, Vec<f64>) = pairs.iter().cloned().unzip();
        let (t2, _) = build(&sn, &sw, M);
        assert_eq!(by_name(&t1, &n), by_name(&t2, &sn));
    }
}

/// Removes backend `victim` of `n` equal-weight backends; returns (fraction of slots that
/// changed, fraction that changed although they were not on the victim).
fn churn(n: usize, victim: usize) -> (f64, f64) {
    let all = names(n);
    let (t1, _) = build(&all, &vec![1.0; n], M);
    let rest: Vec<String> = all.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, s)| s.clone()).collect();
    let (t2, _) = build(&rest, &vec![1.0; n - 1], M);
    let a = by_name(&t1, &all);
    let b = by_name(&t2, &rest);
    let moved = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    let extra = a.iter().zip(&b).filter(|(x, y)| x != y && **x != all[victim]).count();
    (moved as f64 / f64::from(M), extra as f64 / f64::from(M))
}

#[test]
fn removing_one_of_n_moves_about_one_nth() {
    for n in [10usize, 100] {
        let mut worst_extra: f64 = 0.0;
        let mut sum_moved = 0.0;
        let victims = [0, n / 2, n - 1];
        for &v in &victims {
            let (moved, extra) = churn(n, v);
            println!("maglev churn: N={n} remove #{v}: moved {:.4} of keys (1/N = {:.4}), of which not on the removed backend {:.4}", moved, 1.0 / n as f64, extra);
            // the removed backend's keys all move; the rest is the table's extra churn
            assert!(moved >= 1.0 / n as f64 * 0.95, "N={n}: moved {moved}");
            assert!(extra < 0.5 / n as f64 + 0.01, "N={n}: extra churn {extra}");
            worst_extra = worst_extra.max(extra);
            sum_moved += moved;
        }
        println!("maglev churn: N={n} mean moved {:.4}, worst extra {:.4}", sum_moved / victims.len() as f64, worst_extra);
    }
}

#[test]
fn weights_1_to_10() {
    let n = vec!["light".to_string(), "heavy".to_string()];
    let (t, _) = build(&n, &[1.0, 10.0], M);
    let c = t.slot_counts(2);
    let ratio = c[1] as f64 / c[0] as f64;
    println!("maglev weights 1:10 -> slots {c:?}, ratio {ratio:.3}");
    assert!((ratio - 10.0).abs() < 0.1, "{c:?}");
}

#[test]
fn equal_weights_within_one_percent() {
    let n = names(100);
    let (t, _) = build(&n, &[1.0; 100], M);
    let fair = f64::from(M) / 100.0;
    for c in t.slot_counts(100) {
        assert!((c as f64 - fair).abs() / fair < 0.02, "{c} vs {fair}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_positive_weight_gets_a_slot(ws in proptest::collection::vec(0u32..=1000, 1..60)) {
        let n = names(ws.len());
        let w: Vec<f64> = ws.iter().map(|&x| f64::from(x)).collect();
        let (t, _) = build(&n, &w, 4099);
        let c = t.slot_counts(ws.len());
        for (i, &x) in ws.iter().enumerate() {
            if x > 0 { prop_assert!(c[i] >= 1, "weight {} got no slot", x); } else { prop_assert_eq!(c[i], 0); }
        }
        if ws.iter().any(|&x| x > 0) {
            prop_assert_eq!(c.iter().sum::<usize>(), 4099);
        } else {
            prop_assert!(t.is_empty());
        }
    }

    #[test]
    fn shares_follow_weights(ws in proptest::collection::vec(1u32..=20, 2..12)) {
        let n = names(ws.len());
        let w: Vec<f64> = ws.iter().map(|&x| f64::from(x)).collect();
        let (t, _) = build(&n, &w, M);
        let tot: f64 = w.iter().sum();
        for (i, c) in t.slot_counts(ws.len()).iter().enumerate() {
            let want = w[i] / tot * f64::from(M);
            prop_assert!((*c as f64 - want).abs() <= want * 0.02 + 2.0, "slot {} has {} want {}", i, c, want);
        }
    }

    #[test]
    fn shuffled_input_same_table(seed in any::<u64>(), n in 1usize..40) {
        let nm = names(n);
        let w: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13 + 1) as f64).collect();
        let (t1, _) = build(&nm, &w, 1021);
        let mut idx: Vec<usize> = (0..n).collect();
        idx.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
        let sn: Vec<String> = idx.iter().map(|&i| nm[i].clone()).collect();
        let sw: Vec<f64> = idx.iter().map(|&i| w[i]).collect();
        let (t2, _) = build(&sn, &sw, 1021);
        prop_assert_eq!(by_name(&t1, &nm), by_name(&t2, &sn));
    }
}
