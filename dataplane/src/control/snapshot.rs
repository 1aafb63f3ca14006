//! Snapshots: the read-only routing state the workers use, compiled by the control thread
//! from config + health + load and published by [`crate::control::publish`].
//!
//! For every service and every client zone class (each known zone, plus "not compatible"),
//! a Maglev table over the routing pipeline's final set; classes with identical final sets
//! share one table (`Arc`). Backends are addressed by *slot*: a stable index assigned by the
//! control thread for the life of a backend, with an incarnation number so a connection
//! entry of a removed backend never matches a new backend that reuses the slot.

use crate::fastpath::conntrack::{ServiceTimeouts, Timeouts};
use hashbrown::HashMap;
use spillway_shared::config::{ForwardingMode, SessionAffinity, TrackingMode};
use spillway_shared::maglev::MaglevTable;
use spillway_shared::net::PrefixTable;
use std::sync::Arc;

/// A backend as the workers see it.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendSlot {
    /// Whether the slot holds a backend.
    pub present: bool,
    /// Incarnation of this slot (bumped when a slot is reused).
    pub incarnation: u16,
    /// Service index.
    pub service: u16,
    /// Backend name (control plane only).
    pub name: String,
    /// Destination MAC (L2 DSR) or next-hop MAC (IPIP/GUE).
    pub mac: [u8; 6],
    /// IPv4 backend address (host order), IPIP/GUE outer destination; 0 for an IPv6
    /// endpoint.
    pub addr: u32,
    /// IPv6 backend address (host-order `u128`), IPIP/GUE outer destination over an IPv6
    /// underlay; 0 for an IPv4 endpoint.
    pub addr6: u128,
    /// Health as last published.
    pub healthy: bool,
    /// Existing connections must move now (failover with drain disabled, or the drain
    /// deadline passed, or the backend was disabled for connection removal).
    pub evict_connections: bool,
    /// The backend is in the pool that is no longer active: existing connections persist
    /// until `drain_deadline_ms` (worker clock), then move.
    pub draining_until_ms: Option<u32>,
}

/// What the worker's vector fast path reads of a backend slot, sealed from the
/// [`BackendSlot`] by [`Snapshot::seal`] (`fastpath/worker/vector.rs`): one 16-byte load
/// instead of six fields. `service` is the slot's service index when the general path
/// would keep an established connection on it without asking anything else of the service
/// (present, healthy, not draining, not evicting connections) and its MAC is resolved;
/// otherwise [`FastSlot::NOT_FAST`], which matches no service index (they are below
/// `u16::MAX`), so the fast path declines and the general path decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastSlot {
    /// The destination MAC in the low 48 bits (octet 0 lowest: the frame's byte order as
    /// a little-endian word), the slot's incarnation in the high 16.
    pub word: u64,
    /// The service index, or [`FastSlot::NOT_FAST`].
    pub service: u32,
}

impl FastSlot {
    /// [`FastSlot::service`] of a slot the fast path must not take.
    pub const NOT_FAST: u32 = u32::MAX;

    /// The sealed form of `b` (type docs).
    pub fn of(b: &BackendSlot) -> FastSlot {
        let fast = b.present && b.healthy && !b.evict_connections && b.draining_until_ms.is_none() && b.mac != [0; 6];
        let m = b.mac;
        let word = u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]) | u64::from(b.incarnation) << 48;
        FastSlot { word, service: if fast { u32::from(b.service) } else { FastSlot::NOT_FAST } }
    }
}

/// One Maglev table and the backend slots its entries stand for.
#[derive(Debug, PartialEq)]
pub struct ClassTable {
    /// The table: slot → entry index.
    pub maglev: Arc<MaglevTable>,
    /// Entry index → backend slot.
    pub backends: Vec<u16>,
    /// Whether every backend of this table is unhealthy (last resort): then even
    /// NEVER_PERSIST keeps existing connections.
    pub all_unhealthy: bool,
}

impl ClassTable {
    /// Backend slot for a flow hash.
    #[inline]
    pub fn pick(&self, hash: u64) -> Option<u16> {
        let i = self.maglev.lookup(hash)?;
        self.backends.get(usize::from(i)).copied()
    }
}

