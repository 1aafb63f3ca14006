//! The `sync` thread: drains the workers' records, sends them to the peers in
//! authenticated batches over kernel UDP, receives the peers' messages, and hands their
//! entries to the workers that own the flows. Control side only.
//!
//! The start-up dump: a starting host asks every peer for its entries and is not ready to
//! announce until they arrived or `startup_sync_timeout_sec` passed. A host asked for a
//! dump runs one pass at a time: it bumps the dump epoch, every worker walks its whole
//! table once and ends with a marker, and when the markers of every worker have been
//! popped (so every record of the pass is sent) each requester of that pass gets a DumpEnd
//! naming it (its sender id: a requester that restarted meanwhile does not take the end of
//! its previous run's pass as its own).
//! Requests that arrive meanwhile wait for the next pass; a repeated request of a waiting
//! or served requester changes nothing. Records only due to a dump (idle entries, other
//! hosts' copies) go to its requesters alone, paced to [`DUMP_MESSAGES_PER_SEC`].

use super::dump::{Dumps, Requester, PASS_TIMEOUT};
use super::{DumpItem, Placement, SyncIn, SyncOut, SyncQueues};
use crate::control::snapshot::Snapshot;
use crate::daemon::Daemon;
use spillway_shared::config::sync::SyncConfig;
use spillway_shared::sync::{self as wire, Kind, Outgoing, Record, Reject, SyncKey, SyncPeerStatus, SyncStatus};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A batch of records is sent when it is full or its oldest record waited this long.
const BATCH_DELAY: Duration = Duration::from_millis(2);
/// How often a starting host repeats its dump request to peers that have not answered.
const DUMP_RETRY: Duration = Duration::from_secs(1);
/// A host sends every peer at least one message this often (an empty one when idle), so
/// its digest and liveness are known on an idle fleet (`last_heard_sec`, drift).
const KEEPALIVE: Duration = Duration::from_secs(1);
/// Dump messages sent per second at most (400,000 records/s: a 1 M-entry table in 2.5 s),
/// so a starting peer's receive buffer keeps up.
pub const DUMP_MESSAGES_PER_SEC: f64 = 20_000.0;
/// Receive buffer asked of the kernel for the sync socket, bytes (~3,000 messages).
pub const RECV_BUFFER: usize = 4 << 20;
/// A refusal reason is logged at most this often (every one is counted).
const REJECT_LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Counters {
    sent_messages: AtomicU64,
    sent_records: AtomicU64,
    sent_bytes: AtomicU64,
    send_errors: AtomicU64,
    received_messages: AtomicU64,
    received_records: AtomicU64,
    rejected: Mutex<HashMap<Reject, u64>>,
    /// When each refusal reason was last logged.
    rejected_logged: Mutex<HashMap<Reject, Instant>>,
    unknown_service: AtomicU64,
    unknown_endpoint: AtomicU64,
    bad_records: AtomicU64,
    lost_messages: AtomicU64,
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
    /// Messages of this peer's numbering that never arrived (gaps).
    lost: u64,
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
    /// This host's listen address (the source and recipient address its messages name).
    listen: SocketAddr,
    /// Sender id, address and the next sequence number per peer (each peer's messages are
    /// numbered on their own, so a gap at the receiver is a lost message).
    out: wire::Sender,
    placement: Placement,
    counters: Counters,
    peers: Mutex<Vec<Peer>>,
    digest: AtomicU64,
    startup_done: AtomicBool,
    startup_note: Mutex<String>,
    /// When a message last went to every peer (keepalives).
    last_sent: Mutex<Option<Instant>>,
    started: Instant,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Reads the fleet key from `path`, refusing a file that others can read or write (mode
/// must be 0600 or 0400, as for ssh keys) or a key shorter than 16 bytes.
pub fn read_key(path: &str) -> Result<SyncKey, String> {
    let bytes = crate::secret_file::read("sync.key_file", path, "the key lets anyone who reads it steer this fleet's connections")?;
    SyncKey::from_file_contents(&bytes).map_err(|e| format!("sync.key_file = {path}: {e}"))
}

/// Asks for a [`RECV_BUFFER`]-byte receive buffer: `SO_RCVBUFFORCE` (root, past
/// `net.core.rmem_max`), else `SO_RCVBUF` (capped by `net.core.rmem_max` without an
/// error). Warns when the kernel gave less than asked; returns what it gave (the kernel
/// reports twice the payload size, its bookkeeping included).
fn raise_recv_buffer(socket: &UdpSocket) -> usize {
    use std::os::fd::AsRawFd;
    let want = RECV_BUFFER as libc::c_int;
    // SAFETY: setsockopt reads an int of the given size from a live local.
    let forced = unsafe {
        libc::setsockopt(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, (&want as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t)
    } == 0;
    let sock = socket2::SockRef::from(socket);
    if !forced {
        let _ = sock.set_recv_buffer_size(RECV_BUFFER);
    }
    let got = sock.recv_buffer_size().unwrap_or(0);
    if got < RECV_BUFFER {
        tracing::warn!(asked = RECV_BUFFER, got, "sync socket: smaller receive buffer than asked (raise net.core.rmem_max): a peer's dump may lose messages (lost_messages)");
    }
    got
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
        let rcvbuf = raise_recv_buffer(&socket);
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
            out: wire::Sender::new(sender, listen, &peers_addr, seq),
            listen,
            peers_addr,
            sender,
            placement,
            counters: Counters::default(),
            digest: AtomicU64::new(digest),
            startup_done: AtomicBool::new(false),
            startup_note: Mutex::new(String::new()),
            last_sent: Mutex::new(None),
            started: Instant::now(),
        };
        if cfg.startup_sync_timeout_sec == 0 || n_peers == 0 {
            rt.finish_startup(if n_peers == 0 { "done (no peers)" } else { "done (startup_sync_timeout_sec = 0: not asked)" });
        } else {
            *rt.startup_note.lock().unwrap_or_else(|e| e.into_inner()) = format!("waiting for {n_peers} peer dumps");
        }
        tracing::info!(listen = %listen, peers = n_peers, sender = format!("{sender:016x}"), rcvbuf, "flow-state sync listening");
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

    /// Counts a refused message from `from`, and logs the reason at most once per
    /// [`REJECT_LOG_EVERY`] (a flood of forged datagrams must not flood the log).
    fn reject(&self, r: Reject, from: SocketAddr) {
        *self.counters.rejected.lock().unwrap_or_else(|e| e.into_inner()).entry(r).or_default() += 1;
        let mut logged = self.counters.rejected_logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged.get(&r).is_none_or(|t| t.elapsed() >= REJECT_LOG_EVERY) {
            logged.insert(r, Instant::now());
            let reason: &str = r.into();
            tracing::warn!(reason, peer = %from, "flow-state sync message refused (counted in rejected; logged at most every {} s per reason) {}", REJECT_LOG_EVERY.as_secs(), r.hint());
        }
    }

    fn send_to(&self, kind: Kind, records: &[Record], to: &[SocketAddr]) {
        if to.len() == self.peers_addr.len() {
            *self.last_sent.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
        for a in to {
            self.send_one(*a, kind, 0, records);
        }
    }

    /// DumpEnd to each requester of a pass, naming it ([`Outgoing::request`]).
    fn send_dump_end(&self, to: &[Requester]) {
        for (a, id) in to {
            self.send_one(*a, Kind::DumpEnd, *id, &[]);
        }
    }

    fn send_one(&self, to: SocketAddr, kind: Kind, request: u64, records: &[Record]) {
        let m = Outgoing { kind, request, sent_ms: unix_ms(), digest: self.digest.load(Relaxed) };
        let Some(msg) = self.out.message(to, m, records, &self.key) else { return };
        match self.socket.send_to(&msg, to) {
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
            bad_records: c.bad_records.load(Relaxed),
            lost_messages: c.lost_messages.load(Relaxed),
            older: q.sum(|w| &w.older),
            stale_slot: q.sum(|w| &w.stale_slot),
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
                    lost_messages: p.lost,
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
            // The endpoint's own family (an IPv4 service may have IPv6 endpoints: IPIP/GUE).
            let a = if b.addr6 != 0 { IpAddr::V6(b.addr6.into()) } else { IpAddr::V4(b.addr.into()) };
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

/// The records popped from the workers, batched: for every peer, and for the dump's
/// requesters only (paced).
struct Batches {
    all: Vec<Record>,
    all_since: Option<Instant>,
    dump: Vec<Record>,
    dump_tokens: f64,
    last_refill: Instant,
    /// Dump queue to pop first next time (round robin over the workers).
    next_worker: usize,
}

impl Batches {
    fn flush_all(&mut self, rt: &SyncRuntime) {
        if !self.all.is_empty() {
            rt.send_to(Kind::Records, &self.all, &rt.peers_addr);
            self.all.clear();
        }
        self.all_since = None;
    }

    fn flush_dump(&mut self, rt: &SyncRuntime, to: &[SocketAddr]) {
        if !self.dump.is_empty() {
            rt.send_to(Kind::Records, &self.dump, to);
            self.dump.clear();
            self.dump_tokens -= 1.0;
        }
    }
}

/// `o`'s record with the time it waited since the worker made it taken off its lifetime
/// (`now_ms` on the worker clock); a closing record with nothing left is a removal, so the
/// peers' copy does not outlive the connection.
fn aged(o: &SyncOut, now_ms: u32) -> Record {
    let remaining_ms = o.rec.remaining_ms.saturating_sub(now_ms.wrapping_sub(o.at_ms).min(o.rec.remaining_ms));
    let op = if remaining_ms == 0 && o.rec.state == wire::SyncState::Closing { wire::Op::Remove } else { o.rec.op };
    Record { remaining_ms, op, ..o.rec }
}

/// Runs the `sync` thread until `stop`.
pub fn run(rt: &SyncRuntime, daemon: &Daemon, stop: &AtomicBool) {
    let mut b = Batches { all: Vec::with_capacity(wire::MAX_RECORDS), all_since: None, dump: Vec::with_capacity(wire::MAX_RECORDS), dump_tokens: 64.0, last_refill: Instant::now(), next_worker: 0 };
    let mut index: Option<Index> = None;
    let mut receiver = wire::Receiver::new(rt.sender, rt.listen, &rt.peers_addr, u64::from(rt.cfg.max_message_age_sec) * 1000).not_before(unix_ms());
    let mut buf = vec![0u8; 2048];
    let mut dumps = Dumps::default();
    let mut last_dump_request: Option<Instant> = None;
    let mut config_generation = 0;
    let startup_deadline = rt.started + Duration::from_secs(u64::from(rt.cfg.startup_sync_timeout_sec));
    while !stop.load(Relaxed) {
        // Our digest follows live edits (not waiting on the control mutex: a republication
        // holding it must not stall reception).
        let changed = daemon.control.try_lock().ok().filter(|st| st.config_generation != config_generation).map(|st| (st.config_generation, st.cfg.clone()));
        if let Some((g, cfg)) = changed {
            config_generation = g;
            rt.digest.store(wire::routing_digest(&cfg), Relaxed);
        }
        // 1. this host's records → batches → every peer; the dump's, paced, → requesters.
        let now = Instant::now();
        b.dump_tokens = (b.dump_tokens + now.duration_since(b.last_refill).as_secs_f64() * DUMP_MESSAGES_PER_SEC).min(64.0);
        b.last_refill = now;
        let worker_now = daemon.now_ms();
        pop_records(rt, &mut b, worker_now);
        pop_dump(rt, &mut b, &mut dumps, worker_now);
        if b.all_since.is_some_and(|t| t.elapsed() >= BATCH_DELAY) {
            b.flush_all(rt);
        }
        // 2. a pass whose every worker marker was popped is complete: its records are all
        // in a batch or sent, so flush and tell its requesters.
        if dumps.current.as_ref().is_some_and(|p| p.ended.iter().all(|e| *e)) {
            let to = dumps.to();
            b.flush_all(rt);
            b.flush_dump(rt, &to);
            let requesters = dumps.current.as_ref().map(|p| p.to.clone()).unwrap_or_default();
            rt.send_dump_end(&requesters);
            rt.counters.dumps_sent.fetch_add(to.len() as u64, Relaxed);
            if let Some(p) = dumps.current.take() {
                tracing::info!(epoch = p.epoch, peers = ?to, after_ms = p.started.elapsed().as_millis() as u64, "flow-state dump sent");
                dumps.served.extend(p.to.into_iter().map(|r| (r, Instant::now())));
            }
        } else if dumps.current.as_ref().is_some_and(|p| p.started.elapsed() > PASS_TIMEOUT) {
            if let Some(p) = dumps.current.take() {
                tracing::warn!(epoch = p.epoch, peers = ?dumps.to(), "flow-state dump pass given up after {} s (a worker did not finish it)", PASS_TIMEOUT.as_secs());
            }
            b.dump.clear();
        }
        dumps.start(&rt.queues);
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
                let list: Vec<String> = missing.iter().map(|a| a.to_string()).collect();
                *rt.startup_note.lock().unwrap_or_else(|e| e.into_inner()) = format!("waiting for the dumps of {}", list.join(", "));
            }
        }
        // A peer that hears nothing from us for KEEPALIVE learns our digest and that we
        // live: an empty record message.
        if rt.last_sent.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|t| t.elapsed() >= KEEPALIVE) {
            rt.send_to(Kind::Records, &[], &rt.peers_addr);
        }
        // 4. receive (the 1 ms read timeout paces the loop).
        for _ in 0..256 {
            let (n, from) = match rt.socket.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => break,
            };
            receive(rt, daemon, &buf[..n], from, &mut receiver, &mut index, &mut dumps);
        }
    }
}

/// Most records taken from one worker's queue per loop iteration (each ~1 ms), so one
/// busy worker cannot starve the others' queues.
const POP_PER_WORKER: usize = 4_096;

/// Pops the records due to every peer, round robin over the workers, into their batch.
fn pop_records(rt: &SyncRuntime, b: &mut Batches, worker_now: u32) {
    for q in &rt.queues.out {
        for _ in 0..POP_PER_WORKER {
            let Some(o) = q.pop() else { break };
            b.all.push(aged(&o, worker_now));
            b.all_since.get_or_insert_with(Instant::now);
            if b.all.len() == wire::MAX_RECORDS {
                b.flush_all(rt);
            }
        }
    }
}

/// Pops dump items, round robin over the workers, while the dump's rate allows a message:
/// entries go to the dump batch (sent to the requesters), end markers mark their worker's
/// pass done. What is left waits in the (bounded) dump queues, which pauses the passes.
fn pop_dump(rt: &SyncRuntime, b: &mut Batches, dumps: &mut Dumps, worker_now: u32) {
    let n = rt.queues.dump.len();
    let mut idle = 0;
    while idle < n {
        if b.dump.len() == wire::MAX_RECORDS {
            if b.dump_tokens < 1.0 {
                return;
            }
            let to = dumps.to();
            b.flush_dump(rt, &to);
        }
        let w = b.next_worker % n.max(1);
        b.next_worker = b.next_worker.wrapping_add(1);
        match rt.queues.dump.get(w).and_then(|q| q.pop()) {
            None => idle += 1,
            Some(item) => {
                idle = 0;
                match item {
                    DumpItem::Entry(o) => {
                        if dumps.current.is_some() {
                            b.dump.push(aged(&o, worker_now));
                        }
                    }
                    DumpItem::End { epoch } => {
                        if let Some(e) = dumps.current.as_mut().filter(|p| p.epoch == epoch).and_then(|p| p.ended.get_mut(w)) {
                            *e = true;
                        }
                    }
                }
            }
        }
    }
}

fn receive(rt: &SyncRuntime, daemon: &Daemon, msg: &[u8], from: SocketAddr, receiver: &mut wire::Receiver, index: &mut Option<Index>, dumps: &mut Dumps) {
    let h = match wire::verify(msg, &rt.key) {
        Ok(h) => h,
        Err(r) => return rt.reject(r, from),
    };
    // Every check (source, recipient, age, request) before the replay window: a message
    // refused for any reason moves no window, so a copy relayed or replayed from anywhere
    // silences no peer.
    let now = unix_ms();
    let gap = match receiver.accept(&h, from, now) {
        Ok(g) => g,
        Err(r) => return rt.reject(r, from),
    };
    let (records, bad) = wire::records(msg);
    rt.counters.received_messages.fetch_add(1, Relaxed);
    rt.counters.bad_records.fetch_add(bad as u64, Relaxed);
    rt.counters.lost_messages.fetch_add(gap, Relaxed);
    {
        let mut peers = rt.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = peers.iter_mut().find(|p| p.addr == Some(from)) {
            p.last_heard = Some(Instant::now());
            p.digest = Some(h.digest);
            p.lost += gap;
            if h.kind == Kind::DumpEnd && !p.dump_received {
                p.dump_received = true;
                tracing::info!(peer = %from, lost_messages = p.lost, "flow-state dump received");
            }
        }
    }
    match h.kind {
        Kind::DumpRequest => {
            dumps.request((from, h.sender));
            tracing::info!(peer = %from, "flow-state dump requested");
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
                    install(rt, s, ix, r, lag);
                }
            });
        }
    }
}

