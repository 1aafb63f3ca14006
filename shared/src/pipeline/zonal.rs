//! Stage 3 — zonal affinity (spec/zonal-affinity.md).
//!
//! With A the tier stage's set:
//! - B ("zonal affinity check backends") from A's kind: healthy primaries of priority p →
//!   every configured primary of priority p; healthy failover of priority p → every
//!   configured failover backend of priority p; last resort → A (all primaries, unhealthy);
//!   healthy draining backends → A.
//!   Configured members that are disabled, have `capacity_scaler = 0` or no enabled
//!   endpoint are left out of B:
//!   an operator's "no traffic" always wins (docs/semantics.md).
//! - C = members of B in the client's zone; I = A ∩ C.
//! - zonal match: affinity enabled, client compatible, C not empty; otherwise result A.
//! - STAY_WITHIN_ZONE: I if not empty, else C.
//! - SPILL_CROSS_ZONE, ratio 0: I if not empty, else A.
//! - SPILL_CROSS_ZONE, ratio > 0: `|I|/|C| >= spillover_ratio` → I, else A, where |I| and
//!   |C| count endpoints (healthy ones of I, enabled ones of C: the VMs of the seed). In the last
//!   resort case I = C and the ratio is 1.0: the result is the unhealthy primaries in the
//!   client's zone (the seed's rule; docs/semantics.md).

use super::{ClientClass, Ctx, TierKind, TraceEntry};
use crate::config::ZonalAffinity;

/// Tolerance of the `|I|/|C| >= spillover_ratio` comparison (so 3/5 >= 0.6 holds).
pub const RATIO_EPSILON: f64 = 1e-9;

/// The B set for a tier kind (see module docs).
pub fn check_set(ctx: &Ctx<'_>, kind: TierKind, a: &[usize]) -> Vec<usize> {
    let bs = &ctx.svc.backends;
    let usable = |i: &usize| bs[*i].enabled && bs[*i].capacity_scaler != 0.0 && ctx.state(*i).endpoints > 0;
    match kind {
        TierKind::HealthyPrimaries { priority } => (0..bs.len())
            .filter(|&i| !bs[i].failover && bs[i].priority == priority)
            .filter(usable)
            .collect(),
        TierKind::HealthyFailover { priority } => (0..bs.len())
            .filter(|&i| bs[i].failover && bs[i].priority == priority)
            .filter(usable)
            .collect(),
        TierKind::LastResortPrimaries | TierKind::HealthyDraining => a.to_vec(),
        TierKind::Drop => Vec::new(),
    }
}

/// Runs the stage; returns the modified eligible set.
pub fn stage(ctx: &Ctx<'_>, client: &ClientClass, kind: TierKind, a: &[usize], trace: &mut Vec<TraceEntry>) -> Vec<usize> {
    let svc = ctx.svc;
    let mode = svc.zonal_affinity;
    if mode == ZonalAffinity::ZONAL_AFFINITY_DISABLED {
        trace.push(ctx.entry("zonal_affinity", "ZONAL_AFFINITY_DISABLED: eligible set unchanged (spec/zonal-affinity.md)", a, a));
        return a.to_vec();
    }
    let ClientClass::Zone(zone) = client else {
        trace.push(ctx.entry("zonal_affinity", "client not compatible: behaves as DISABLED, result A (spec/zonal-affinity.md \"Compatible clients\")", a, a));
        return a.to_vec();
    };
    if kind == TierKind::Drop {
        trace.push(ctx.entry("zonal_affinity", "no original eligible backends: nothing to do", a, a));
        return a.to_vec();
    }
    let b = check_set(ctx, kind, a);
    let c: Vec<usize> = b.iter().copied().filter(|&i| svc.backends[i].zone == *zone).collect();
    let i_set: Vec<usize> = c.iter().copied().filter(|x| a.contains(x)).collect();
    // |I| and |C| count endpoints, the VMs of spec/zonal-affinity.md (seed 000): healthy
    // endpoints of I over enabled endpoints of C. In the last resort I = C (all unhealthy)
    // and both count every endpoint, so the ratio is 1.0 as before.
    let ep = |set: &[usize], healthy: bool| -> u32 {
        set.iter().map(|&i| { let s = ctx.state(i); if healthy { s.healthy_endpoints.min(s.endpoints) } else { s.endpoints } }).sum()
    };
    let n_i = ep(&i_set, kind != TierKind::LastResortPrimaries);
    let n_c = ep(&c, false);
    let ratio = if c.is_empty() || n_c == 0 { 0.0 } else { f64::from(n_i) / f64::from(n_c) };
    let spill = svc.spillover_ratio.unwrap_or(0.0);
    let (out, rule): (Vec<usize>, String) = if c.is_empty() {
        (a.to_vec(), format!("no zonal match: C is empty (no member of B in {zone}): result A (spec/zonal-affinity.md \"Zonal match\")"))
    } else {
        match mode {
            ZonalAffinity::ZONAL_AFFINITY_STAY_WITHIN_ZONE => {
                if !i_set.is_empty() {
                    (i_set.clone(), "STAY_WITHIN_ZONE, I not empty: result I (spec/zonal-affinity.md)".into())
                } else {
                    (c.clone(), "STAY_WITHIN_ZONE, I empty: result C, unhealthy in-zone backends (spec/zonal-affinity.md)".into())
                }
            }
            ZonalAffinity::ZONAL_AFFINITY_SPILL_CROSS_ZONE if spill == 0.0 => {
                if !i_set.is_empty() {
                    (i_set.clone(), "SPILL_CROSS_ZONE ratio 0.0, I not empty: result I (spec/zonal-affinity.md)".into())
                } else {
                    (a.to_vec(), "SPILL_CROSS_ZONE ratio 0.0, I empty: result A (spec/zonal-affinity.md)".into())
                }
            }
            _ => {
                if ratio + RATIO_EPSILON >= spill {
                    (i_set.clone(), format!("SPILL_CROSS_ZONE: |I|/|C| = {n_i}/{n_c} endpoints = {ratio:.4} >= {spill}: result I (spec/zonal-affinity.md)"))
                } else {
                    (a.to_vec(), format!("SPILL_CROSS_ZONE: |I|/|C| = {n_i}/{n_c} endpoints = {ratio:.4} < {spill}: result A (spec/zonal-affinity.md)"))
                }
            }
        }
    };
    let mut e = ctx.entry("zonal_affinity", rule, a, &out);
    e.numbers.insert("A".into(), a.len() as f64);
    e.numbers.insert("B".into(), b.len() as f64);
    e.numbers.insert("C".into(), c.len() as f64);
    e.numbers.insert("I".into(), i_set.len() as f64);
    e.numbers.insert("ratio".into(), ratio);
    if mode == ZonalAffinity::ZONAL_AFFINITY_SPILL_CROSS_ZONE {
        e.numbers.insert("spillover_ratio".into(), spill);
    }
    e.notes.push(format!("client zone {zone}"));
    e.notes.push(format!("A = {:?} ({kind:?})", ctx.names(a)));
    e.notes.push(format!("B = {:?}", ctx.names(&b)));
    e.notes.push(format!("C = {:?}", ctx.names(&c)));
    e.notes.push(format!("I = {:?}", ctx.names(&i_set)));
    trace.push(e);
    out
}
