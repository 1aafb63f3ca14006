//! What the daemon's side threads report about its liveness, kept in [`crate::daemon::Daemon`]
//! and read by more than one thread: the fleet state (VIP readiness rows, operator drains,
//! the workers' poll progress; evaluated by [`crate::announce`]) and the control loop's
//! [`Heartbeat`] (read by [`crate::systemd`] for the watchdog). A leaf: the daemon holds
//! these, and the modules that evaluate them take the daemon.

use spillway_shared::proto::VipRow;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Link state of each port as the control loop's once-a-second check last saw it
/// (`dpdk::LinkWatch`): `status` shows it with the changes counted, and a port whose link
/// is down makes every VIP not ready (docs/bgp.md "Readiness").
#[derive(Debug, Default)]
pub struct LinkStates {
    /// Per port: name, link up (`None`: not checked yet or the driver cannot tell), changes.
    inner: Mutex<Vec<(String, Option<bool>, u64)>>,
}

impl LinkStates {
    /// Ports by name (config order), none checked yet.
    pub fn new(names: impl IntoIterator<Item = String>) -> LinkStates {
        LinkStates { inner: Mutex::new(names.into_iter().map(|n| (n, None, 0)).collect()) }
    }

    /// Records the last check: per port (config order) its state and changes so far.
    pub fn store(&self, states: &[Option<bool>], changes: &[u64]) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for ((row, st), ch) in g.iter_mut().zip(states).zip(changes) {
            row.1 = *st;
            row.2 = *ch;
        }
    }

    /// Port `i`'s link changes so far (0 for an unknown port).
    pub fn changes(&self, i: usize) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).get(i).map_or(0, |r| r.2)
    }

    /// Names of the ports whose link was down at the last check.
    pub fn down(&self) -> Vec<String> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|r| r.1 == Some(false)).map(|r| r.0.clone()).collect()
    }
}

/// Fleet state shared by the `fleet` thread, the control socket and the metrics endpoint.
#[derive(Default)]
pub struct FleetState {
    inner: Mutex<FleetInner>,
}

#[derive(Default)]
struct FleetInner {
    /// VIPs drained by the operator.
    drained: BTreeSet<IpAddr>,
    /// Last evaluation, VIP order.
    vips: Vec<VipRow>,
    /// Whether an announcer (the TUN interface) is running.
    announcing: bool,
    /// Generation of the snapshot `vips` was evaluated against; `None` until the `fleet`
    /// thread's first evaluation (and always without that thread: tests on a bare daemon).
    generation: Option<u64>,
    /// Per worker: last poll counter seen and when it last advanced.
    progress: Vec<(u64, Instant)>,
}

impl FleetState {
    /// The last readiness evaluation, one row per configured VIP.
    pub fn vips(&self) -> Vec<VipRow> {
        self.lock().vips.clone()
    }

    /// Whether an announcer runs (`[announce]` configured and its interface up).
    pub fn announcing(&self) -> bool {
        self.lock().announcing
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FleetInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the workers' poll counters at `now`; returns, per worker, how long its
    /// counter has stood still (zero when it just advanced).
    pub fn observe_polls(&self, polls: &[u64], now: Instant) -> Vec<Duration> {
        let mut g = self.lock();
        if g.progress.len() != polls.len() {
            g.progress = polls.iter().map(|p| (*p, now)).collect();
        }
        g.progress
            .iter_mut()
            .zip(polls)
            .map(|(e, p)| {
                if *p != e.0 {
                    *e = (*p, now);
                }
                now.saturating_duration_since(e.1)
            })
            .collect()
    }

    /// Sets or clears the operator drain of `vip`.
    pub fn set_drained(&self, vip: IpAddr, drained: bool) {
        let mut g = self.lock();
        if drained {
            g.drained.insert(vip);
        } else {
            g.drained.remove(&vip);
        }
    }

    pub(crate) fn drained(&self) -> BTreeSet<IpAddr> {
        self.lock().drained.clone()
    }

    pub(crate) fn store(&self, vips: Vec<VipRow>, announcing: bool, generation: u64) {
        let mut g = self.lock();
        g.vips = vips;
        g.announcing = announcing;
        g.generation = Some(generation);
    }

    /// The readiness rows once they reflect snapshot `generation` or a later one (the
    /// `fleet` thread evaluates every 100 ms), waiting at most `wait`: so `vip show` right
    /// after an edit shows the edit's VIPs (fresh-user QA: a VIP added was missing, one
    /// removed still listed, for up to a period). After `wait`, or without a `fleet`
    /// thread, the last rows as they are.
    pub fn vips_at(&self, generation: u64, wait: Duration) -> Vec<VipRow> {
        let deadline = Instant::now() + wait;
        loop {
            {
                let g = self.lock();
                if g.generation.is_none_or(|have| have >= generation) || Instant::now() >= deadline {
                    return g.vips.clone();
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The control loop's heartbeat: bumped once per tick of [`crate::control_loop::run`], read
/// by the fleet thread, which feeds the systemd watchdog only while it moves.
#[derive(Debug, Default)]
pub struct Heartbeat(AtomicU64);

impl Heartbeat {
    /// One more iteration of the control loop.
    pub fn beat(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Iterations so far.
    pub fn beats(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
