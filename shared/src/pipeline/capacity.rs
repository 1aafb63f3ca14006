//! Stage 6 — capacity (spec/service-lb-policy.md "Algorithms", "Preferred backends",
//! "Failover health threshold").
//!
//! Active when `load_balancing_algorithm` is set or a candidate has `capacity_cps` or is
//! `PREFERRED`; otherwise shares come from weights (stage 7).
//!
//! Target capacity of a backend = `capacity_cps × capacity_scaler` (absent `capacity_cps`
//! = unlimited). The offered load L (`offered_cps`, else the sum of measured `load_cps`;
//! L = 0 is the low-rate limit) is poured into levels in order, each level filled up to
//! its total target capacity and split inside in proportion to target capacity (a level
//! holding an unlimited backend absorbs the rest, split by weight among the unlimited):
//! 1. PREFERRED candidates, one level per zone, nearest zone (RTT from the forwarder) first;
//! 2. the other candidates by algorithm:
//!    - WATERFALL_BY_ZONE: one level per zone, own zone first, then by RTT (ties by name);
//!    - WATERFALL_BY_REGION (default): regions by distance; in the forwarder's region its
//!      own zone first, then the region's other zones together as one level; every other
//!      region one level;
//!    - SPRAY_TO_REGION: one level per region, by distance (no zone preference).
//!
//! Load beyond every level's capacity is spread over all candidates in proportion to
//! target capacity (over-full evenly). Shares are the allocations divided by L.
//!
//! [`failover_threshold`] then moves the share of every primary group whose healthy
//! endpoint percentage is below `failover_health_threshold` (default 70) to the available
//! failover backends.

use super::{lb_policy_configured, Ctx, TierKind, TraceEntry};
use crate::config::{Algorithm, Preference};

/// Target capacity (cps) of backend `i`; `None` = unlimited.
pub fn target(ctx: &Ctx<'_>, i: usize) -> Option<f64> {
    let b = &ctx.svc.backends[i];
    b.capacity_cps.map(|c| c * b.capacity_scaler)
}

/// Whether the stage is configured for this candidate set.
pub fn active(ctx: &Ctx<'_>, set: &[usize]) -> bool {
    ctx.svc.load_balancing_algorithm.is_some()
        || set.iter().any(|&i| {
            let b = &ctx.svc.backends[i];
            b.capacity_cps.is_some() || b.preference == Preference::PREFERRED
        })
}

fn zone_rtt(ctx: &Ctx<'_>, i: usize) -> f64 {
    ctx.topo.rtt_from_forwarder(&ctx.svc.backends[i].zone).unwrap_or(f64::INFINITY)
}

/// Groups `set` by `key`, ordered by (distance, key).
fn group_by<F: Fn(usize) -> (f64, String)>(set: &[usize], key: F) -> Vec<(String, Vec<usize>)> {
    let mut keyed: Vec<(f64, String, usize)> = set.iter().map(|&i| {
        let (d, k) = key(i);
        (d, k, i)
    }).collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (_, k, i) in keyed {
        match out.last_mut() {
            Some((lk, v)) if *lk == k => v.push(i),
            _ => out.push((k, vec![i])),
        }
    }
    out
}

/// The fill levels for the non-preferred candidates under `algo` (see module docs).
pub fn levels(ctx: &Ctx<'_>, set: &[usize], algo: Algorithm) -> Vec<(String, Vec<usize>)> {
    let zone = |i: usize| ctx.svc.backends[i].zone.clone();
    let region = |i: usize| ctx.region(i).unwrap_or("?").to_string();
    match algo {
        Algorithm::WATERFALL_BY_ZONE => group_by(set, |i| (zone_rtt(ctx, i), format!("zone {}", zone(i)))),
        Algorithm::SPRAY_TO_REGION => group_by(set, |i| (ctx.topo.region_distance(&region(i)), format!("region {}", region(i)))),
        Algorithm::WATERFALL_BY_REGION => {
            let fwd = ctx.topo.forwarder.clone();
            group_by(set, |i| {
                let r = region(i);
                let d = ctx.topo.region_distance(&r);
                match &fwd {
                    Some(f) if f.region == r && f.zone == zone(i) => (-1.0, format!("own zone {}", f.zone)),
                    Some(f) if f.region == r => (0.0, format!("region {r} (other zones)")),
                    _ => (d, format!("region {r}")),
                }
            })
        }
    }
}

