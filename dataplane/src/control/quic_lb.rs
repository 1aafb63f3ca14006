//! QUIC-LB on the control side: the per-service table the workers decode short-header
//! DCIDs with (configurations by codepoint, server ID → endpoint slot), built when the
//! snapshot is compiled, and the key files it needs (read when the configuration is
//! loaded or edited: `--check`, start, every live edit).
//!
//! The decode itself is `spillway_shared::quic_lb` (draft-ietf-quic-load-balancers-19);
//! the worker's use of the table is `fastpath/worker/quic.rs`, and `explain` runs the same
//! [`QuicLbTable::lookup`].

use spillway_shared::config::{Config, Service};
use spillway_shared::quic_lb::{codepoint, DecodeError, QuicLbConfig, ServerId, KEY_LEN, MAX_CODEPOINT};
use spillway_shared::config::service::quic_lb::{key_from_file_contents, QuicLbAlgorithm};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Why a short-header packet took the 5-tuple path: defined beside the counters it indexes.
pub use crate::fastpath::stats::Fallback;

/// A service's QUIC-LB routing table: configurations by codepoint and the endpoints'
/// server IDs, sorted for a binary search. Built once per compilation; read-only after.
#[derive(Debug, Default)]
pub struct QuicLbTable {
    configs: [Option<QuicLbConfig>; MAX_CODEPOINT as usize + 1],
    /// (`ServerId::key`, endpoint slot) in an open-addressed table (linear probing from
    /// [`sid_place`]; a power of two at least twice the server IDs, so a probe mostly
    /// ends at its first place): one integer compare per packet, with no data-dependent
    /// branch chain as in a binary search. Key 0 (no server ID's) marks a free place.
    server_ids: Box<[(u128, u16)]>,
    /// Unique per built table (1, 2, ...; 0 for a `Default` one): what a worker's decode
    /// cache ([`crate::fastpath::worker::quic::CidCache`]) keys its entries by, so an
    /// entry of an older table (another key, other server IDs) never answers for this one.
    id: u64,
}

/// The first place of a server ID `key` in a table of `mask + 1` places.
#[inline(always)]
fn sid_place(key: u128, mask: usize) -> usize {
    let x = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask
}

/// The next [`QuicLbTable::id`] (tables are built by the control plane, never per packet).
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

