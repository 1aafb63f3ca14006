//! The control-socket protocol between `spillwayctl` and the daemon.
//!
//! Transport: a Unix stream socket (`/run/spillway/ctl.sock` by default). Each message is a
//! frame: a 4-byte big-endian length (at most [`MAX_FRAME`] = 1 MiB) followed by a postcard
//! encoding of [`RequestFrame`] or [`ResponseFrame`], whose first field is the protocol
//! version ([`PROTOCOL_VERSION`]), so a peer of another version is detected before the body
//! is decoded and told so plainly. A bad frame gets an error reply and closes that
//! connection only.
//!
//! (postcard, not bincode: bincode is unmaintained, RUSTSEC-2025-0141; see
//! docs/decisions.md.)

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Version of this protocol; bumped on any incompatible change of the message types.
pub const PROTOCOL_VERSION: u16 = 1;
/// Largest frame body accepted, bytes.
pub const MAX_FRAME: usize = 1 << 20;

/// A request with its protocol version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestFrame {
    /// Must equal [`PROTOCOL_VERSION`].
    pub version: u16,
    /// The request.
    pub request: Request,
}

/// A response with its protocol version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFrame {
    /// [`PROTOCOL_VERSION`] of the daemon.
    pub version: u16,
    /// The response.
    pub response: Response,
}

/// Requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Ports, workers, counters, drops by reason, per-backend new connections.
    Status,
}

/// Responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Answer to [`Request::Status`].
    Status(StatusReport),
    /// The request failed; `message` says why.
    Error {
        /// Human-readable reason.
        message: String,
    },
}

/// Counters of one worker, or summed over workers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Frames received.
    pub rx: u64,
    /// Frames sent.
    pub tx: u64,
    /// Frames forwarded to backends.
    pub forwarded: u64,
    /// ARP replies.
    pub arp_replies: u64,
    /// ICMP errors forwarded to the quoted flow's backend.
    pub icmp_forwarded: u64,
    /// ICMP "fragmentation needed" replies generated.
    pub icmp_frag_needed_sent: u64,
    /// IPv4 fragments forwarded.
    pub fragments: u64,
    /// New connections.
    pub new_connections: u64,
    /// Connections moved to another backend.
    pub rebalanced: u64,
    /// (reason, count) for every drop reason, in a fixed order.
    pub drops: Vec<(String, u64)>,
    /// Connection table hits.
    pub ct_hits: u64,
    /// Connection table misses.
    pub ct_misses: u64,
    /// Evictions of SYN-only entries.
    pub ct_evicted_syn_only: u64,
    /// Evictions of closing entries.
    pub ct_evicted_closing: u64,
    /// Evictions of established entries.
    pub ct_evicted_established: u64,
    /// First packets of new flows forwarded without a table entry (both buckets full of
    /// established connections; the Maglev choice still applies).
    pub ct_syn_not_tracked: u64,
    /// Snapshot generation in use (minimum over workers when summed).
    pub generation: u64,
    /// Poll iterations.
    pub polls: u64,
    /// Poll iterations that received nothing.
    pub idle_polls: u64,
}

impl Counters {
    /// Sums several workers' counters (generation: the minimum).
    pub fn sum<'a>(items: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut out = Counters::default();
        let mut gen: Option<u64> = None;
        for c in items {
            out.rx += c.rx;
            out.tx += c.tx;
            out.forwarded += c.forwarded;
            out.arp_replies += c.arp_replies;
            out.icmp_forwarded += c.icmp_forwarded;
            out.icmp_frag_needed_sent += c.icmp_frag_needed_sent;
            out.fragments += c.fragments;
            out.new_connections += c.new_connections;
            out.rebalanced += c.rebalanced;
            if out.drops.is_empty() {
                out.drops = c.drops.clone();
            } else {
                for (o, i) in out.drops.iter_mut().zip(&c.drops) {
                    o.1 += i.1;
                }
            }
            out.ct_hits += c.ct_hits;
            out.ct_misses += c.ct_misses;
            out.ct_evicted_syn_only += c.ct_evicted_syn_only;
            out.ct_evicted_closing += c.ct_evicted_closing;
            out.ct_evicted_established += c.ct_evicted_established;
            out.ct_syn_not_tracked += c.ct_syn_not_tracked;
            gen = Some(gen.map_or(c.generation, |g| g.min(c.generation)));
            out.polls += c.polls;
            out.idle_polls += c.idle_polls;
        }
        out.generation = gen.unwrap_or(0);
        out
    }

    /// Total drops over all reasons.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().map(|d| d.1).sum()
    }
}

