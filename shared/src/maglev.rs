//! Weighted Maglev lookup tables.
//!
//! Maglev hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016, §3.4): every backend has a permutation of the `M` table slots,
//! `perm[j] = (offset + j·skip) mod M` with `offset = h1(name) mod M` and
//! `skip = h2(name) mod (M−1) + 1`; backends take turns claiming their next free preferred
//! slot until the table is full. `M` is prime, so every permutation visits every slot.
//!
//! Weights (spec/backend-selection.md "Consistent hashing"): the first round gives every
//! backend with weight > 0 one slot; after that each round adds `weight / max_weight` of a
//! turn to a backend's credit and it claims a slot per whole turn, so slot shares follow
//! weights within rounding.
//!
//! Order independence: backends are processed in the order of their names, so the table
//! depends only on the set of (name, weight) pairs; [`MaglevTable::build`] maps slots back
//! to the caller's indices.

use crate::flow::fmix64;

/// One backend offered to [`MaglevTable::build`].
#[derive(Clone, Debug, PartialEq)]
pub struct MaglevEntry<'a> {
    /// Stable identity (the backend name): decides the permutation.
    pub name: &'a str,
    /// Relative weight; entries with weight ≤ 0 (or NaN) take no slots.
    pub weight: f64,
}

/// A filled lookup table: slot → index into the entries given to [`MaglevTable::build`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaglevTable {
    slots: Vec<u16>,
}

/// 64-bit FNV-1a over `bytes`, seeded, then mixed: the name hashes `h1`, `h2`.
fn name_hash(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    fmix64(h)
}

impl MaglevTable {
    /// Builds a table of `size` slots (`size` should be prime; [`crate::config`] enforces
    /// it for configured services). At most 65,535 entries. With no entry of positive
    /// weight the table is empty and [`lookup`](Self::lookup) returns `None`.
    ///
    /// Cost: O(M · rounds) in the worst case of very unequal weights; about 2·M·ln M probes
    /// for equal weights (NSDI 2016 §3.4).
    pub fn build(entries: &[MaglevEntry<'_>], size: u32) -> MaglevTable {
        let m = size.max(1) as u64;
        // Candidates in name order; ties by the caller's index for full determinism.
        let mut order: Vec<usize> = (0..entries.len().min(u16::MAX as usize))
            .filter(|&i| entries[i].weight > 0.0)
            .collect();
        if order.is_empty() {
            return MaglevTable { slots: Vec::new() };
        }
        order.sort_by(|&a, &b| entries[a].name.cmp(entries[b].name).then(a.cmp(&b)));
        let max_w = order.iter().map(|&i| entries[i].weight).fold(0.0f64, f64::max);
        struct Cand {
            idx: u16,
            offset: u64,
            skip: u64,
            next: u64,
            credit: f64,
            step: f64,
        }
        let mut cands: Vec<Cand> = order
            .iter()
            .map(|&i| {
                let e = &entries[i];
                let offset = name_hash(e.name.as_bytes(), 0x5157_4c4c_5741_5931) % m;
                let skip = if m > 1 { name_hash(e.name.as_bytes(), 0x6d61_676c_6576_3232) % (m - 1) + 1 } else { 1 };
                Cand { idx: i as u16, offset, skip, next: 0, credit: 0.0, step: e.weight / max_w }
            })
            .collect();
        const EMPTY: u16 = u16::MAX;
        let mut slots = vec![EMPTY; m as usize];
        let mut filled = 0u64;
        let claim = |c: &mut Cand, slots: &mut Vec<u16>| {
            loop {
                let s = ((c.offset + c.next * c.skip) % m) as usize;
                c.next += 1;
                if slots[s] == EMPTY {
                    slots[s] = c.idx;
                    return;
                }
            }
        };
        // Round 0: one slot each (every positive weight gets a slot).
        for c in cands.iter_mut() {
            if filled == m {
                break;
            }
            claim(c, &mut slots);
            filled += 1;
        }
        while filled < m {
            for c in cands.iter_mut() {
                c.credit += c.step;
                while c.credit >= 1.0 && filled < m {
                    c.credit -= 1.0;
                    claim(c, &mut slots);
                    filled += 1;
                }
                if filled == m {
                    break;
                }
            }
        }
        MaglevTable { slots }
    }

    /// The entry index for a flow hash, `None` for an empty table. Maps the low 32 bits of
    /// `hash` onto `[0, M)` by multiply-shift (Lemire), no division.
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<u16> {
        let m = self.slots.len() as u64;
        if m == 0 {
            return None;
        }
        let i = ((hash & 0xffff_ffff) * m) >> 32;
        // `i < m` by construction; `get` keeps the hot path panic-free.
        self.slots.get(i as usize).copied()
    }

    /// Table size M (0 when empty).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table has no slots (no eligible backend).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The slots (entry indices).
    pub fn slots(&self) -> &[u16] {
        &self.slots
    }

    /// Slot count per entry index, for `n` entries.
    pub fn slot_counts(&self, n: usize) -> Vec<usize> {
        let mut c = vec![0usize; n];
        for s in &self.slots {
            if let Some(x) = c.get_mut(*s as usize) {
                *x += 1;
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("backend-{i}")).collect()
    }

    #[test]
    fn empty_and_zero_weight() {
        let t = MaglevTable::build(&[], 251);
        assert!(t.is_empty() && t.lookup(7).is_none());
        let t = MaglevTable::build(&[MaglevEntry { name: "a", weight: 0.0 }, MaglevEntry { name: "b", weight: 1.0 }], 251);
        assert!(t.slots().iter().all(|s| *s == 1));
    }

    #[test]
    fn equal_weights_are_even() {
        let n = names(10);
        let e: Vec<_> = n.iter().map(|s| MaglevEntry { name: s, weight: 1.0 }).collect();
        let t = MaglevTable::build(&e, 65537);
        for c in t.slot_counts(10) {
            assert!((6500..=6600).contains(&c), "{c}");
        }
    }

    #[test]
    fn every_positive_weight_gets_a_slot() {
        let n = names(100);
        let e: Vec<_> = n.iter().enumerate().map(|(i, s)| MaglevEntry { name: s, weight: if i == 0 { 1.0 } else { 1000.0 } }).collect();
        let t = MaglevTable::build(&e, 65537);
        assert!(t.slot_counts(100)[0] >= 1);
    }
}
