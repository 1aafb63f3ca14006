//! The `sync` thread: drains the workers' records, sends them to the peers in
//! authenticated batches over kernel UDP, receives the peers' messages, and hands their
//! entries to the workers that own the flows. Also the start-up dump (a starting host asks
//! every peer for its entries and is not ready to announce until they arrived or
//! `startup_sync_timeout_sec` passed). Control side only.

use super::{Placement, SyncIn, SyncOut, SyncQueues};
use crate::control::snapshot::Snapshot;
use crate::daemon::Daemon;
use spillway_shared::sync::{self as wire, Header, Kind, Record, Reject, SyncConfig, SyncKey, SyncPeerStatus, SyncState, SyncStatus};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A batch of records is sent when it is full or its oldest record waited this long.
const BATCH_DELAY: Duration = Duration::from_millis(2);
/// How often a starting host repeats its dump request to peers that have not answered.
const DUMP_RETRY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Counters {
    sent_messages: AtomicU64,
    sent_records: AtomicU64,
    sent_bytes: AtomicU64,
    send_errors: AtomicU64,
    received_messages: AtomicU64,
    received_records: AtomicU64,
    rejected: Mutex<HashMap<Reject, u64>>,
    unknown_service: AtomicU64,
    unknown_endpoint: AtomicU64,
    stale_slot: AtomicU64,
    inbound_full: AtomicU64,
    dumps_sent: AtomicU64,
    lag_last: AtomicU64,
    lag_max: AtomicU64,
}

#[derive(Clone, Debug, Default)]
struct Peer {
    addr: Option<SocketAddr>,
    last_heard: Option<Instant>,
    digest: Option<u64>,
    dump_received: bool,
}