/// A service as the workers see it.
#[derive(Debug)]
pub struct ServiceSnap {
    /// Name (for the control plane).
    pub name: String,
    /// The service's number: stable across edits and recompilations while the service
    /// (VIP, port, protocol) exists (`SlotMap::service_number`), unlike its index in
    /// [`Snapshot::services`]. Connection-table entries are keyed by it.
    pub id: u16,
    /// IPv4 VIP (host order); 0 for an IPv6 service.
    pub vip: u32,
    /// IPv6 VIP (host-order `u128`); 0 for an IPv4 service.
    pub vip6: u128,
    /// Whether the VIP is IPv6 (a service has one family).
    pub ipv6: bool,
    /// Port.
    pub port: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Session affinity.
    pub affinity: SessionAffinity,
    /// Tracking mode.
    pub tracking: TrackingMode,
    /// Whether a tracked connection stays on its backend when the backend turns unhealthy
    /// (spec/backend-selection.md, resolved for this service's protocol and affinity).
    pub persist_on_unhealthy: bool,
    /// Forwarding mode.
    pub mode: ForwardingMode,
    /// Path MTU towards backends (IPIP/GUE).
    pub encap_mtu: u16,
    /// Largest encapsulation overhead over the service's endpoints, bytes (IPIP 20 / 40,
    /// GUE 28 / 48 by the endpoint's family; 0 for L2 DSR): a packet longer than
    /// `encap_mtu` − this is answered "too big" before it is tracked or counted.
    pub encap_overhead: u16,
    /// Idle timeout for this service's established connections, ms.
    pub idle_timeout_ms: u32,
    /// Table per client class (index = class id); `None` = drop new connections.
    pub tables: Vec<Option<Arc<ClassTable>>>,
    /// The failover pool is active (tier selection chose healthy failover backends).
    pub failed_over: bool,
    /// QUIC-LB routing of short-header packets (`None`: the service has no QUIC-LB).
    pub quic_lb: Option<Box<crate::control::quic_lb::QuicLbTable>>,
}

/// The whole routing state at one generation.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Monotonic generation number.
    pub generation: u64,
    /// Services by index; a service the last publication did not recompile is shared
    /// with the previous snapshot ([`crate::control::incremental`]).
    pub services: Vec<Arc<ServiceSnap>>,
    /// Service number ([`ServiceSnap::id`]) → service index: for the control plane, fleet
    /// sync and the connection table's out-of-line paths (eviction ranking, which asks for
    /// up to eight entries' services per eviction: an array, not a hash map), never the
    /// per-packet lookup.
    pub by_number: ServiceNumbers,
    /// (VIP, port, proto) → service index.
    pub by_vip_port: HashMap<(u32, u16, u8), u16>,
    /// (VIP, proto) → (first service index, number of services): port-less packets
    /// (protocols without ports; fragments whose first fragment was not seen, which go to
    /// the only service of their VIP and protocol, or are dropped when there are several).
    pub by_vip_proto: HashMap<(u32, u8), (u16, u16)>,
    /// Addresses answered in ARP: VIPs and port addresses.
    pub arp_addrs: HashMap<u32, ()>,
    /// (IPv6 VIP, port, proto) → service index.
    pub by_vip6_port: HashMap<(u128, u16, u8), u16>,
    /// (IPv6 VIP, proto) → (first service index, number of services), as `by_vip_proto`.
    pub by_vip6_proto: HashMap<(u128, u8), (u16, u16)>,
    /// IPv6 addresses answered in Neighbor Discovery (RFC 4861 §7.2.3): IPv6 VIPs and port
    /// addresses.
    pub nd_addrs: HashMap<u128, ()>,
    /// IPv6 encapsulation source address per port index (0 = none): `ports[].address` when
    /// IPv6, else `ports[].address6`.
    pub port_addrs6: Vec<u128>,
    /// Client prefix → class id. Unmatched sources use `incompatible_class`.
    pub classes: PrefixTable<u16>,
    /// Class id for clients that are not zonal-compatible.
    pub incompatible_class: u16,
    /// Class names, by id (control plane).
    pub class_names: Vec<String>,
    /// Backend slots.
    pub backends: Vec<BackendSlot>,
    /// The backend slots as the vector fast path reads them ([`FastSlot`]), index = slot;
    /// [`Snapshot::seal`] writes them from `backends`. Empty (not sealed): the fast path
    /// takes no packet, and the general path decides every one.
    pub fast_slots: Vec<FastSlot>,
    /// Encapsulation source address (host order) per port index (0 = none).
    pub port_addrs: Vec<u32>,
    /// Creation time (control plane, for `snapshot show`).
    pub created: Option<std::time::Instant>,
    /// Counts the snapshot's drop if it happens on a worker thread.
    pub drop_probe: DropProbe,
}

/// Snapshots dropped on a worker thread since start. Reclamation runs on the control side
/// ([`crate::control::publish`]), so this stays 0; tests and `snapshot show` check it.
pub static DROPPED_ON_WORKER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Snapshots dropped since start (any thread).
pub static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A field of [`Snapshot`] whose drop records where the snapshot was dropped.
#[derive(Debug, Default)]
pub struct DropProbe;

impl Drop for DropProbe {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        DROPPED.fetch_add(1, Relaxed);
        if crate::threads::on_worker_thread() {
            DROPPED_ON_WORKER.fetch_add(1, Relaxed);
        }
    }
}

impl Snapshot {
    /// Class id of a client address.
    #[inline]
    pub fn class_of(&self, src: u32) -> u16 {
        self.classes.lookup_v4(src).copied().unwrap_or(self.incompatible_class)
    }

