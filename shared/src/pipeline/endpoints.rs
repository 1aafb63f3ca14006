//! Backends as groups of endpoints (docs/semantics.md "Backend groups";
//! spec/service-lb-policy.md "Vocabulary": health is per endpoint, capacity per backend).
//!
//! The pipeline ([`super::evaluate`]) decides over backends with their endpoint counts
//! ([`super::BackendState`]); this module is the one place that turns per-endpoint health
//! into those counts ([`group_counts`]) and a backend-level decision into per-endpoint
//! shares ([`endpoint_shares`]). The daemon's snapshot compiler and the scenario runner
//! both call it, so the two agree by construction on this step.

use crate::config::{Member, Service};

/// One endpoint's share of new connections.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointShare {
    /// Backend index in `Service::backends`.
    pub backend: usize,
    /// Endpoint index in [`crate::config::Backend::members`].
    pub endpoint: usize,
    /// Long-run share of new connections in (0, 1]; the shares of a decision sum to 1.
    pub share: f64,
}

/// `(endpoints, healthy_endpoints)` of a group: enabled endpoints, and those of them whose
/// `healthy(i)` is true (`i` = index in `members`). Disabled endpoints count in neither: an
/// admin removal is not a failure.
pub fn group_counts(members: &[Member], healthy: impl Fn(usize) -> bool) -> (u32, u32) {
    let mut n = 0;
    let mut h = 0;
    for (i, _) in members.iter().enumerate().filter(|(_, m)| m.enabled) {
        n += 1;
        h += u32::from(healthy(i));
    }
    (n, h)
}

/// Spreads backend shares (`weights`: `(backend index, share)` from
/// [`super::Decision::weights`]) over endpoints: a backend's share goes to its enabled,
/// healthy endpoints in proportion to endpoint weight (traffic first shifts to the
/// remaining healthy endpoints of the same backend). A backend chosen without any healthy
/// endpoint (last resort) spreads over all its enabled endpoints. A backend without an
/// enabled endpoint gets nothing and the rest is scaled back to a total of 1.
/// `healthy(backend, endpoint)` gives each endpoint's health. Output order: backend, then
/// endpoint, ascending; only positive shares.
pub fn endpoint_shares(svc: &Service, weights: &[(usize, f64)], healthy: impl Fn(usize, usize) -> bool) -> Vec<EndpointShare> {
    let mut out = Vec::new();
    for &(bi, share) in weights {
        let Some(b) = svc.backends.get(bi) else { continue };
        let members = b.members();
        let any_healthy = members.iter().enumerate().any(|(k, m)| m.enabled && healthy(bi, k));
        let pick = |k: usize, m: &Member| m.enabled && (!any_healthy || healthy(bi, k));
        let total: f64 = members.iter().enumerate().filter(|(k, m)| pick(*k, m)).map(|(_, m)| f64::from(m.weight)).sum();
        if total <= 0.0 || share <= 0.0 {
            continue;
        }
        for (k, m) in members.iter().enumerate().filter(|(k, m)| pick(*k, m)) {
            out.push(EndpointShare { backend: bi, endpoint: k, share: share * f64::from(m.weight) / total });
        }
    }
    let sum: f64 = out.iter().map(|e| e.share).sum();
    if sum > 0.0 && (sum - 1.0).abs() > 1e-12 {
        for e in &mut out {
            e.share /= sum;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Backend, Endpoint, Protocol};

    fn svc() -> Service {
        let mut s = Service::new("web", "10.0.0.100".parse::<std::net::IpAddr>().unwrap(), 80, Protocol::Tcp);
        let mut g1 = Backend::new("g1", "z1");
        for (i, w) in [(1u8, 50), (2, 150), (3, 100)] {
            let mut e = Endpoint::new(None, std::net::Ipv4Addr::new(10, 0, 1, i));
            e.weight = w;
            g1.endpoints.push(e);
        }
        s.backends.push(g1);
        let mut b2 = Backend::new("b2", "z1");
        b2.address = "10.0.2.1".parse().unwrap();
        s.backends.push(b2);
        s
    }

    #[test]
    fn shares_follow_backend_then_endpoint_weight_over_healthy_endpoints() {
        let s = svc();
        let all = endpoint_shares(&s, &[(0, 0.6), (1, 0.4)], |_, _| true);
        let got: Vec<(usize, usize, f64)> = all.iter().map(|e| (e.backend, e.endpoint, e.share)).collect();
        let want = [(0, 0, 0.1), (0, 1, 0.3), (0, 2, 0.2), (1, 0, 0.4)];
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0, g.1), (w.0, w.1));
            assert!((g.2 - w.2).abs() < 1e-12, "{got:?}");
        }
        // endpoint 1 of g1 down: its share moves to g1's other endpoints, not to b2
        let some = endpoint_shares(&s, &[(0, 0.6), (1, 0.4)], |b, e| !(b == 0 && e == 1));
        assert!(some.iter().all(|e| !(e.backend == 0 && e.endpoint == 1)));
        let g1: f64 = some.iter().filter(|e| e.backend == 0).map(|e| e.share).sum();
        assert!((g1 - 0.6).abs() < 1e-12 && (some[0].share - 0.2).abs() < 1e-12, "{some:?}");
    }

    #[test]
    fn last_resort_spreads_over_enabled_endpoints_and_disabled_ones_never_count() {
        let mut s = svc();
        s.backends[0].endpoints[2].enabled = false;
        let m = s.backends[0].members();
        assert_eq!(group_counts(&m, |i| i != 0), (2, 1));
        let v = endpoint_shares(&s, &[(0, 1.0)], |_, _| false);
        assert_eq!(v.iter().map(|e| e.endpoint).collect::<Vec<_>>(), [0, 1]);
        assert!((v[0].share - 0.25).abs() < 1e-12 && (v[1].share - 0.75).abs() < 1e-12);
        // a backend with no enabled endpoint gets nothing; the rest sums to 1
        for e in &mut s.backends[0].endpoints {
            e.enabled = false;
        }
        let v = endpoint_shares(&s, &[(0, 0.5), (1, 0.5)], |_, _| true);
        assert_eq!(v.len(), 1);
        assert!((v[0].share - 1.0).abs() < 1e-12);
    }

    #[test]
    fn last_resort_skips_a_group_without_enabled_endpoints() {
        use crate::pipeline::{evaluate, BackendState, ClientClass, ServiceState, Topology};
        let mut s = svc();
        for e in &mut s.backends[0].endpoints {
            e.enabled = false;
        }
        // nothing healthy: g1 (no enabled endpoint) is no last-resort candidate; b2 is
        let states = [BackendState { endpoints: 0, healthy_endpoints: 0, latency_ms: None, load_cps: 0.0 }, BackendState::unhealthy()];
        let d = evaluate(&s, &states, &Topology::default(), &ClientClass::Incompatible, None, &mut ServiceState::default(), 0.0);
        assert_eq!(d.weights, vec![(1, 1.0)]);
        // only the empty group: dropped, as the daemon (no endpoint, no table) does
        s.backends.remove(1);
        let d = evaluate(&s, &states[..1], &Topology::default(), &ClientClass::Incompatible, None, &mut ServiceState::default(), 0.0);
        assert!(d.drop && d.weights.is_empty(), "{d:?}");
    }
}
