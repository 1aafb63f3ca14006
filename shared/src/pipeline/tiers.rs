//! Stage 2 — tier selection: the "original eligible backends" (spec/backend-selection.md
//! "Original eligible backends"), generalised to priorities 1–5 (spec/origin-routing.md
//! "Priority").
//!
//! Backends with `failover = true` form the failover pool; the others are primaries. When
//! the service has no failover backend every backend is a primary.
//! - `failover_ratio` r (absent = 0.0), `h = healthy endpoints of available primaries /
//!   enabled endpoints of configured primaries` (endpoints: the VMs of the seeds):
//!   r = 0 fails over only when no primary is available; r > 0 fails over when `h < r`
//!   (strictly).
//! - not failed over → the available primaries of the best (lowest) available priority;
//! - failed over → the available failover backends of their best priority; when none is
//!   available but some primary is, the available primaries (best priority);
//! - nothing available, but some backend is *draining* (enabled, `capacity_scaler = 0` or
//!   auto-drained) and healthy while some enabled backend with an enabled endpoint is not
//!   draining → the healthy draining backends (primaries first, else failover backends; the
//!   best priority among them). This is this project's addition to the spec's last-resort
//!   rule, Kubernetes' rule for terminating endpoints (KEP-1669; docs/semantics.md
//!   "Choices" 3a): a live backend on its way out serves before a dead one. It comes
//!   before `drop_traffic_if_unhealthy` too (those backends are healthy). When *every*
//!   enabled backend is draining (all `capacity_scaler = 0`), or none is enabled, nothing
//!   changes: the connection is dropped and the VIP withdrawn.
//! - otherwise nothing available → `drop_traffic_if_unhealthy`: drop; otherwise last
//!   resort: the enabled primaries with non-zero scaler and at least one enabled endpoint
//!   of the best configured priority (unhealthy).
//!   When no such primary exists (e.g. all disabled) the connection is dropped.

use super::{Ctx, TierKind, TraceEntry};

fn best_priority(ctx: &Ctx<'_>, set: &[usize]) -> Option<u32> {
    set.iter().map(|&i| ctx.svc.backends[i].priority).min()
}

fn of_priority(ctx: &Ctx<'_>, set: &[usize], p: u32) -> Vec<usize> {
    set.iter().copied().filter(|&i| ctx.svc.backends[i].priority == p).collect()
}

/// The healthy draining backends that take new connections when nothing is available
/// (module docs), or `None` when the rule does not apply. `draining`: the draining
/// backends from [`super::availability::draining`].
fn healthy_draining(ctx: &Ctx<'_>, draining: &[usize]) -> Option<Vec<usize>> {
    let bs = &ctx.svc.backends;
    let live_configured = (0..bs.len()).any(|i| bs[i].enabled && ctx.state(i).endpoints > 0 && !draining.contains(&i));
    let healthy: Vec<usize> = draining.iter().copied().filter(|&i| ctx.state(i).is_healthy()).collect();
    if !live_configured || healthy.is_empty() {
        return None;
    }
    let primaries: Vec<usize> = healthy.iter().copied().filter(|&i| !bs[i].failover).collect();
    let pool = if primaries.is_empty() { healthy } else { primaries };
    let p = best_priority(ctx, &pool)?;
    Some(of_priority(ctx, &pool, p))
}