    /// Class id of an IPv6 client address (host-order `u128`).
    #[inline]
    pub fn class_of6(&self, src: u128) -> u16 {
        self.classes.lookup_v6(src).copied().unwrap_or(self.incompatible_class)
    }

    /// The service numbered `number` ([`ServiceSnap::id`]) and its index, if it exists.
    #[inline]
    pub fn service_by_number(&self, number: u16) -> Option<(u16, &ServiceSnap)> {
        let i = self.by_number.get(number)?;
        self.services.get(usize::from(i)).map(|s| (i, &**s))
    }

    /// The timeouts of every service's connection entries ([`ServiceTimeouts`]), from the
    /// `[conntrack]` timeouts `base` and each service's idle timeout and protocol; a number
    /// no service has gets `base`.
    pub fn timeouts(&self, base: Timeouts) -> SnapTimeouts<'_> {
        SnapTimeouts { snap: self, base }
    }

    /// Seals the backend slots for the vector fast path ([`Snapshot::fast_slots`]). Call
    /// after the last change to `backends` and before a worker reads the snapshot:
    /// publication does ([`crate::control::publish::Shared::publish`]), and so do the
    /// compilations tests and tools hand to a worker directly. A stale seal would let the
    /// fast path decide what the general path would not; debug builds check every fast
    /// decision against the slot itself.
    pub fn seal(&mut self) {
        self.fast_slots.clear();
        self.fast_slots.extend(self.backends.iter().map(FastSlot::of));
    }

    /// Distinct tables (shared ones counted once).
    pub fn distinct_tables(&self) -> usize {
        let mut seen: Vec<*const ClassTable> = Vec::new();
        for s in &self.services {
            for t in s.tables.iter().flatten() {
                let p = Arc::as_ptr(t);
                if !seen.contains(&p) {
                    seen.push(p);
                }
            }
        }
        seen.len()
    }
}

/// Service number → service index ([`Snapshot::by_number`]): a dense array indexed by the
/// number, `u16::MAX` where no service has the number. A lookup is one bounds-checked
/// load. Its length is the highest number in use + 1: the slot map hands out the next
/// number after the last one (wrapping, `control/slots.rs`), so under service churn it
/// grows towards 65,536 entries (128 KiB per snapshot), as does a service compiled without
/// the slot map (tests), which takes a number from the top.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceNumbers(Vec<u16>);

impl ServiceNumbers {
    /// The index of the service numbered `number`, if one is.
    #[inline]
    pub fn get(&self, number: u16) -> Option<u16> {
        self.0.get(usize::from(number)).copied().filter(|&i| i != u16::MAX)
    }

    /// Records that the service numbered `number` is at index `index`. Index `u16::MAX` is
    /// the "none" marker: the slot map refuses 65,535 services or more
    /// (`SlotMap::sync`), so every index is below it; one equal to it is not recorded.
    pub fn insert(&mut self, number: u16, index: u16) {
        if index == u16::MAX {
            return;
        }
        let n = usize::from(number);
        if self.0.len() <= n {
            self.0.resize(n + 1, u16::MAX);
        }
        self.0[n] = index;
    }

    /// Forgets every number whose service is at `index`.
    pub fn remove_index(&mut self, index: u16) {
        self.0.iter_mut().filter(|i| **i == index).for_each(|i| *i = u16::MAX);
    }
}

/// [`Snapshot::timeouts`]: the connection-table timeouts of a snapshot's services by
/// service number, for the table's out-of-line paths (eviction ranking, the sync refresh
/// walk, `flows show`).
#[derive(Clone, Copy)]
pub struct SnapTimeouts<'s> {
    snap: &'s Snapshot,
    base: Timeouts,
}

impl ServiceTimeouts for SnapTimeouts<'_> {
    fn of(&self, service: u16) -> Timeouts {
        self.resolve(service).0
    }
    fn dead(&self, service: u16, backend: u16, incarnation: u16) -> bool {
        self.dead_in(self.resolve(service).1, service, backend, incarnation)
    }
    /// The timeouts and the service's index (`None`: no service has the number).
    fn resolve(&self, service: u16) -> (Timeouts, Option<u16>) {
        match self.snap.service_by_number(service) {
            Some((i, s)) => (self.base.for_service(s.proto, s.idle_timeout_ms), Some(i)),
            None => (self.base, None),
        }
    }
    /// [`Self::dead`] with the service's index from [`Self::resolve`]: the worker's
    /// `keeps_backend` slot test (the slot still holds this endpoint of this service).
    fn dead_in(&self, handle: Option<u16>, _service: u16, backend: u16, incarnation: u16) -> bool {
        let Some(i) = handle else { return true };
        self.snap.backends.get(usize::from(backend)).is_none_or(|b| !(b.present && b.incarnation == incarnation && b.service == i))
    }
}
