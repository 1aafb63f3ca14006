//! Which worker gets a peer's entry: the one whose RX queue the NIC's RSS gives the flow,
//! so its first packet here finds the entry with the ordinary lookup.
//!
//! RSS hashes the IPv4/IPv6 source and destination addresses and the TCP/UDP ports with
//! the Toeplitz function over the port's key ("Verifying the RSS Hash Calculation",
//! Microsoft's NDIS documentation; DPDK `rte_softrss`), and the low bits of the hash index
//! the redirection table (RETA), whose entries are queues = workers. Where the key or table
//! is not known (a device that does not report them), the entry goes to every worker: it
//! costs a slot per worker but the flow finds it wherever it lands.

use crate::dpdk::RssConf;
use spillway_shared::proto::PortRss;

/// How peers' entries are placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One worker: everything goes to worker 0.
    Single,
    /// The port's RSS key and redirection table (queue per entry, length a power of two);
    /// made by [`Placement::rss`].
    Rss {
        /// Toeplitz key (40 bytes for most NICs; 52 for some).
        key: Vec<u8>,
        /// Redirection table: queue (worker) per entry.
        reta: Vec<u16>,
        /// Workers the table names (highest queue + 1): where a session entry goes.
        workers: usize,
    },
    /// Every one of this many workers.
    Broadcast(usize),
}

/// The Toeplitz hash of `input` under `key`: for every set bit of the input (most
/// significant first), XOR in the 32 key bits starting at that bit's position. Bits past
/// the key's end count as zero.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let bit = |i: usize| -> u64 { key.get(i / 8).map_or(0, |b| u64::from(b >> (7 - i % 8) & 1)) };
    // A 64-bit window of key bits: its top 32 bits are the key bits at the current position.
    let mut window: u64 = (0..64).fold(0u64, |w, i| (w << 1) | bit(i));
    let mut next = 64;
    let mut h = 0u32;
    for byte in input {
        for j in (0..8).rev() {
            if byte >> j & 1 == 1 {
                h ^= (window >> 32) as u32;
            }
            window = (window << 1) | bit(next);
            next += 1;
        }
    }
    h
}

/// RSS input of a flow into `buf`: source address, destination address, source port,
/// destination port, all in network byte order; returns its length (IPv4: 12, IPv6: 36).
fn rss_input(buf: &mut [u8; 36], ipv6: bool, src: u128, dst: u128, sport: u16, dport: u16) -> usize {
    let a = if ipv6 { 16 } else { 4 };
    let (s, d) = (src.to_be_bytes(), dst.to_be_bytes());
    buf[..a].copy_from_slice(&s[16 - a..]);
    buf[a..2 * a].copy_from_slice(&d[16 - a..]);
    buf[2 * a..2 * a + 2].copy_from_slice(&sport.to_be_bytes());
    buf[2 * a + 2..2 * a + 4].copy_from_slice(&dport.to_be_bytes());
    2 * a + 4
}

/// The hash functions software placement needs the device to use: the addresses and ports
/// of TCP and UDP over both families (rte_ethdev.h: `RTE_ETH_RSS_NONFRAG_IPV4_TCP` = 1 << 4,
/// `_IPV4_UDP` = 1 << 5, `_IPV6_TCP` = 1 << 10, `_IPV6_UDP` = 1 << 11).
pub const PORTS_BOTH_FAMILIES: u64 = 1 << 4 | 1 << 5 | 1 << 10 | 1 << 11;

/// Why [`Placement::choose`] chose what it did, per port: (placement name — `rss`,
/// `broadcast`, `single` — and the reason in words).
pub type PlacementWhy = (String, String);