fn fill(ctx: &Ctx<'_>, level: &[usize], remaining: &mut f64, alloc: &mut [f64]) -> (f64, f64) {
    let unlimited: Vec<usize> = level.iter().copied().filter(|&i| target(ctx, i).is_none()).collect();
    if !unlimited.is_empty() {
        let w: f64 = unlimited.iter().map(|&i| f64::from(ctx.svc.backends[i].weight)).sum();
        let take = *remaining;
        for &i in &unlimited {
            alloc[i] += take * f64::from(ctx.svc.backends[i].weight) / w;
        }
        *remaining = 0.0;
        return (f64::INFINITY, take);
    }
    let cap: f64 = level.iter().filter_map(|&i| target(ctx, i)).sum();
    if cap <= 0.0 {
        return (cap, 0.0);
    }
    let take = remaining.min(cap);
    for &i in level {
        alloc[i] += take * target(ctx, i).unwrap_or(0.0) / cap;
    }
    *remaining -= take;
    (cap, take)
}

/// Runs the stage; `Some(shares)` (index, share; may hold zeros) when active.
pub fn stage(ctx: &Ctx<'_>, set: &[usize], offered_cps: Option<f64>, trace: &mut Vec<TraceEntry>) -> Option<Vec<(usize, f64)>> {
    if set.is_empty() || !active(ctx, set) {
        trace.push(ctx.entry("capacity", "no load_balancing_algorithm, capacity or preference configured: pass", set, set));
        return None;
    }
    let algo = ctx.svc.load_balancing_algorithm.unwrap_or_default();
    let measured: f64 = ctx.states.iter().map(|s| s.load_cps).sum();
    let load = offered_cps.unwrap_or(measured);
    let l = if load > 0.0 && load.is_finite() { load } else { 1e-9 };
    let mut alloc = vec![0.0; ctx.svc.backends.len()];
    let mut remaining = l;
    let mut notes = Vec::new();
    let (pref, rest): (Vec<usize>, Vec<usize>) =
        set.iter().partition(|&&i| ctx.svc.backends[i].preference == Preference::PREFERRED);
    let pref_levels = group_by(&pref, |i| (zone_rtt(ctx, i), format!("preferred zone {}", ctx.svc.backends[i].zone)));
    for (label, lv) in pref_levels.iter().chain(levels(ctx, &rest, algo).iter()) {
        let (cap, take) = fill(ctx, lv, &mut remaining, &mut alloc);
        notes.push(format!("{label} {:?}: capacity {cap} cps, takes {take:.3} cps", ctx.names(lv)));
    }
    if remaining > 1e-12 {
        let caps: f64 = set.iter().filter_map(|&i| target(ctx, i)).sum();
        for &i in set {
            alloc[i] += if caps > 0.0 {
                remaining * target(ctx, i).unwrap_or(0.0) / caps
            } else {
                remaining / set.len() as f64
            };
        }
        notes.push(format!("every level full: {remaining:.3} cps over capacity spread in proportion to capacity"));
    }
    let total: f64 = alloc.iter().sum();
    let shares: Vec<(usize, f64)> = set.iter().map(|&i| (i, if total > 0.0 { alloc[i] / total } else { 0.0 })).collect();
    let out: Vec<usize> = shares.iter().filter(|(_, s)| *s > 0.0).map(|(i, _)| *i).collect();
    let mut e = ctx.entry(
        "capacity",
        format!("preferred first, then {algo:?} by target capacity = capacity_cps x capacity_scaler (spec/service-lb-policy.md)"),
        set,
        &out,
    );
    e.numbers.insert("offered_cps".into(), load);
    e.numbers.insert("capacity_cps".into(), set.iter().map(|&i| target(ctx, i).unwrap_or(f64::INFINITY)).sum());
    e.notes = notes;
    trace.push(e);
    Some(shares)
}

/// Shares in proportion to weight (spec/origin-routing.md step 4).
pub fn weight_shares(ctx: &Ctx<'_>, set: &[usize]) -> Vec<(usize, f64)> {
    let w: f64 = set.iter().map(|&i| f64::from(ctx.svc.backends[i].weight)).sum();
    set.iter().map(|&i| (i, if w > 0.0 { f64::from(ctx.svc.backends[i].weight) / w } else { 0.0 })).collect()
}

