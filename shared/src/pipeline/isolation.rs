//! Stage 4 — traffic isolation (spec/service-lb-policy.md "Traffic isolation").
//!
//! Only with `isolation_granularity = REGION` and a known forwarder location. Regions are
//! ordered by distance from the forwarder: its own region first (0), then by the smallest
//! `rtt_ms` to one of their zones, unknown last, ties by name.
//! - NEAREST: the candidates in the nearest region that holds any candidate;
//! - STRICT: the candidates in the forwarder's own region; none → drop.
//!
//! The candidates are what the earlier stages chose: unhealthy backends picked on purpose
//! (last resort, STAY_WITHIN_ZONE) count as able to serve (docs/semantics.md).

use super::{Ctx, TraceEntry};
use crate::config::IsolationMode;

/// Runs the stage; returns (set, drop, chosen region).
pub fn stage(ctx: &Ctx<'_>, input: &[usize], trace: &mut Vec<TraceEntry>) -> (Vec<usize>, bool, Option<String>) {
    let svc = ctx.svc;
    if svc.isolation_granularity.is_none() {
        trace.push(ctx.entry("isolation", "isolation_granularity unset: no isolation (spec/service-lb-policy.md)", input, input));
        return (input.to_vec(), false, None);
    }
    let Some(fwd) = ctx.topo.forwarder.clone() else {
        let mut e = ctx.entry("isolation", "no forwarder location configured: isolation not evaluated", input, input);
        e.notes.push("set [forwarder] zone/region to enforce isolation".into());
        trace.push(e);
        return (input.to_vec(), false, None);
    };
    let mode = svc.isolation_mode.unwrap_or_default();
    let region_of = |i: usize| ctx.region(i).unwrap_or("?").to_string();
    let mut regions: Vec<(f64, String)> = input
        .iter()
        .map(|&i| region_of(i))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|r| (ctx.topo.region_distance(&r), r))
        .collect();
    regions.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    let (chosen, rule) = match mode {
        IsolationMode::STRICT => (fwd.region.clone(), "REGION/STRICT: only the nearest region; no candidate there -> drop (spec/service-lb-policy.md)"),
        IsolationMode::NEAREST => (
            regions.first().map(|r| r.1.clone()).unwrap_or_else(|| fwd.region.clone()),
            "REGION/NEAREST: the nearest region holding a candidate (spec/service-lb-policy.md)",
        ),
    };
    let out: Vec<usize> = input.iter().copied().filter(|&i| region_of(i) == chosen).collect();
    let drop = out.is_empty() && mode == IsolationMode::STRICT;
    let mut e = ctx.entry("isolation", rule, input, &out);
    e.notes.push(format!("forwarder {} in {}; chosen region {chosen}", fwd.zone, fwd.region));
    for (d, r) in &regions {
        e.notes.push(format!("candidate region {r}: distance {}", if d.is_finite() { format!("{d} ms") } else { "unknown".into() }));
    }
    if drop {
        e.notes.push("STRICT: nearest region has no candidate: drop".into());
    }
    trace.push(e);
    (out, drop, Some(chosen))
}
