//! Stage 5 — latency band (spec/origin-routing.md step 3), when `latency_sensitivity_ms`
//! is set: keep candidates with `latency <= min latency + sensitivity`.
//!
//! Latency of a backend: its configured `latency_ms`, else the measured
//! `BackendState::latency_ms`. A candidate with no latency known is kept (never penalised
//! for not being measured yet; docs/semantics.md).

use super::{Ctx, TraceEntry};

/// Tolerance of the band comparison in ms.
pub const BAND_EPSILON_MS: f64 = 1e-9;

/// Latency of backend `i` in ms, if known.
pub fn latency_of(ctx: &Ctx<'_>, i: usize) -> Option<f64> {
    ctx.svc.backends[i].latency_ms.or(ctx.state(i).latency_ms)
}

/// Runs the stage.
pub fn stage(ctx: &Ctx<'_>, input: &[usize], trace: &mut Vec<TraceEntry>) -> Vec<usize> {
    let Some(sens) = ctx.svc.latency_sensitivity_ms else {
        trace.push(ctx.entry("latency", "latency_sensitivity_ms unset: no latency band", input, input));
        return input.to_vec();
    };
    let min = input.iter().filter_map(|&i| latency_of(ctx, i)).fold(f64::INFINITY, f64::min);
    let out: Vec<usize> = if min.is_finite() {
        input
            .iter()
            .copied()
            .filter(|&i| latency_of(ctx, i).unwrap_or(f64::NEG_INFINITY) <= min + sens + BAND_EPSILON_MS)
            .collect()
    } else {
        input.to_vec()
    };
    let mut e = ctx.entry("latency", "latency <= min + latency_sensitivity_ms (spec/origin-routing.md step 3)", input, &out);
    if min.is_finite() {
        e.numbers.insert("min_ms".into(), min);
        e.numbers.insert("threshold_ms".into(), min + sens);
    }
    e.numbers.insert("sensitivity_ms".into(), sens);
    for &i in input {
        let l = latency_of(ctx, i);
        e.notes.push(format!("{}: {}", ctx.svc.backends[i].name, l.map_or("unknown (kept)".to_string(), |l| format!("{l} ms"))));
    }
    trace.push(e);
    out
}