impl QuicLbTable {
    /// The table of `svc`: `slot_of(backend index, endpoint index)` gives each endpoint's
    /// slot (endpoints in `members()` order); keys come from [`key`]. A configuration
    /// whose key cannot be read is left out (its CIDs fall back as `unknown_codepoint`)
    /// and named in the returned warnings. `None` when the service has no QUIC-LB.
    pub fn build(svc: &Service, slot_of: impl Fn(usize, usize) -> u16) -> Option<(QuicLbTable, Vec<String>)> {
        if svc.quic_lb.is_empty() {
            return None;
        }
        let mut t = QuicLbTable { id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed), ..Default::default() };
        let mut warnings = Vec::new();
        for q in &svc.quic_lb {
            let k = match (&q.algorithm, &q.key_file) {
                (QuicLbAlgorithm::Encrypted, Some(path)) => match key(path) {
                    Ok(k) => Some(k),
                    Err(e) => {
                        warnings.push(format!("service {}: QUIC-LB config_rotation {} left out: {e}", svc.name, q.config_rotation));
                        continue;
                    }
                },
                _ => None,
            };
            match q.codec(k) {
                Ok(c) => {
                    if let Some(s) = t.configs.get_mut(usize::from(q.config_rotation)) {
                        *s = Some(c);
                    }
                }
                Err(e) => warnings.push(format!("service {}: QUIC-LB config_rotation {}: {e}", svc.name, q.config_rotation)),
            }
        }
        let mut ids = Vec::new();
        for (bi, b) in svc.backends.iter().enumerate() {
            for (ei, m) in b.members().iter().enumerate() {
                if let Some(sid) = m.server_id.as_deref().and_then(|h| ServerId::from_hex(h).ok()) {
                    ids.push((sid.key(), slot_of(bi, ei)));
                }
            }
        }
        // unique by validation; a duplicate would keep the first endpoint
        let places = (ids.len() * 2).next_power_of_two().max(4);
        let mut table = vec![(0u128, 0u16); places];
        for (k, slot) in ids {
            let mut i = sid_place(k, places - 1);
            while table[i].0 != 0 && table[i].0 != k {
                i = (i + 1) & (places - 1);
            }
            if table[i].0 == 0 {
                table[i] = (k, slot);
            }
        }
        t.server_ids = table.into_boxed_slice();
        Some((t, warnings))
    }

    /// This table's identity (unique per [`build`](Self::build); 0 for a `Default` one).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The configuration at `codepoint`, if any.
    pub fn config(&self, codepoint: u8) -> Option<&QuicLbConfig> {
        self.configs.get(usize::from(codepoint)).and_then(Option::as_ref)
    }

    /// The endpoint slot of the server ID `dcid` carries, or why there is none. `dcid` is
    /// the bytes after a short header's first octet (as many as the packet has; the
    /// configuration reads its CID length). No allocation; cannot panic.
    #[inline]
    pub fn lookup(&self, dcid: &[u8]) -> Result<(ServerId, u16), Fallback> {
        let cfg = self.config_of(dcid)?;
        let sid = cfg.decode(dcid).map_err(fallback_of)?;
        self.slot_of_key(sid.key()).map(|slot| (sid, slot))
    }

    /// The configuration of `dcid`'s codepoint: `TooShort` for an empty DCID,
    /// `UnknownCodepoint` when there is none.
    #[inline]
    pub fn config_of(&self, dcid: &[u8]) -> Result<&QuicLbConfig, Fallback> {
        let cp = codepoint(dcid).ok_or(Fallback::TooShort)?;
        self.config(cp).ok_or(Fallback::UnknownCodepoint)
    }

    /// [`lookup`](Self::lookup)'s endpoint slot with `cfg` (this table's configuration of
    /// `dcid`'s codepoint, [`config_of`](Self::config_of)): the packet path's decode,
    /// through [`QuicLbConfig::decode_key`]. Same results and errors.
    #[inline]
    pub fn slot_with(&self, cfg: &QuicLbConfig, dcid: &[u8]) -> Result<u16, Fallback> {
        self.slot_of_key(cfg.decode_key(dcid).map_err(fallback_of)?)
    }

    /// The endpoint slot of the server ID whose [`ServerId::key`] is `key`.
    #[inline]
    fn slot_of_key(&self, key: u128) -> Result<u16, Fallback> {
        let n = self.server_ids.len();
        let mut i = sid_place(key, n.wrapping_sub(1));
        for _ in 0..n {
            match self.server_ids.get(i) {
                Some(&(k, slot)) if k == key => return Ok(slot),
                Some(&(k, _)) if k != 0 => i = (i + 1) & (n - 1),
                _ => break,
            }
        }
        Err(Fallback::UnknownServerId)
    }

    /// The configurations in codepoint order (for `service show`, `explain`, `status`).
    pub fn configs(&self) -> impl Iterator<Item = &QuicLbConfig> {
        self.configs.iter().flatten()
    }
}

/// The fallback reason of a decode error.
#[inline]
fn fallback_of(e: DecodeError) -> Fallback {
    match e {
        DecodeError::TooShort { .. } => Fallback::TooShort,
        DecodeError::OtherCodepoint(_) => Fallback::UnknownCodepoint,
    }
}

/// One configuration in words: `server_id_length 2, nonce_length 6, AES-128-ECB four-pass`.
pub fn describe(c: &QuicLbConfig) -> String {
    format!("config_rotation {}: server_id_length {}, nonce_length {}, {}", c.codepoint(), c.server_id_len(), c.nonce_len(), c.algorithm())
}