impl Placement {
    /// The placement for `workers` workers over these ports, and per port its name and why.
    /// Software RSS needs every port to report the same key and table (a flow may arrive on
    /// any of them), a table whose length is a power of two, and 5-tuple hashing of TCP and
    /// UDP over both families ([`PORTS_BOTH_FAMILIES`]); otherwise every worker gets the
    /// entry.
    pub fn choose(workers: usize, ports: &[RssConf]) -> (Placement, Vec<PlacementWhy>) {
        let all = |p: &str, why: &str| ports.iter().map(|_| (p.to_string(), why.to_string())).collect::<Vec<_>>();
        if workers <= 1 {
            return (Placement::Single, all("single", "one worker: every entry goes to worker 0"));
        }
        let unusable = |p: &RssConf| -> Option<String> {
            if p.key.is_empty() || p.reta.is_empty() {
                return Some(format!("port {} reports no RSS key or redirection table", p.name));
            }
            if !p.reta.len().is_power_of_two() {
                return Some(format!("port {}'s redirection table has {} entries, not a power of two", p.name, p.reta.len()));
            }
            if p.hash_functions & PORTS_BOTH_FAMILIES != PORTS_BOTH_FAMILIES {
                return Some(format!("port {} does not hash the TCP and UDP ports of both families (rss_hf {:#x})", p.name, p.hash_functions));
            }
            None
        };
        let why = match ports.first() {
            None => Some("no ports".to_string()),
            Some(first) => ports.iter().find_map(unusable).or_else(|| {
                ports.iter().find(|p| p.key != first.key || p.reta != first.reta).map(|p| format!("ports {} and {} report different keys or redirection tables", first.name, p.name))
            }),
        };
        match (why, ports.first()) {
            (None, Some(first)) => {
                let why = format!("software Toeplitz over the device's {}-byte key and {}-entry redirection table (the same on every port)", first.key.len(), first.reta.len());
                (Placement::rss(first.key.clone(), first.reta.clone()), all("rss", &why))
            }
            (why, _) => {
                let why = format!("{}: every worker gets the entry", why.unwrap_or_default());
                (Placement::Broadcast(workers), all("broadcast", &why))
            }
        }
    }

    /// A deliberately wrong placement, for tests that must show their placement check can
    /// fail (`SPILLWAY_FAULT_SYNC_PLACEMENT`): `broadcast` (every worker), or `shifted-reta`
    /// (each RETA entry names the next worker). Errors: another name, or `shifted-reta`
    /// without an RSS placement.
    pub fn faulty(p: Placement, why: Vec<PlacementWhy>, fault: &str) -> Result<(Placement, Vec<PlacementWhy>), String> {
        let mark = |name: &str| why.iter().map(|w| (name.to_string(), format!("FAULT INJECTED ({fault}); chosen: {} ({})", w.0, w.1))).collect();
        match (fault, &p) {
            ("broadcast", _) => {
                let n = match &p {
                    Placement::Single => 1,
                    Placement::Broadcast(n) => *n,
                    Placement::Rss { workers, .. } => *workers,
                };
                Ok((Placement::Broadcast(n), mark("broadcast")))
            }
            ("shifted-reta", Placement::Rss { key, reta, workers }) => {
                let n = *workers as u16;
                let reta = reta.iter().map(|q| (q + 1) % n).collect();
                Ok((Placement::Rss { key: key.clone(), reta, workers: *workers }, mark("rss")))
            }
            _ => Err(format!("SPILLWAY_FAULT_SYNC_PLACEMENT={fault}: must be broadcast, or shifted-reta with an RSS placement (now {p:?})")),
        }
    }

    /// RSS placement over `key` and `reta` (queue per entry).
    pub fn rss(key: Vec<u8>, reta: Vec<u16>) -> Placement {
        let workers = reta.iter().map(|q| usize::from(*q) + 1).max().unwrap_or(1);
        Placement::Rss { key, reta, workers }
    }

    /// The workers that get the entry of the flow `src:sport → dst:dport` (the client's
    /// direction; a session entry, whose client port is 0, goes to every worker: its
    /// connections may hash anywhere).
    pub fn workers(&self, ipv6: bool, src: u128, dst: u128, sport: u16, dport: u16) -> std::ops::Range<usize> {
        match self {
            Placement::Single => 0..1,
            Placement::Broadcast(n) => 0..*n,
            Placement::Rss { key, reta, workers } => {
                if sport == 0 || reta.is_empty() {
                    return 0..*workers;
                }
                let mut buf = [0u8; 36];
                let len = rss_input(&mut buf, ipv6, src, dst, sport, dport);
                let h = toeplitz(key, &buf[..len]);
                let q = usize::from(reta[h as usize & (reta.len() - 1)]);
                q..q + 1
            }
        }
    }
}