/// One port's device counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    /// Port name from the config.
    pub name: String,
    /// Device string.
    pub device: String,
    /// MAC address.
    pub mac: String,
    /// Device RX packets.
    pub ipackets: u64,
    /// Device TX packets.
    pub opackets: u64,
    /// Packets the device dropped for lack of RX descriptors.
    pub imissed: u64,
    /// RX errors.
    pub ierrors: u64,
    /// TX errors.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
    /// mbufs in use in this port's pool.
    pub mbufs_in_use: u64,
}

/// One backend's state and counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Address.
    pub address: String,
    /// Zone.
    pub zone: String,
    /// Health as used by the dataplane.
    pub healthy: bool,
    /// Admin state.
    pub enabled: bool,
    /// New connections, summed over workers.
    pub new_connections: u64,
    /// Packets forwarded to it, summed over workers.
    pub packets: u64,
}

/// Answer to [`Request::Status`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Daemon version.
    pub version: String,
    /// Seconds since start.
    pub uptime_sec: f64,
    /// Current snapshot generation.
    pub generation: u64,
    /// Ports.
    pub ports: Vec<PortStatus>,
    /// Per-worker counters.
    pub workers: Vec<Counters>,
    /// Sum over workers.
    pub total: Counters,
    /// Per backend.
    pub backends: Vec<BackendStatus>,
}

/// Framing and decoding errors.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Socket error (including EOF mid-frame).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Length prefix over [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME} bytes")]
    TooLarge(usize),
    /// Peer speaks another protocol version.
    #[error("protocol version mismatch: peer speaks version {peer}, this side speaks version {PROTOCOL_VERSION}; use matching spillway and spillwayctl builds")]
    Version {
        /// The peer's version.
        peer: u16,
    },
    /// Body does not decode.
    #[error("malformed frame: {0}")]
    Decode(String),
}

/// Writes one frame (length prefix + body).
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> Result<(), FrameError> {
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    w.write_all(&(body.len() as u32).to_be_bytes())?;
    w.write_all(body)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame body. `Ok(None)` on a clean EOF before a frame starts.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut len[got..])?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        got += n;
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(FrameError::TooLarge(n));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// Decodes the version prefix of a body, then the rest as `T` when the version matches.
fn decode_versioned<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, FrameError> {
    let (peer, _) = postcard::take_from_bytes::<u16>(body).map_err(|e| FrameError::Decode(e.to_string()))?;
    if peer != PROTOCOL_VERSION {
        return Err(FrameError::Version { peer });
    }
    postcard::from_bytes(body).map_err(|e| FrameError::Decode(e.to_string()))
}

/// Encodes a request frame body.
pub fn encode_request(request: &Request) -> Vec<u8> {
    postcard::to_stdvec(&RequestFrame { version: PROTOCOL_VERSION, request: request.clone() }).unwrap_or_default()
}

/// Decodes a request frame body (version checked first).
pub fn decode_request(body: &[u8]) -> Result<Request, FrameError> {
    decode_versioned::<RequestFrame>(body).map(|f| f.request)
}

/// Encodes a response frame body.
pub fn encode_response(response: &Response) -> Vec<u8> {
    postcard::to_stdvec(&ResponseFrame { version: PROTOCOL_VERSION, response: response.clone() }).unwrap_or_default()
}

/// Decodes a response frame body (version checked first).
pub fn decode_response(body: &[u8]) -> Result<Response, FrameError> {
    decode_versioned::<ResponseFrame>(body).map(|f| f.response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_through_frames() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &encode_request(&Request::Status)).unwrap();
        let body = read_frame(&mut wire.as_slice()).unwrap().unwrap();
        assert_eq!(decode_request(&body).unwrap(), Request::Status);
        let resp = Response::Status(StatusReport { generation: 7, ..Default::default() });
        assert_eq!(decode_response(&encode_response(&resp)).unwrap(), resp);
    }

    #[test]
    fn version_mismatch_is_named() {
        let body = postcard::to_stdvec(&RequestFrame { version: 99, request: Request::Status }).unwrap();
        let e = decode_request(&body).unwrap_err();
        assert!(matches!(e, FrameError::Version { peer: 99 }));
        assert!(e.to_string().contains("version 99"));
    }

    #[test]
    fn oversized_and_truncated_frames() {
        let wire = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(read_frame(&mut &wire[..]), Err(FrameError::TooLarge(_))));
        let wire = [0u8, 0, 0, 10, 1, 2];
        assert!(matches!(read_frame(&mut &wire[..]), Err(FrameError::Io(_))));
        assert!(read_frame(&mut &[][..]).unwrap().is_none());
        assert!(matches!(decode_request(&[1, 0xff, 0xff]), Err(FrameError::Decode(_))));
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = read_frame(&mut bytes.as_slice());
        }
    }
}