/// Runs the stage over the available set; returns the tier and its set (A). `draining`:
/// the draining backends ([`super::availability::draining`]), used only when nothing is
/// available.
pub fn stage(ctx: &Ctx<'_>, available: &[usize], draining: &[usize], trace: &mut Vec<TraceEntry>) -> (TierKind, Vec<usize>) {
    let svc = ctx.svc;
    let has_pool = svc.backends.iter().any(|b| b.failover);
    let primaries: Vec<usize> = (0..svc.backends.len()).filter(|&i| !svc.backends[i].failover).collect();
    let avail_p: Vec<usize> = available.iter().copied().filter(|&i| !svc.backends[i].failover).collect();
    let avail_f: Vec<usize> = available.iter().copied().filter(|&i| svc.backends[i].failover).collect();
    let mut numbers = std::collections::BTreeMap::new();
    let mut notes = Vec::new();

    let failed_over = if has_pool {
        let r = svc.failover_ratio.unwrap_or(0.0);
        // h counts endpoints (the VMs of spec/backend-selection.md): healthy endpoints of
        // the available primaries over the enabled endpoints of every primary.
        let healthy_eps: u32 = avail_p.iter().map(|&i| { let s = ctx.state(i); s.healthy_endpoints.min(s.endpoints) }).sum();
        let all_eps: u32 = primaries.iter().map(|&i| ctx.state(i).endpoints).sum();
        let h = if all_eps == 0 { 0.0 } else { f64::from(healthy_eps) / f64::from(all_eps) };
        numbers.insert("h".to_string(), h);
        numbers.insert("r".to_string(), r);
        numbers.insert("healthy_primaries".to_string(), avail_p.len() as f64);
        numbers.insert("configured_primaries".to_string(), primaries.len() as f64);
        numbers.insert("healthy_primary_endpoints".to_string(), f64::from(healthy_eps));
        numbers.insert("primary_endpoints".to_string(), f64::from(all_eps));
        let fo = if r == 0.0 { avail_p.is_empty() } else { h < r };
        notes.push(if r == 0.0 {
            format!("r = 0: fail over only when no primary is healthy -> {}", if fo { "failed over" } else { "primaries" })
        } else {
            format!("h = {healthy_eps}/{all_eps} endpoints = {h:.4} {} r = {r} -> {}", if fo { "<" } else { ">=" },
                if fo { "failed over" } else { "primaries" })
        });
        fo
    } else {
        false
    };

    let (kind, set, rule) = if !failed_over && !avail_p.is_empty() {
        let p = best_priority(ctx, &avail_p).unwrap_or(1);
        (TierKind::HealthyPrimaries { priority: p }, of_priority(ctx, &avail_p, p),
            if has_pool { "not failed over: healthy primaries of the best available priority (spec/backend-selection.md; spec/origin-routing.md step 2)" }
            else { "healthy backends of the best available priority (spec/backend-selection.md; spec/origin-routing.md step 2)" })
    } else if failed_over && !avail_f.is_empty() {
        let p = best_priority(ctx, &avail_f).unwrap_or(1);
        (TierKind::HealthyFailover { priority: p }, of_priority(ctx, &avail_f, p),
            "failed over: healthy failover backends of the best available priority (spec/backend-selection.md)")
    } else if !avail_p.is_empty() {
        let p = best_priority(ctx, &avail_p).unwrap_or(1);
        notes.push("failed over but no failover backend is healthy: stay on healthy primaries".into());
        (TierKind::HealthyPrimaries { priority: p }, of_priority(ctx, &avail_p, p),
            "no healthy failover backend: healthy primaries of the best available priority (docs/semantics.md)")
    } else if let Some(set) = healthy_draining(ctx, draining) {
        notes.push(format!("no non-draining backend is healthy; draining and healthy: {:?}", ctx.names(&set)));
        (TierKind::HealthyDraining, set,
            "no non-draining backend healthy: the healthy draining backends, before the all-unhealthy last resort (docs/semantics.md; Kubernetes KEP-1669 terminating endpoints)")
    } else if svc.drop_traffic_if_unhealthy {
        (TierKind::Drop, Vec::new(), "nothing healthy, drop_traffic_if_unhealthy = true: drop (spec/backend-selection.md)")
    } else {
        let usable: Vec<usize> = primaries
            .iter()
            .copied()
            // an empty group (every endpoint disabled) has nowhere to send a connection
            .filter(|&i| svc.backends[i].enabled && svc.backends[i].capacity_scaler != 0.0 && ctx.state(i).endpoints > 0)
            .collect();
        match best_priority(ctx, &usable) {
            Some(p) => (TierKind::LastResortPrimaries, of_priority(ctx, &usable, p),
                "nothing healthy: last resort, all primaries of the best priority, unhealthy (spec/backend-selection.md)"),
            None => (TierKind::Drop, Vec::new(), "nothing healthy and no enabled primary: drop (docs/semantics.md)"),
        }
    };
    if let TierKind::HealthyPrimaries { priority } | TierKind::HealthyFailover { priority } = kind {
        numbers.insert("priority".to_string(), f64::from(priority));
    }
    let mut e = ctx.entry("tiers", rule, available, &set);
    e.numbers = numbers;
    e.notes = notes;
    e.notes.push(format!("A = {kind:?}"));
    trace.push(e);
    (kind, set)
}