/// The fleet-sync placement for `workers` workers over the ports whose devices report
/// `confs` (config order, each named as in the config; [`Placement::choose`]), and each port's
/// [`PortRss`] for `status` and the metrics, logged once per port (`RSS`). Without `[sync]`
/// (`sync_on` false) the placement reads `off` and its reason says what it would be.
/// `fault` (`SPILLWAY_FAULT_SYNC_PLACEMENT`, for the e2e test `pci` only) makes it wrong on
/// purpose ([`Placement::faulty`]). Errors: an unknown fault.
pub fn sync_placement(workers: usize, sync_on: bool, confs: &[RssConf], fault: Option<&str>) -> std::result::Result<(Placement, Vec<PortRss>), String> {
    let (mut placement, mut why) = Placement::choose(workers, confs);
    if let Some(f) = fault {
        (placement, why) = Placement::faulty(placement, why, f)?;
        tracing::warn!(fault = %f, "SPILLWAY_FAULT_SYNC_PLACEMENT: sync placement deliberately wrong (a test's fault injection)");
    }
    if let (Placement::Broadcast(n), true, Some((_, w))) = (&placement, sync_on, why.first()) {
        tracing::warn!(workers = n, why = %w, "peers' synced entries go to every worker (docs/bgp.md)");
    }
    let views = confs
        .iter()
        .zip(&why)
        .map(|(r, (how, why))| {
            let v = PortRss {
                rx_queues: workers as u16,
                hash_types: crate::dpdk::rss_hash_names(r.hash_functions),
                key_source: if r.key.is_empty() { "none" } else { "driver default" }.to_string(),
                key: r.key.iter().map(|b| format!("{b:02x}")).collect(),
                reta: r.reta.clone(),
                sync_placement: if sync_on { how.clone() } else { "off".to_string() },
                sync_placement_why: if sync_on { why.clone() } else { format!("no [sync] configured (with it: {how}, {why})") },
            };
            tracing::info!(port = %r.name, rx_queues = v.rx_queues, hash_types = %v.hash_types.join(","), key_bytes = r.key.len(), reta_size = v.reta.len(), sync_placement = %v.sync_placement, why = %v.sync_placement_why, "RSS");
            v
        })
        .collect();
    Ok((placement, views))
}

/// The fleet-sync placement also tells the workers which of them owns a flow, for the
/// packets RSS gives another worker (fastpath/worker/redirect.rs).
impl crate::fastpath::worker::FlowOwner for Placement {
    fn owners(&self, ipv6: bool, src: u128, dst: u128, sport: u16, dport: u16) -> std::ops::Range<usize> {
        self.workers(ipv6, src, dst, sport, dport)
    }

