//! Which worker gets a peer's entry: the one whose RX queue the NIC's RSS gives the flow,
//! so its first packet here finds the entry with the ordinary lookup.
//!
//! RSS hashes the IPv4/IPv6 source and destination addresses and the TCP/UDP ports with
//! the Toeplitz function over the port's key ("Verifying the RSS Hash Calculation",
//! Microsoft's NDIS documentation; DPDK `rte_softrss`), and the low bits of the hash index
//! the redirection table (RETA), whose entries are queues = workers. Where the key or table
//! is not known (a device that does not report them), the entry goes to every worker: it
//! costs a slot per worker but the flow finds it wherever it lands.

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

impl Placement {
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
}