/// `explain --quic-dcid`: how the workers route a short-header packet with `dcid_hex` to
/// service index `si` of `snap` (the same [`QuicLbTable::lookup`] and the eligibility
/// rules of a tracked connection; a drain deadline is named, not compared, as the
/// workers' clock is theirs). `owner` names a slot's (backend, endpoint).
pub fn explain(snap: &crate::control::Snapshot, si: Option<u16>, dcid_hex: &str, owner: impl Fn(u16) -> Option<(String, String)>) -> spillway_shared::proto::QuicExplain {
    let mut out = spillway_shared::proto::QuicExplain { dcid: dcid_hex.to_string(), ..Default::default() };
    let dcid = match spillway_shared::quic_lb::parse_hex(dcid_hex) {
        Ok(d) => d,
        Err(e) => {
            out.fallback = Some(Fallback::TooShort.name().to_string());
            out.notes.push(format!("--quic-dcid {dcid_hex:?}: {e}"));
            return out;
        }
    };
    out.codepoint = codepoint(&dcid);
    let Some((svc_idx, ss)) = si.and_then(|i| Some((i, snap.services.get(usize::from(i))?))) else {
        out.fallback = Some("no_service".into());
        return out;
    };
    let Some(table) = ss.quic_lb.as_deref() else {
        out.fallback = Some("no_quic_lb".into());
        out.notes.push("the service has no [[services.quic_lb]]: every packet takes the 5-tuple path".into());
        return out;
    };
    out.config = out.codepoint.and_then(|c| table.config(c)).map(describe);
    let slot = match table.lookup(&dcid) {
        Ok((sid, slot)) => {
            out.server_id = Some(sid.to_string());
            slot
        }
        Err(f) => {
            if let (Some(c), Fallback::UnknownServerId) = (out.codepoint.and_then(|c| table.config(c)), f) {
                out.server_id = c.decode(&dcid).ok().map(|s| s.to_string());
            }
            out.fallback = Some(f.name().to_string());
            return out;
        }
    };
    if let Some((b, e)) = owner(slot) {
        out.backend = Some(b);
        out.endpoint = Some(e);
    }
    let eligible = match snap.backends.get(usize::from(slot)) {
        Some(b) if !(b.present && b.service == svc_idx) => {
            out.notes.push("the endpoint was removed".into());
            false
        }
        None => false,
        Some(b) if b.evict_connections => {
            out.notes.push("the endpoint's connections are evicted (failover without drain, or the drain deadline passed)".into());
            false
        }
        Some(b) => {
            if let Some(d) = b.draining_until_ms {
                out.notes.push(format!("the endpoint is in the inactive pool: routed until its drain deadline (worker clock {d} ms), then the 5-tuple path"));
            }
            let last_resort = ss.tables.iter().flatten().all(|t| t.all_unhealthy);
            if b.healthy {
                true
            } else if ss.persist_on_unhealthy || last_resort {
                out.notes.push(format!("the endpoint is unhealthy; kept ({})", if ss.persist_on_unhealthy { "the service persists on unhealthy backends" } else { "every backend is unhealthy: last resort" }));
                true
            } else {
                out.notes.push("the endpoint is unhealthy and the service does not persist on unhealthy backends (UDP default)".into());
                false
            }
        }
    };
    if !eligible {
        out.fallback = Some(Fallback::NotEligible.name().to_string());
    }
    out
}

/// Keys read by the last [`load_keys`], by key file path.
static KEYS: Mutex<Option<HashMap<String, [u8; KEY_LEN]>>> = Mutex::new(None);

/// Reads one key file: a regular file of mode 0600 or 0400 holding 32 hex digits.
/// Errors name the path and the problem.
pub fn read_key_file(path: &str) -> Result<[u8; KEY_LEN], String> {
    let bytes = crate::secret_file::read("key_file", path, "anyone who reads the key can tell which server every connection uses")?;
    key_from_file_contents(&bytes).map_err(|e| format!("key_file = {path}: {e}"))
}

/// Reads every QUIC-LB key file of `cfg` and keeps the keys for [`key`]. Errors name the
/// field (`services[0].quic_lb[1].key_file = ...`) and the problem; on error the keys of
/// the previous load are kept.
pub fn load_keys(cfg: &Config) -> Result<(), String> {
    let mut keys = HashMap::new();
    for (si, s) in cfg.services.iter().enumerate() {
        for (qi, q) in s.quic_lb.iter().enumerate() {
            if let (QuicLbAlgorithm::Encrypted, Some(path)) = (q.algorithm, &q.key_file) {
                let k = read_key_file(path).map_err(|e| format!("services[{si}].quic_lb[{qi}].{e}"))?;
                keys.insert(path.clone(), k);
            }
        }
    }
    *KEYS.lock().unwrap_or_else(|e| e.into_inner()) = Some(keys);
    Ok(())
}