    fn per_flow(&self) -> bool {
        matches!(self, Placement::Rss { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The verification key and IPv4 vectors of Microsoft's "Verifying the RSS Hash
    /// Calculation" (source → destination, with and without the TCP ports).
    const KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
        0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    fn v4(a: [u8; 4]) -> Vec<u8> {
        u32::from(Ipv4Addr::from(a)).to_be_bytes().to_vec()
    }

    /// (source, source port, destination, destination port, hash of the addresses, hash with
    /// the ports).
    type Vector = ([u8; 4], u16, [u8; 4], u16, u32, u32);

    #[test]
    fn microsoft_verification_vectors() {
        let cases: [Vector; 2] = [
            ([66, 9, 149, 187], 2794, [161, 142, 100, 80], 1766, 0x323e_8fc2, 0x51cc_c178),
            ([199, 92, 111, 2], 14230, [65, 69, 140, 83], 4739, 0xd718_262a, 0xc626_b0ea),
        ];
        for (src, sport, dst, dport, ip_only, with_ports) in cases {
            let mut input = v4(src);
            input.extend(v4(dst));
            assert_eq!(toeplitz(&KEY, &input), ip_only, "{src:?} -> {dst:?}");
            input.extend(sport.to_be_bytes());
            input.extend(dport.to_be_bytes());
            assert_eq!(toeplitz(&KEY, &input), with_ports, "{src:?}:{sport} -> {dst:?}:{dport}");
        }
    }

    fn port(name: &str, hf: u64, key: &[u8], reta: Vec<u16>) -> RssConf {
        RssConf { name: name.into(), hash_functions: hf, key: key.to_vec(), reta }
    }

    #[test]
    fn choose_uses_the_table_only_when_every_port_reports_the_same_usable_one() {
        let reta: Vec<u16> = (0..128).map(|i| (i % 2) as u16).collect();
        let hf = PORTS_BOTH_FAMILIES | 1 << 2 | 1 << 8;
        let good = port("p0", hf, &KEY, reta.clone());
        let (p, why) = Placement::choose(2, std::slice::from_ref(&good));
        assert_eq!(p, Placement::rss(KEY.to_vec(), reta.clone()));
        assert_eq!(why[0].0, "rss");
        assert!(why[0].1.contains("40-byte key and 128-entry"), "{why:?}");
        assert_eq!(Placement::choose(1, std::slice::from_ref(&good)).0, Placement::Single);
        let cases: [(Vec<RssConf>, &str); 4] = [
            (vec![port("p0", hf, &[], vec![])], "reports no RSS key"),
            (vec![port("p0", hf, &KEY, vec![0, 1, 0])], "not a power of two"),
            (vec![port("p0", 1 << 2 | 1 << 4, &KEY, reta.clone())], "does not hash the TCP and UDP ports"),
            (vec![good.clone(), port("p1", hf, &KEY, vec![1; 128])], "ports p0 and p1 report different"),
        ];
        for (ports, want) in cases {
            let (p, why) = Placement::choose(2, &ports);
            assert_eq!(p, Placement::Broadcast(2), "{want}");
            assert_eq!(why.len(), ports.len());
            assert!(why.iter().all(|w| w.0 == "broadcast" && w.1.contains(want) && w.1.ends_with("every worker gets the entry")), "{why:?}");
        }
    }

    #[test]
    fn faults_place_wrongly() {
        let reta: Vec<u16> = (0..128).map(|i| (i % 2) as u16).collect();
        let p = Placement::rss(KEY.to_vec(), reta);
        let why = vec![("rss".to_string(), "ok".to_string())];
        let src = u128::from(u32::from(Ipv4Addr::new(66, 9, 149, 187)));
        let dst = u128::from(u32::from(Ipv4Addr::new(161, 142, 100, 80)));
        let (b, w) = Placement::faulty(p.clone(), why.clone(), "broadcast").unwrap();
        assert_eq!(b.workers(false, src, dst, 2794, 1766), 0..2);
        assert!(w[0].1.starts_with("FAULT INJECTED"));
        let (s, _) = Placement::faulty(p.clone(), why.clone(), "shifted-reta").unwrap();
        assert_eq!(p.workers(false, src, dst, 2794, 1766), 0..1);
        assert_eq!(s.workers(false, src, dst, 2794, 1766), 1..2);
        assert!(Placement::faulty(Placement::Broadcast(2), why.clone(), "shifted-reta").is_err());
        assert!(Placement::faulty(p, why, "nonsense").is_err());
    }

    #[test]
    fn placement_follows_the_redirection_table() {
        let p = Placement::rss(KEY.to_vec(), (0..128).map(|i| (i % 2) as u16).collect());
        let src = u128::from(u32::from(Ipv4Addr::new(66, 9, 149, 187)));
        let dst = u128::from(u32::from(Ipv4Addr::new(161, 142, 100, 80)));
        // 0x51ccc178 & 127 = 0x78 = 120 → queue 0
        assert_eq!(p.workers(false, src, dst, 2794, 1766), 0..1);
        assert_eq!(p.workers(false, src, dst, 0, 1766), 0..2, "session entries go everywhere");
        assert_eq!(Placement::Single.workers(false, src, dst, 1, 2), 0..1);
        assert_eq!(Placement::Broadcast(3).workers(false, src, dst, 1, 2), 0..3);
    }

    #[test]
    fn views_say_off_without_sync_and_what_it_would_be() {
        let conf = RssConf { name: "p0".into(), hash_functions: 1 << 2 | 1 << 4 | 1 << 5 | 1 << 8 | 1 << 10 | 1 << 11, key: vec![0x6d; 40], reta: (0..128).map(|i| i % 2).collect() };
        let (p, v) = sync_placement(2, false, std::slice::from_ref(&conf), None).unwrap();
        assert!(matches!(p, Placement::Rss { .. }));
        assert_eq!((v[0].sync_placement.as_str(), v[0].key.len(), v[0].reta.len(), v[0].key_source.as_str()), ("off", 80, 128, "driver default"));
        assert!(v[0].sync_placement_why.starts_with("no [sync] configured (with it: rss, software Toeplitz"), "{}", v[0].sync_placement_why);
        let (p, v) = sync_placement(2, true, &[RssConf { name: "p0".into(), ..RssConf::default() }], None).unwrap();
        assert_eq!(p, Placement::Broadcast(2));
        assert_eq!((v[0].sync_placement.as_str(), v[0].key_source.as_str()), ("broadcast", "none"));
        assert!(sync_placement(2, true, &[conf], Some("bogus")).is_err());
    }
}
