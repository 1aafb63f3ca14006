//! Stage 1 — availability (spec/origin-routing.md step 1; spec/service-lb-policy.md "Auto
//! capacity drain and undrain").
//!
//! A backend is available when it is enabled, at least one of its endpoints passes health
//! checks, its `capacity_scaler` is not 0 and it is not auto-drained.
//!
//! Auto capacity drain (when `auto_capacity_drain = true`):
//! - drain candidate: fewer than 25 % of its endpoints healthy;
//! - candidates are drained (lowest healthy fraction first, then by name) while, after
//!   draining, `drained / all backends < 50 %`; zero-capacity backends (scaler 0, capacity
//!   0, no endpoints) never count in the numerator;
//! - a drained backend is undrained when ≥ 35 % of its endpoints have been healthy for at
//!   least 60 s, measured over the `now_sec` values of successive evaluations.

use super::{Ctx, DrainState, ServiceState, TraceEntry};

/// Drain candidate below this healthy fraction.
pub const DRAIN_BELOW: f64 = 0.25;
/// Drained backends stay below this fraction of all backends.
pub const MAX_DRAINED_FRACTION: f64 = 0.5;
/// Undrain at or above this healthy fraction ...
pub const UNDRAIN_AT: f64 = 0.35;
/// ... held for this long (seconds).
pub const UNDRAIN_HOLD_SEC: f64 = 60.0;

fn zero_capacity(ctx: &Ctx<'_>, i: usize) -> bool {
    let b = &ctx.svc.backends[i];
    b.capacity_scaler == 0.0 || b.capacity_cps == Some(0.0) || ctx.state(i).endpoints == 0
}

/// Updates the drain state of `st` at `now` and returns the drained backend indices.
pub fn update_drain(ctx: &Ctx<'_>, st: &mut ServiceState, now: f64, notes: &mut Vec<String>) -> Vec<usize> {
    let svc = ctx.svc;
    if !svc.auto_capacity_drain {
        st.drained.clear();
        return Vec::new();
    }
    // forget backends no longer configured
    st.drained.retain(|name, _| svc.backends.iter().any(|b| &b.name == name));
    // undrain timers
    for (i, b) in svc.backends.iter().enumerate() {
        let frac = ctx.state(i).healthy_fraction();
        let mut undrain = false;
        if let Some(d) = st.drained.get_mut(&b.name) {
            if zero_capacity(ctx, i) {
                undrain = true;
            } else if frac >= UNDRAIN_AT {
                let since = *d.recovering_since.get_or_insert(now);
                if now - since >= UNDRAIN_HOLD_SEC {
                    undrain = true;
                    notes.push(format!("{}: undrained ({:.0} % healthy for {:.0} s >= 60 s)", b.name, frac * 100.0, now - since));
                } else {
                    notes.push(format!("{}: stays drained ({:.0} % healthy for {:.0} s < 60 s)", b.name, frac * 100.0, now - since));
                }
            } else {
                d.recovering_since = None;
                notes.push(format!("{}: stays drained ({:.0} % healthy < 35 %)", b.name, frac * 100.0));
            }
        }
        if undrain {
            st.drained.remove(&b.name);
        }
    }
    // new drains
    let n = svc.backends.len() as f64;
    let mut count = st.drained.len();
    let mut cands: Vec<(f64, usize)> = (0..svc.backends.len())
        .filter(|&i| !st.drained.contains_key(&svc.backends[i].name) && !zero_capacity(ctx, i))
        .map(|i| (ctx.state(i).healthy_fraction(), i))
        .filter(|(f, _)| *f < DRAIN_BELOW)
        .collect();
    cands.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| svc.backends[a.1].name.cmp(&svc.backends[b.1].name)));
    for (frac, i) in cands {
        let name = &svc.backends[i].name;
        if ((count + 1) as f64) / n < MAX_DRAINED_FRACTION {
            count += 1;
            st.drained.insert(name.clone(), DrainState { drained_at: now, recovering_since: None });
            notes.push(format!("{name}: drained ({:.0} % healthy < 25 %; drained {count}/{n} < 50 %)", frac * 100.0));
        } else {
            notes.push(format!("{name}: drain candidate ({:.0} % healthy) not drained: {}/{n} would reach 50 %", frac * 100.0, count + 1));
        }
    }
    (0..svc.backends.len()).filter(|&i| st.drained.contains_key(&svc.backends[i].name)).collect()
}

/// The *draining* backends, ascending: enabled, with at least one enabled endpoint, and
/// `capacity_scaler = 0` or auto-drained (in `st.drained`; spec/service-lb-policy.md:
/// "Draining is equivalent to capacity scaler 0"). Call after [`stage`], which updates
/// the drain state. Read by the tier stage's healthy-draining rule (docs/semantics.md
/// "Choices" 3a).
pub fn draining(ctx: &Ctx<'_>, st: &ServiceState) -> Vec<usize> {
    let bs = &ctx.svc.backends;
    (0..bs.len())
        .filter(|&i| bs[i].enabled && ctx.state(i).endpoints > 0)
        .filter(|&i| bs[i].capacity_scaler == 0.0 || st.drained.contains_key(&bs[i].name))
        .collect()
}

/// Runs the stage over `input` (all backends) and returns the available set.
pub fn stage(ctx: &Ctx<'_>, input: &[usize], st: &mut ServiceState, now: f64, trace: &mut Vec<TraceEntry>) -> Vec<usize> {
    let mut notes = Vec::new();
    let drained = update_drain(ctx, st, now, &mut notes);
    let mut out = Vec::with_capacity(input.len());
    for &i in input {
        let b = &ctx.svc.backends[i];
        let s = ctx.state(i);
        let why = if !b.enabled {
            Some("disabled")
        } else if !s.is_healthy() {
            Some("unhealthy")
        } else if b.capacity_scaler == 0.0 {
            Some("capacity_scaler 0")
        } else if drained.contains(&i) {
            Some("auto-drained")
        } else {
            None
        };
        match why {
            Some(w) => notes.push(format!("{}: {w}", b.name)),
            None => out.push(i),
        }
    }
    let mut e = ctx.entry(
        "availability",
        if ctx.svc.auto_capacity_drain {
            "enabled and healthy, capacity not zero (spec/origin-routing.md step 1); auto capacity drain <25 % / undrain >=35 % for 60 s (spec/service-lb-policy.md)"
        } else {
            "enabled and healthy, capacity not zero (spec/origin-routing.md step 1)"
        },
        input,
        &out,
    );
    e.numbers.insert("available".into(), out.len() as f64);
    e.numbers.insert("configured".into(), input.len() as f64);
    if ctx.svc.auto_capacity_drain {
        e.numbers.insert("drained".into(), drained.len() as f64);
    }
    e.notes = notes;
    trace.push(e);
    out
}