/// The key of `path` as of the last [`load_keys`]; a path it did not read (tests and
/// benchmarks that compile without the daemon's checks) is read now.
pub fn key(path: &str) -> Result<[u8; KEY_LEN], String> {
    if let Some(k) = KEYS.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(path)) {
        return Ok(*k);
    }
    read_key_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_shared::config::Config;

    pub(crate) fn key_file(dir: &std::path::Path, name: &str, hex: &str, mode: u32) -> String {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, format!("{hex}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.display().to_string()
    }

    fn service(key_file: &str) -> Service {
        let text = format!(
            r#"
[[ports]]
name = "p0"
device = "net_null0"
[[services]]
name = "q"
vip = "10.0.0.1"
port = 443
protocol = "udp"
[[services.quic_lb]]
config_rotation = 1
server_id_length = 3
nonce_length = 4
key_file = "{key_file}"
[[services.quic_lb]]
config_rotation = 0
server_id_length = 3
nonce_length = 4
algorithm = "plaintext"
[[services.backends]]
name = "a"
address = "10.0.1.1"
server_id = "ed793a"
[[services.backends]]
name = "b"
address = "10.0.1.2"
server_id = "c4605e"
"#
        );
        let c = Config::from_toml(&text).unwrap();
        c.validate().unwrap();
        c.services[0].clone()
    }

    #[test]
    fn lookup_routes_the_drafts_vectors_and_names_every_fallback() {
        let dir = std::env::temp_dir().join(format!("spw-quiclb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kf = key_file(&dir, "k", "8f95f09245765f80256934e50c66207f", 0o600);
        let (t, warnings) = QuicLbTable::build(&service(&kf), |b, _| 10 + b as u16).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let hex = |s: &str| spillway_shared::quic_lb::parse_hex(s).unwrap();
        // The draft's plaintext vector at codepoint 0: server c4605e (backend b).
        assert_eq!(t.lookup(&hex("07c4605e4504cc4f")).map(|r| r.1), Ok(11));
        // Its four-pass vector re-keyed at codepoint 1: same body, first octet 0x27.
        assert_eq!(t.lookup(&hex("2720b1d07b359d3c")).map(|r| r.1), Ok(10));
        // Extra octets after the CID (a longer packet) are the packet's, not the CID's.
        assert_eq!(t.lookup(&hex("07c4605e4504cc4fffffffff")).map(|r| r.1), Ok(11));
        assert_eq!(t.lookup(&hex("47c4605e4504cc4f")), Err(Fallback::UnknownCodepoint));
        assert_eq!(t.lookup(&hex("e7c4605e4504cc4f")), Err(Fallback::UnknownCodepoint), "codepoint 7");
        assert_eq!(t.lookup(&hex("07c4605e4504cc")), Err(Fallback::TooShort));
        assert_eq!(t.lookup(&[]), Err(Fallback::TooShort));
        assert_eq!(t.lookup(&hex("07aaaaaa4504cc4f")), Err(Fallback::UnknownServerId));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn key_files_missing_or_too_open_are_refused_and_leave_the_configuration_out() {
        let dir = std::env::temp_dir().join(format!("spw-quiclb-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open = key_file(&dir, "open", "8f95f09245765f80256934e50c66207f", 0o640);
        assert!(read_key_file(&open).unwrap_err().contains("mode 0640: must be 0600 or 0400"));
        let short = key_file(&dir, "short", "8f95", 0o600);
        assert!(read_key_file(&short).unwrap_err().contains("2 octets"));
        let missing = dir.join("missing").display().to_string();
        assert!(read_key_file(&missing).unwrap_err().contains("No such file"));
        assert!(read_key_file(&dir.display().to_string()).unwrap_err().contains("not a regular file"));
        let (t, warnings) = QuicLbTable::build(&service(&missing), |_, _| 0).unwrap();
        assert!(t.config(1).is_none() && t.config(0).is_some());
        assert!(warnings[0].contains("config_rotation 1 left out"), "{warnings:?}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
