//! Connection draining on failover and failback (spec/backend-selection.md "Connection
//! draining on failover/failback"): which endpoint slots of a service lose their tracked
//! connections when they stop taking new ones, and when.
//!
//! The rule, as the daemon applies it at every republication:
//! * the **inactive pool** of a service is the one its active pool (primary or failover,
//!   from the compiled snapshot) is not;
//! * a slot of the inactive pool **starts draining** at time `t` when it stops taking new
//!   connections: at a switch of the active pool (the slots of the pool it left that the
//!   pipeline gives no new connection), or at a republication where a slot the pipeline gave
//!   new connections no longer gets any while nothing of its own explains it (the
//!   failover-threshold stage sends new connections to failover backends without a switch,
//!   spec/service-lb-policy.md "Failover health threshold", and stops when the primary
//!   groups recover). A slot that stops because it was disabled, became unhealthy or has
//!   a capacity of zero does not start draining: disabled backends keep their connections
//!   (docs/ctl.md), unhealthy ones follow `connection_persistence_on_unhealthy_backends`;
//! * a draining slot keeps its connections until `t + connection_drain_timeout_sec`
//!   (`draining_until_ms`), or loses them at once with
//!   `disable_connection_drain_on_failover` (`evict_connections`); once the deadline has
//!   passed it is marked `evict_connections`, so the worker clock's wrap (2^32 ms) never
//!   makes an old deadline look future again;
//! * a slot **stops draining** once the pipeline gives it new connections again (it is never
//!   re-picked per packet while it takes new connections), or once it no longer belongs to
//!   the inactive pool (removed, moved to the other pool, or a switch made its pool active).
//!
//! So every connection on the inactive pool is bounded by one drain timeout after its slot
//! last took new connections, whatever happened before. Slots that never took new
//! connections since start are not marked (they have none).
//!
//! Pure: driven by an explicit clock (ms on the worker clock), so the worker-level model
//! test (`dataplane/tests/model.rs`) runs the same code the daemon does.

use crate::control::snapshot::ServiceSnap;
use crate::control::{SlotMap, Snapshot};
use spillway_shared::config::Config;
use std::collections::HashMap;

/// A slot of the inactive pool that stopped taking new connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draining {
    /// Endpoint slot.
    pub slot: u16,
    /// When it stopped taking new connections (ms on the worker clock).
    pub since_ms: u32,
    /// Its drain deadline has passed (seen by a republication): marked `evict_connections`.
    pub passed: bool,
}

/// Which pool of a service is active, since when, and which slots drain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolState {
    /// The failover pool is active.
    pub failed_over: bool,
    /// When the active pool last changed (ms on the worker clock); `None`: never since start.
    pub switched_at_ms: Option<u32>,
    /// Slots the pipeline gave new connections at the last republication, sorted.
    pub eligible: Vec<u16>,
    /// Slots of the inactive pool that drain, sorted by slot.
    pub draining: Vec<Draining>,
}

impl PoolState {
    /// The state of a service whose active pool is `failed_over` at start: no switch yet.
    pub fn new(failed_over: bool) -> PoolState {
        PoolState { failed_over, ..PoolState::default() }
    }

    /// The state of a service compiled as `ss` at start: its active pool and the slots it
    /// gives new connections; no switch, nothing draining.
    pub fn at_start(ss: &ServiceSnap) -> PoolState {
        PoolState { eligible: eligible_slots(ss), ..PoolState::new(ss.failed_over) }
    }

    /// Whether a republication at `now_ms` would change this pool's marks because a drain
    /// deadline has passed (the control loop republishes then; see the module doc).
    pub fn deadline_due(&self, drain_timeout_sec: u32, now_ms: u32) -> bool {
        self.draining.iter().any(|d| !d.passed && passed(d.since_ms, drain_timeout_sec, now_ms))
    }
}