/// Failover health threshold (spec/service-lb-policy.md "Failover health threshold").
///
/// Applies when the service-LB policy is configured ([`lb_policy_configured`]), the
/// primaries are in use (tier [`TierKind::HealthyPrimaries`]) and the service has failover
/// backends: every candidate group with `healthy_endpoints × 100 < threshold × endpoints`
/// hands its share to the available failover backends of the best priority (restricted to
/// the isolation `region` when isolation chose one), split by target capacity when they
/// all have one, else by weight. Without such a failover backend nothing moves: traffic
/// stays on the group's remaining healthy endpoints.
pub fn failover_threshold(
    ctx: &Ctx<'_>,
    tier: TierKind,
    set: &[usize],
    available: &[usize],
    region: Option<&str>,
    shares: Option<Vec<(usize, f64)>>,
    trace: &mut Vec<TraceEntry>,
) -> Option<Vec<(usize, f64)>> {
    let svc = ctx.svc;
    let has_pool = svc.backends.iter().any(|b| b.failover);
    let t = svc.failover_threshold_percent();
    // Every rule names the threshold in effect, so a dry run of a new
    // failover_health_threshold shows this stage's change even when nothing moves.
    if !lb_policy_configured(svc) {
        trace.push(ctx.entry("failover_threshold", "no service LB policy configured (failover_health_threshold applies with one): pass", set, set));
        return shares;
    }
    if !has_pool || set.is_empty() {
        let why = if has_pool { "no candidates" } else { "no failover backends to send to" };
        let mut e = ctx.entry("failover_threshold", format!("failover_health_threshold = {t} %: {why}: pass"), set, set);
        e.numbers.insert("threshold_percent".into(), f64::from(t));
        trace.push(e);
        return shares;
    }
    if !matches!(tier, TierKind::HealthyPrimaries { .. }) {
        let mut e = ctx.entry("failover_threshold", format!("failover_health_threshold = {t} %: not on primaries: pass"), set, set);
        e.numbers.insert("threshold_percent".into(), f64::from(t));
        trace.push(e);
        return shares;
    }
    let mut notes = Vec::new();
    let below: Vec<usize> = set
        .iter()
        .copied()
        .filter(|&i| {
            let s = ctx.state(i);
            let low = s.endpoints > 0 && u64::from(s.healthy_endpoints) * 100 < u64::from(t) * u64::from(s.endpoints);
            notes.push(format!("{}: {}/{} healthy = {:.1} % {} {t} %", svc.backends[i].name, s.healthy_endpoints, s.endpoints,
                s.healthy_fraction() * 100.0, if low { "<" } else { ">=" }));
            low
        })
        .collect();
    let fo_all: Vec<usize> = available
        .iter()
        .copied()
        .filter(|&i| svc.backends[i].failover)
        .filter(|&i| match region {
            None => true,
            Some(r) => ctx.region(i).unwrap_or("?") == r,
        })
        .collect();
    let best = fo_all.iter().map(|&i| svc.backends[i].priority).min();
    let fo: Vec<usize> = fo_all.into_iter().filter(|&i| Some(svc.backends[i].priority) == best).collect();
    let base = shares.clone().unwrap_or_else(|| weight_shares(ctx, set));
    let out_shares = if below.is_empty() || fo.is_empty() {
        if !below.is_empty() {
            notes.push("no available failover backend: traffic stays on the groups' healthy endpoints".into());
        }
        shares
    } else {
        let moved: f64 = base.iter().filter(|(i, _)| below.contains(i)).map(|(_, s)| s).sum();
        let mut v: Vec<(usize, f64)> = base.iter().map(|&(i, s)| (i, if below.contains(&i) { 0.0 } else { s })).collect();
        let caps: Option<Vec<f64>> = fo.iter().map(|&i| target(ctx, i)).collect();
        let split: Vec<(usize, f64)> = match caps {
            Some(c) if c.iter().sum::<f64>() > 0.0 => {
                let tot: f64 = c.iter().sum();
                fo.iter().zip(c).map(|(&i, ci)| (i, ci / tot)).collect()
            }
            _ => weight_shares(ctx, &fo),
        };
        for (i, f) in split {
            match v.iter_mut().find(|(j, _)| *j == i) {
                Some(e) => e.1 += moved * f,
                None => v.push((i, moved * f)),
            }
        }
        v.sort_by_key(|(i, _)| *i);
        notes.push(format!("share {moved:.4} of groups below threshold moved to failover backends {:?}", ctx.names(&fo)));
        Some(v)
    };
    let out: Vec<usize> = match &out_shares {
        Some(v) => v.iter().filter(|(_, s)| *s > 0.0).map(|(i, _)| *i).collect(),
        None => set.to_vec(),
    };
    let mut e = ctx.entry("failover_threshold",
        format!("groups below failover_health_threshold = {t} % send to failover backends (spec/service-lb-policy.md)"), set, &out);
    e.numbers.insert("threshold_percent".into(), f64::from(t));
    e.numbers.insert("groups_below".into(), below.len() as f64);
    e.notes = notes;
    trace.push(e);
    out_shares
}