/// Resolves a peer's record to this host's service and endpoint slot and hands it to the
/// worker(s) that own the flow. The lifetime is shortened by the message's lag, so a copy
/// never outlives the origin's entry; a record with nothing left removes the copy.
fn install(rt: &SyncRuntime, s: &Snapshot, ix: &Index, r: &Record, lag_ms: u64) {
    let Some(service) = service_of(s, r) else {
        rt.counters.unknown_service.fetch_add(1, Relaxed);
        return;
    };
    let Some(&(backend, incarnation)) = ix.endpoints.get(&(service, r.endpoint)) else {
        rt.counters.unknown_endpoint.fetch_add(1, Relaxed);
        return;
    };
    let remaining_ms = r.remaining_ms.saturating_sub(u32::try_from(lag_ms).unwrap_or(u32::MAX));
    // Nothing left: the origin's entry is gone, so the copy goes too.
    let op = if remaining_ms == 0 { wire::Op::Remove } else { r.op };
    let number = s.services.get(usize::from(service)).map_or(0, |svc| svc.id);
    let rec = SyncIn { rec: Record { remaining_ms, op, ..*r }, backend, incarnation, service, number };
    for w in rt.placement.workers(r.ipv6, r.src, r.dst, r.sport, r.dport) {
        if let Some(q) = rt.queues.inbound.get(w) {
            if q.push(rec).is_err() {
                rt.counters.inbound_full.fetch_add(1, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The time a record waited is taken off its lifetime; a closing record with nothing
    /// left removes the peers' copy.
    #[test]
    fn queued_time_is_taken_off_the_lifetime() {
        let rec = Record {
            op: wire::Op::Upsert,
            ipv6: false,
            src: 1,
            dst: 2,
            sport: 3,
            dport: 80,
            proto: 6,
            session: false,
            state: wire::SyncState::Closing,
            remaining_ms: 10_000,
            endpoint: IpAddr::V4([10, 0, 1, 1].into()),
            relayed: false,
        };
        let o = SyncOut { rec, at_ms: 1_000 };
        assert_eq!(aged(&o, 4_000).remaining_ms, 7_000);
        let late = aged(&o, 12_000);
        assert_eq!((late.remaining_ms, late.op), (0, wire::Op::Remove));
        assert_eq!(aged(&SyncOut { at_ms: u32::MAX - 10, ..o }, 5).remaining_ms, 10_000 - 16, "the worker clock wraps");
    }
}