/// Slots `ss` gives new connections, in any client class, sorted.
fn eligible_slots(ss: &ServiceSnap) -> Vec<u16> {
    let mut v: Vec<u16> = ss.tables.iter().flatten().flat_map(|t| t.backends.iter().copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `now` is at or past `t + timeout_sec` on the wrapping worker clock (valid while less than
/// 2^32 ms separate them; the daemon checks every second).
fn passed(t: u32, timeout_sec: u32, now: u32) -> bool {
    u64::from(now.wrapping_sub(t)) >= u64::from(timeout_sec) * 1000
}

/// Whether the endpoint in `slot` (of service `svc`) is disabled, unhealthy in `snap`, or of a
/// backend with a capacity of zero: a reason of its own to take no new connections.
fn own_reason(svc: &spillway_shared::config::Service, slots: &SlotMap, snap: &Snapshot, slot: u16) -> bool {
    let Some((_, b, ep)) = slots.owner(slot) else { return true };
    let Some(be) = svc.backends.iter().find(|x| x.name == *b) else { return true };
    let disabled = !be.enabled || be.members().iter().any(|m| m.name == *ep && !m.enabled);
    let unhealthy = snap.backends.get(usize::from(slot)).is_none_or(|x| !x.healthy);
    disabled || unhealthy || be.capacity_scaler == 0.0 || be.capacity_cps == Some(0.0)
}

/// Updates `pools` from the freshly compiled `snap` (service order of `cfg`) at `now_ms`
/// and marks the draining slots in `snap` (`draining_until_ms` or `evict_connections`).
/// Services absent from `pools` start with the pool `snap` gives them, no switch, and no
/// slot draining.
pub fn mark_draining(cfg: &Config, slots: &SlotMap, snap: &mut Snapshot, pools: &mut HashMap<String, PoolState>, now_ms: u32) {
    mark(cfg, slots, snap, pools, now_ms, true);
}

/// [`mark_draining`] for a prediction (`--dry-run`): the same rule on a snapshot that is not
/// published and pool states that are a copy, without logging the pool switches it sees.
pub fn predict_draining(cfg: &Config, slots: &SlotMap, snap: &mut Snapshot, pools: &mut HashMap<String, PoolState>, now_ms: u32) {
    mark(cfg, slots, snap, pools, now_ms, false);
}

fn mark(cfg: &Config, slots: &SlotMap, snap: &mut Snapshot, pools: &mut HashMap<String, PoolState>, now_ms: u32, log: bool) {
    for (si, svc) in cfg.services.iter().enumerate() {
        let Some(ss) = snap.services.get(si) else { continue };
        let fo = ss.failed_over;
        let eligible = eligible_slots(ss);
        // (the name copied only for a service new to `pools`, not per service per publication)
        if !pools.contains_key(&svc.name) {
            pools.insert(svc.name.clone(), PoolState::at_start(ss));
        }
        let Some(ps) = pools.get_mut(&svc.name) else { continue };
        let inactive = |slot: u16| {
            slots.owner(slot).is_some_and(|(s, b, _)| *s == svc.name && svc.backends.iter().any(|be| be.name == *b && be.failover != fo))
        };
        let mut starting: Vec<u16> = Vec::new();
        if ps.failed_over != fo {
            if log {
                tracing::info!(service = %svc.name, failed_over = fo, "active pool changed ({})", if fo { "failover" } else { "failback" });
            }
            ps.failed_over = fo;
            ps.switched_at_ms = Some(now_ms);
            // every slot of the pool it left, eligible before or not (connections may
            // persist on unhealthy ones)
            starting.extend(svc.backends.iter().filter(|b| b.failover != fo).flat_map(|b| slots.backend_slots(&svc.name, &b.name)));
        }
        // slots that took new connections at the last republication and take none now, for
        // no reason of their own (the pipeline stopped sending: the threshold stage ended)
        starting.extend(ps.eligible.iter().copied().filter(|s| eligible.binary_search(s).is_err() && !own_reason(svc, slots, snap, *s)));
        ps.draining.retain(|d| eligible.binary_search(&d.slot).is_err() && inactive(d.slot));
        for slot in starting {
            let known = ps.draining.binary_search_by_key(&slot, |d| d.slot);
            if let Err(at) = known {
                if eligible.binary_search(&slot).is_err() && inactive(slot) {
                    ps.draining.insert(at, Draining { slot, since_ms: now_ms, passed: false });
                }
            }
        }
        ps.eligible = eligible;
        for d in &mut ps.draining {
            d.passed |= svc.disable_connection_drain_on_failover || passed(d.since_ms, svc.connection_drain_timeout_sec, now_ms);
            let Some(bs) = snap.backends.get_mut(usize::from(d.slot)) else { continue };
            if d.passed {
                bs.evict_connections = true;
            } else {
                bs.draining_until_ms = Some(d.since_ms.wrapping_add(svc.connection_drain_timeout_sec.saturating_mul(1000)));
            }
        }
    }
    // the marks change which slots the vector fast path may take
    snap.seal();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{compile, CompileInput, HealthView};

    /// Service `web`: failover threshold 70, primary group `p` of 4 endpoints, failover
    /// backend `f` (the review's failover-threshold case).
    fn config() -> Config {
        let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nfailover_health_threshold = 70\nconnection_drain_timeout_sec = 600\n[[services.backends]]\nname = \"p\"\n");
        for k in 1..=4 {
            t += &format!("[[services.backends.endpoints]]\nname = \"e{k}\"\naddress = \"10.0.1.{k}\"\nmac = \"02:00:00:00:01:{k:02x}\"\n");
        }
        t += "[[services.backends]]\nname = \"f\"\nfailover = true\naddress = \"10.0.2.1\"\nmac = \"02:00:00:00:02:01\"\n";
        Config::from_toml(&t).unwrap()
    }

    struct Run {
        cfg: Config,
        slots: SlotMap,
        health: HealthView,
        pools: HashMap<String, PoolState>,
        f: u16,
    }

    impl Run {
        fn new() -> Run {
            let cfg = config();
            let mut slots = SlotMap::default();
            slots.sync(&cfg).unwrap();
            let f = slots.slot("web", "f", "f").unwrap();
            Run { cfg, slots, health: HealthView::new(), pools: HashMap::new(), f }
        }
        /// Sets the primaries `down` unhealthy (the rest healthy), compiles and marks at `now`;
        /// returns (failed over, f's drain deadline, f evicted).
        fn at(&mut self, down: &[u8], now: u32) -> (bool, Option<u32>, bool) {
            for k in 1..=4u8 {
                self.health.entry(("web".into(), "p".into(), format!("e{k}"))).or_default().healthy = !down.contains(&k);
            }
            let mut states = HashMap::new();
            let input = CompileInput { health: &self.health, states: &mut states, now_sec: f64::from(now) / 1000.0, generation: 1, port_addrs: vec![0] };
            let mut snap = compile(&self.cfg, &self.slots, input);
            mark_draining(&self.cfg, &self.slots, &mut snap, &mut self.pools, now);
            let b = &snap.backends[usize::from(self.f)];
            (snap.services[0].failed_over, b.draining_until_ms, b.evict_connections)
        }
    }

    #[test]
    fn only_the_pool_that_is_no_longer_eligible_drains() {
        let mut r = Run::new();
        assert_eq!(r.at(&[], 0), (false, None, false), "no switch yet");
        assert_eq!(r.at(&[1, 2, 3, 4], 1_000), (true, None, false), "failover: f is the active pool");
        assert_eq!(r.at(&[], 2_000), (false, Some(602_000), false), "failback: f drains until t + 600 s");
        // 2 of 4 healthy < 70 %: the threshold stage gives f new connections: not draining
        assert_eq!(r.at(&[1, 2], 3_000), (false, None, false));
        assert_eq!(r.at(&[1, 2], 3_500), (false, None, false), "never re-picked per packet while eligible");
        // the threshold stage stops: f drains from then, for one drain timeout
        assert_eq!(r.at(&[], 4_000), (false, Some(604_000), false), "f stopped taking new connections at 4 s");
        assert_eq!(r.at(&[], 603_999), (false, Some(604_000), false));
        assert_eq!(r.at(&[], 604_000), (false, None, true), "past its deadline: evicted");
        assert_eq!(r.at(&[], 700_000), (false, None, true));
        // eligible again (threshold stage): not marked at all
        assert_eq!(r.at(&[1, 2, 3], 710_000), (false, None, false));
        // the next switch starts over
        assert_eq!(r.at(&[1, 2, 3, 4], 800_000), (true, None, false));
        assert_eq!(r.at(&[], 900_000), (false, Some(1_500_000), false));
    }

    #[test]
    fn without_a_switch_a_threshold_pick_drains_when_the_threshold_stage_stops() {
        let mut r = Run::new();
        assert_eq!(r.at(&[], 0), (false, None, false));
        assert_eq!(r.at(&[1, 2], 1_000), (false, None, false), "threshold stage: f takes new connections");
        assert_eq!(r.at(&[], 2_000), (false, Some(602_000), false), "the same bound with or without an earlier switch");
    }

    #[test]
    fn a_failover_backend_disabled_or_unhealthy_keeps_its_rules_instead_of_draining() {
        let mut r = Run::new();
        r.at(&[], 0);
        assert_eq!(r.at(&[1, 2], 1_000), (false, None, false), "threshold stage: f takes new connections");
        // disabled while the threshold stage sends to it: disabled backends keep their
        // connections (docs/ctl.md), nothing drains
        r.cfg.services[0].backends[1].enabled = false;
        assert_eq!(r.at(&[1, 2], 2_000), (false, None, false));
        assert_eq!(r.at(&[], 900_000), (false, None, false), "not even when the threshold stage ends later");
        // unhealthy likewise (the persistence rule applies, not a drain)
        let mut r = Run::new();
        r.at(&[], 0);
        r.at(&[1, 2], 1_000);
        r.health.entry(("web".into(), "f".into(), "f".into())).or_default().healthy = false;
        assert_eq!(r.at(&[1, 2], 2_000), (false, None, false));
    }

    #[test]
    fn a_passed_deadline_stays_passed_across_the_clock_wrap() {
        let mut r = Run::new();
        r.at(&[], 0);
        r.at(&[1, 2, 3, 4], 1_000);
        let t = 2_000u32;
        assert_eq!(r.at(&[], t), (false, Some(t + 600_000), false));
        assert!(!r.pools["web"].deadline_due(600, t + 599_999));
        assert!(r.pools["web"].deadline_due(600, t + 600_000), "the control tick republishes at the deadline");
        assert_eq!(r.at(&[], t + 600_000), (false, None, true), "past the deadline: evicted");
        assert!(!r.pools["web"].deadline_due(600, t + 600_001), "nothing more to do");
        // 2^31 ms later a wrapping deadline would look future again; the eviction stays
        assert_eq!(r.at(&[], t.wrapping_add(1 << 31).wrapping_add(600_000)), (false, None, true));
        assert_eq!(r.at(&[], t.wrapping_add(u32::MAX)), (false, None, true));
    }

    #[test]
    fn without_connection_drain_the_inactive_pool_is_cut_at_once() {
        let mut r = Run::new();
        r.cfg.services[0].disable_connection_drain_on_failover = true;
        r.at(&[], 0);
        r.at(&[1, 2, 3, 4], 1_000);
        assert_eq!(r.at(&[], 2_000), (false, None, true));
    }
}