/// The sync runtime: configuration, key, socket, queues and counters; shared by the `sync`
/// thread, `status` and `/metrics`.
pub struct SyncRuntime {
    /// The queues shared with the workers.
    pub queues: Arc<SyncQueues>,
    cfg: SyncConfig,
    key: SyncKey,
    socket: UdpSocket,
    peers_addr: Vec<SocketAddr>,
    /// This host's sender id (random per start).
    pub sender: u64,
    seq: AtomicU64,
    placement: Placement,
    counters: Counters,
    peers: Mutex<Vec<Peer>>,
    digest: AtomicU64,
    startup_done: AtomicBool,
    startup_note: Mutex<String>,
    started: Instant,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Reads the fleet key from `path`, refusing a file that others can read or write (mode
/// must be 0600 or 0400, as for ssh keys) or a key shorter than 16 bytes.
pub fn read_key(path: &str) -> Result<SyncKey, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("sync.key_file = {path}: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!("sync.key_file = {path}: mode {mode:04o}: must be 0600 or 0400 (the key lets anyone who reads it steer this fleet's connections; chmod 600 {path})"));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("sync.key_file = {path}: {e}"))?;
    SyncKey::from_file_contents(&bytes).map_err(|e| format!("sync.key_file = {path}: {e}"))
}

impl SyncRuntime {
    /// Reads the key, binds the UDP socket and makes the queues for `workers` workers.
    /// Errors name the field and the cause.
    pub fn start(cfg: &SyncConfig, workers: usize, placement: Placement, digest: u64) -> Result<SyncRuntime, String> {
        let key = read_key(&cfg.key_file)?;
        let listen = cfg.listen_addr().map_err(|e| e.to_string())?;
        let peers_addr = cfg.peer_addrs().map_err(|e| e.to_string())?;
        let socket = UdpSocket::bind(listen).map_err(|e| format!("sync.listen = {listen}: cannot bind: {e}"))?;
        socket.set_read_timeout(Some(Duration::from_millis(1))).map_err(|e| format!("sync socket: {e}"))?;
        let sender = getrandom::u64().map_err(|e| format!("sync: no random sender id: {e}"))?;
        // Sequence numbers start at the wall clock in µs: a restarted host (new sender id
        // anyway) never reuses one, and nothing depends on the clock beyond that.
        let seq = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_micros() as u64);
        let n_peers = peers_addr.len();
        let rt = SyncRuntime {
            queues: Arc::new(SyncQueues::new(workers, cfg.refresh_interval_sec.saturating_mul(1000))),
            cfg: cfg.clone(),
            key,
            socket,
            peers: Mutex::new(peers_addr.iter().map(|a| Peer { addr: Some(*a), ..Peer::default() }).collect()),
            peers_addr,
            sender,
            seq: AtomicU64::new(seq),
            placement,
            counters: Counters::default(),
            digest: AtomicU64::new(digest),
            startup_done: AtomicBool::new(false),
            startup_note: Mutex::new(String::new()),
            started: Instant::now(),
        };
        if cfg.startup_sync_timeout_sec == 0 || n_peers == 0 {
            rt.finish_startup(if n_peers == 0 { "done (no peers)" } else { "done (startup_sync_timeout_sec = 0: not asked)" });
        } else {
            *rt.startup_note.lock().unwrap_or_else(|e| e.into_inner()) = format!("waiting for {n_peers} peer dumps");
        }
        tracing::info!(listen = %listen, peers = n_peers, sender = format!("{sender:016x}"), "flow-state sync listening");
        Ok(rt)
    }

    /// Whether the start-up sync is over (the announcement may start).
    pub fn startup_done(&self) -> bool {
        self.startup_done.load(Relaxed)
    }

    fn finish_startup(&self, note: &str) {
        *self.startup_note.lock().unwrap_or_else(|e| e.into_inner()) = note.to_string();
        if !self.startup_done.swap(true, Relaxed) {
            tracing::info!(startup = note, "flow-state sync: start-up dump over");
        }
    }

    fn reject(&self, r: Reject) {
        *self.counters.rejected.lock().unwrap_or_else(|e| e.into_inner()).entry(r).or_default() += 1;
    }

    fn header(&self, kind: Kind) -> Header {
        Header { kind, sender: self.sender, seq: self.seq.fetch_add(1, Relaxed), sent_ms: unix_ms(), digest: self.digest.load(Relaxed) }
    }

    fn send_to(&self, kind: Kind, records: &[Record], to: &[SocketAddr]) {
        let msg = wire::encode(&self.header(kind), records, &self.key);
        for a in to {
            match self.socket.send_to(&msg, a) {
                Ok(n) => {
                    self.counters.sent_messages.fetch_add(1, Relaxed);
                    self.counters.sent_records.fetch_add(records.len() as u64, Relaxed);
                    self.counters.sent_bytes.fetch_add(n as u64, Relaxed);
                }
                Err(_) => {
                    self.counters.send_errors.fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// Everything `status` shows.
    pub fn status(&self) -> SyncStatus {
        let q = &self.queues;
        let c = &self.counters;
        let own = self.digest.load(Relaxed);
        let mut rejected: Vec<(String, u64)> =
            c.rejected.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(r, n)| (<&str>::from(*r).to_string(), *n)).collect();
        rejected.sort();
        SyncStatus {
            enabled: true,
            listen: self.cfg.listen.clone(),
            sender: format!("{:016x}", self.sender),
            digest: format!("{own:016x}"),
            startup: self.startup_note.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            startup_done: self.startup_done(),
            sent_messages: c.sent_messages.load(Relaxed),
            sent_records: c.sent_records.load(Relaxed),
            sent_bytes: c.sent_bytes.load(Relaxed),
            send_errors: c.send_errors.load(Relaxed),
            received_messages: c.received_messages.load(Relaxed),
            received_records: c.received_records.load(Relaxed),
            rejected,
            unknown_service: c.unknown_service.load(Relaxed),
            unknown_endpoint: c.unknown_endpoint.load(Relaxed),
            stale_slot: c.stale_slot.load(Relaxed),
            outbound_queue_full: q.sum(|w| &w.queue_full),
            inbound_queue_full: c.inbound_full.load(Relaxed),
            installed: q.sum(|w| &w.installed),
            updated: q.sum(|w| &w.updated),
            conflicts: q.sum(|w| &w.conflicts),
            no_room: q.sum(|w| &w.no_room),
            removed: q.sum(|w| &w.removed),
            adopted: q.sum(|w| &w.adopted),
            dumps_sent: c.dumps_sent.load(Relaxed),
            lag_ms_last: c.lag_last.load(Relaxed),
            lag_ms_max: c.lag_max.load(Relaxed),
            peers: self
                .peers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|p| SyncPeerStatus {
                    address: p.addr.map(|a| a.to_string()).unwrap_or_default(),
                    last_heard_sec: p.last_heard.map(|t| t.elapsed().as_secs_f64()),
                    digest: p.digest.map(|d| format!("{d:016x}")),
                    drift: p.digest.is_some_and(|d| d != own),
                    dump_received: p.dump_received,
                })
                .collect(),
        }
    }
}

/// Endpoint lookup of one snapshot: (service index, address) → (slot, incarnation).
struct Index {
    generation: u64,
    endpoints: HashMap<(u16, IpAddr), (u16, u16)>,
}

impl Index {
    fn build(s: &Snapshot) -> Index {
        let mut endpoints = HashMap::new();
        for (slot, b) in s.backends.iter().enumerate() {
            if !b.present {
                continue;
            }
            let ipv6 = s.services.get(usize::from(b.service)).is_some_and(|x| x.ipv6);
            let a = if ipv6 { IpAddr::V6(b.addr6.into()) } else { IpAddr::V4(b.addr.into()) };
            endpoints.insert((b.service, a), (slot as u16, b.incarnation));
        }
        Index { generation: s.generation, endpoints }
    }
}

fn service_of(s: &Snapshot, r: &Record) -> Option<u16> {
    if r.ipv6 {
        s.by_vip6_port.get(&(r.dst, r.dport, r.proto)).copied()
    } else {
        s.by_vip_port.get(&(r.dst as u32, r.dport, r.proto)).copied()
    }
}

/// One of this host's records, resolved for the wire (`None`: its endpoint slot no longer
/// holds that endpoint).
fn to_record(s: &Snapshot, o: &SyncOut) -> Option<Record> {
    let b = s.backends.get(usize::from(o.backend)).filter(|b| b.present && b.incarnation == o.incarnation)?;
    let endpoint = if o.ipv6 { IpAddr::V6(b.addr6.into()) } else { IpAddr::V4(b.addr.into()) };
    Some(Record {
        op: o.op,
        ipv6: o.ipv6,
        src: o.src,
        dst: o.dst,
        sport: o.sport,
        dport: o.dport,
        proto: o.proto,
        session: o.sport == 0,
        state: if o.closing { SyncState::Closing } else { SyncState::Established },
        remaining_ms: o.remaining_ms,
        endpoint,
    })
}

/// Runs the `sync` thread until `stop`.
pub fn run(rt: &SyncRuntime, daemon: &Daemon, stop: &AtomicBool) {
    let mut batch: Vec<Record> = Vec::with_capacity(wire::MAX_RECORDS);
    let mut batch_since: Option<Instant> = None;
    let mut index: Option<Index> = None;
    let mut receiver = wire::Receiver::new(rt.sender, u64::from(rt.cfg.max_message_age_sec) * 1000).not_before(unix_ms());
    let mut buf = vec![0u8; 2048];
    let mut pending_dumps: Vec<(u64, SocketAddr)> = Vec::new();
    let mut last_dump_request: Option<Instant> = None;
    let mut config_generation = 0;
    let startup_deadline = rt.started + Duration::from_secs(u64::from(rt.cfg.startup_sync_timeout_sec));
    while !stop.load(Relaxed) {
        // Our digest follows live edits.
        let g = daemon.control.lock().map(|st| st.config_generation).unwrap_or(0);
        if g != config_generation {
            config_generation = g;
            let cfg = daemon.control.lock().map(|st| st.cfg.clone()).ok();
            if let Some(cfg) = cfg {
                rt.digest.store(wire::routing_digest(&cfg), Relaxed);
            }
        }
        // 1. this host's records → batches → peers.
        daemon.shared.with_snapshot(|s| {
            for q in &rt.queues.out {
                while let Some(o) = q.pop() {
                    match to_record(s, &o) {
                        Some(r) => batch.push(r),
                        None => {
                            rt.counters.stale_slot.fetch_add(1, Relaxed);
                            continue;
                        }
                    }
                    batch_since.get_or_insert_with(Instant::now);
                    if batch.len() == wire::MAX_RECORDS {
                        rt.send_to(Kind::Records, &batch, &rt.peers_addr);
                        batch.clear();
                        batch_since = None;
                    }
                }
            }
        });
        if batch_since.is_some_and(|t| t.elapsed() >= BATCH_DELAY) {
            rt.send_to(Kind::Records, &batch, &rt.peers_addr);
            batch.clear();
            batch_since = None;
        }
        // 2. dumps asked of us: done once every worker finished its pass and its records
        // were sent (the queues are drained above, so what remains is in `batch`).
        if !pending_dumps.is_empty() {
            let done: Vec<(u64, SocketAddr)> = pending_dumps.iter().filter(|(e, _)| rt.queues.dump_finished(*e)).copied().collect();
            if !done.is_empty() && rt.queues.out.iter().all(|q| q.is_empty()) {
                if !batch.is_empty() {
                    rt.send_to(Kind::Records, &batch, &rt.peers_addr);
                    batch.clear();
                    batch_since = None;
                }
                for (_, to) in &done {
                    rt.send_to(Kind::DumpEnd, &[], &[*to]);
                    rt.counters.dumps_sent.fetch_add(1, Relaxed);
                    tracing::info!(peer = %to, "flow-state dump sent");
                }
                pending_dumps.retain(|p| !done.contains(p));
            }
        }
        // 3. start-up: ask the peers for their entries until each answered or time is up.
        if !rt.startup_done() {
            let missing: Vec<SocketAddr> = rt.peers.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|p| !p.dump_received).filter_map(|p| p.addr).collect();
            if missing.is_empty() {
                rt.finish_startup("done (every peer's dump received)");
            } else if Instant::now() >= startup_deadline {
                let list: Vec<String> = missing.iter().map(|a| a.to_string()).collect();
                rt.finish_startup(&format!("timed out after {} s waiting for {}", rt.cfg.startup_sync_timeout_sec, list.join(", ")));
            } else if last_dump_request.is_none_or(|t| t.elapsed() >= DUMP_RETRY) {
                last_dump_request = Some(Instant::now());
                rt.send_to(Kind::DumpRequest, &[], &missing);
            }
        }
        // 4. receive (the 1 ms read timeout paces the loop).
        for _ in 0..256 {
            let (n, from) = match rt.socket.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => break,
            };
            receive(rt, daemon, &buf[..n], from, &mut receiver, &mut index, &mut pending_dumps);
        }
    }
}

fn receive(rt: &SyncRuntime, daemon: &Daemon, msg: &[u8], from: SocketAddr, receiver: &mut wire::Receiver, index: &mut Option<Index>, dumps: &mut Vec<(u64, SocketAddr)>) {
    let h = match wire::verify(msg, &rt.key) {
        Ok(h) => h,
        Err(r) => return rt.reject(r),
    };
    // Own, stale and replayed before the source check, so a captured message replayed from
    // anywhere is counted as what it is.
    let now = unix_ms();
    if let Err(r) = receiver.accept(&h, now) {
        return rt.reject(r);
    }
    if !rt.peers_addr.contains(&from) {
        return rt.reject(Reject::UnknownPeer);
    }
    let records = match wire::records(msg) {
        Ok(r) => r,
        Err(r) => return rt.reject(r),
    };
    rt.counters.received_messages.fetch_add(1, Relaxed);
    {
        let mut peers = rt.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = peers.iter_mut().find(|p| p.addr == Some(from)) {
            p.last_heard = Some(Instant::now());
            p.digest = Some(h.digest);
            if h.kind == Kind::DumpEnd {
                p.dump_received = true;
                tracing::info!(peer = %from, "flow-state dump received");
            }
        }
    }
    match h.kind {
        Kind::DumpRequest => {
            let epoch = rt.queues.dump_epoch.fetch_add(1, Relaxed) + 1;
            dumps.push((epoch, from));
            tracing::info!(peer = %from, epoch, "flow-state dump requested");
        }
        Kind::DumpEnd => {}
        Kind::Records => {
            let lag = now.saturating_sub(h.sent_ms);
            rt.counters.lag_last.store(lag, Relaxed);
            rt.counters.lag_max.fetch_max(lag, Relaxed);
            rt.counters.received_records.fetch_add(records.len() as u64, Relaxed);
            daemon.shared.with_snapshot(|s| {
                if index.as_ref().is_none_or(|i| i.generation != s.generation) {
                    *index = Some(Index::build(s));
                }
                let Some(ix) = index.as_ref() else { return };
                for r in &records {
                    install(rt, s, ix, r);
                }
            });
        }
    }
}

fn install(rt: &SyncRuntime, s: &Snapshot, ix: &Index, r: &Record) {
    let Some(service) = service_of(s, r) else {
        rt.counters.unknown_service.fetch_add(1, Relaxed);
        return;
    };
    let Some(&(backend, incarnation)) = ix.endpoints.get(&(service, r.endpoint)) else {
        rt.counters.unknown_endpoint.fetch_add(1, Relaxed);
        return;
    };
    let rec = SyncIn {
        op: r.op,
        ipv6: r.ipv6,
        src: r.src,
        dst: r.dst,
        sport: r.sport,
        dport: r.dport,
        proto: r.proto,
        closing: r.state == SyncState::Closing,
        backend,
        incarnation,
        service,
        remaining_ms: r.remaining_ms,
    };
    for w in rt.placement.workers(r.ipv6, r.src, r.dst, r.sport, r.dport) {
        if let Some(q) = rt.queues.inbound.get(w) {
            if q.push(rec).is_err() {
                rt.counters.inbound_full.fetch_add(1, Relaxed);
            }
        }
    }
}
