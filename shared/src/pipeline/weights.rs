//! Stage 7 — weights → final shares (spec/origin-routing.md step 4): the capacity stage's
//! shares when it ran, else shares in proportion to `weight` over the candidates. Shares
//! are the Maglev weights of the snapshot's table.

use super::{capacity::weight_shares, Ctx, TraceEntry};

/// Runs the stage; returns `(index, share)` with shares > 0 summing to 1.0, by index.
pub fn stage(ctx: &Ctx<'_>, set: &[usize], shares: Option<Vec<(usize, f64)>>, trace: &mut Vec<TraceEntry>) -> Vec<(usize, f64)> {
    let (rule, raw) = match shares {
        Some(s) => ("shares from capacity (spec/service-lb-policy.md)", s),
        None => ("shares in proportion to weight (spec/origin-routing.md step 4)", weight_shares(ctx, set)),
    };
    let mut v: Vec<(usize, f64)> = raw.into_iter().filter(|(_, s)| *s > 0.0 && s.is_finite()).collect();
    v.sort_by_key(|(i, _)| *i);
    let tot: f64 = v.iter().map(|(_, s)| s).sum();
    for e in &mut v {
        e.1 /= tot;
    }
    let out: Vec<usize> = v.iter().map(|(i, _)| *i).collect();
    let mut e = ctx.entry("weights", rule, set, &out);
    for (i, s) in &v {
        e.numbers.insert(format!("share.{}", ctx.svc.backends[*i].name), *s);
    }
    trace.push(e);
    v
}
