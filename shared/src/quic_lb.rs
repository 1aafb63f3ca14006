//! Routable QUIC connection IDs (QUIC-LB, draft-ietf-quic-load-balancers-19), sans-IO.
//!
//! A QUIC-LB connection ID is `First Octet (8) || Server ID || Nonce`, where the first
//! octet's three most significant bits are the *config rotation* codepoint (0–6; 7 means
//! "no configuration: route by the 5-tuple", draft §3.1–3.2) and its five other bits are
//! the self-described length or random. The server ID and nonce are either in plaintext
//! or encrypted with AES-128-ECB: one pass when they sum to exactly 16 octets (§5.4.1),
//! otherwise a four-round Feistel network whose round function is AES-128-ECB (§5.4.2).
//!
//! [`QuicLbConfig::decode`] is what the worker runs per short-header packet: it reads at
//! most the configured bytes of the DCID into stack buffers (no allocation) and returns
//! the server ID, or why the DCID is not routable. [`QuicLbConfig::encode`] is what a
//! server does; Spillway uses it only in tests and in test servers.

use aes::cipher::{generic_array::GenericArray, BlockDecrypt, BlockEncrypt, KeyInit};
use aes::Aes128;
use std::fmt;

/// The largest config rotation codepoint a configuration may use (draft §3.1).
pub const MAX_CODEPOINT: u8 = 6;
/// The codepoint of CIDs that carry no routing information (draft §3.2): always
/// unroutable, the packet takes the 5-tuple path.
pub const UNROUTABLE_CODEPOINT: u8 = 7;
/// Server ID length range in octets (draft §5.3: at least 1; the nonce takes at least 4
/// of the 19 octets a QUIC v1 CID has after the first octet).
pub const SERVER_ID_LEN_MIN: u8 = 1;
/// See [`SERVER_ID_LEN_MIN`].
pub const SERVER_ID_LEN_MAX: u8 = 15;
/// Nonce length range in octets (draft §5.3: at least 4; server ID + nonce ≤ 19).
pub const NONCE_LEN_MIN: u8 = 4;
/// See [`NONCE_LEN_MIN`].
pub const NONCE_LEN_MAX: u8 = 18;
/// The largest server ID length + nonce length (draft §5.3: a QUIC v1 CID has ≤ 20
/// octets, the first octet included).
pub const PLAINTEXT_LEN_MAX: u8 = 19;
/// The AES-128 key length in octets.
pub const KEY_LEN: usize = 16;

/// The config rotation codepoint of a connection ID: the first octet's three most
/// significant bits (draft §3.3). `None` for an empty CID.
pub fn codepoint(cid: &[u8]) -> Option<u8> {
    cid.first().map(|b| b >> 5)
}

/// A server ID: 1–15 octets (draft §5.1). Ordered and hashed by its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId {
    len: u8,
    bytes: [u8; SERVER_ID_LEN_MAX as usize],
}

impl ServerId {
    /// A server ID from its octets; `None` when there are none or more than 15.
    pub fn new(bytes: &[u8]) -> Option<ServerId> {
        if bytes.is_empty() || bytes.len() > usize::from(SERVER_ID_LEN_MAX) {
            return None;
        }
        let mut out = ServerId { len: bytes.len() as u8, bytes: [0; SERVER_ID_LEN_MAX as usize] };
        out.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(out)
    }

    /// A server ID from hex text (`"0a1b"`, an optional `0x` prefix, either case).
    /// Errors: odd length, a non-hex digit, or not 1–15 octets.
    pub fn from_hex(text: &str) -> Result<ServerId, String> {
        let bytes = parse_hex(text)?;
        ServerId::new(&bytes).ok_or_else(|| {
            format!("{} octets: a server ID has {SERVER_ID_LEN_MIN}–{SERVER_ID_LEN_MAX}", bytes.len())
        })
    }

    /// Its octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Its length in octets (1–15).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Never true (a server ID has at least one octet); present for clippy's `len` rule.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The server ID as one integer: its octets zero-padded to 15, then its length, read
    /// big-endian. Distinct server IDs give distinct keys, and no key is 0 (the length is
    /// at least 1). [`QuicLbConfig::decode_key`] gives the same integer straight from a DCID.
    #[inline]
    pub fn key(&self) -> u128 {
        let mut k = [0u8; 16];
        k[..SERVER_ID_LEN_MAX as usize].copy_from_slice(&self.bytes);
        k[15] = self.len;
        u128::from_be_bytes(k)
    }
}

/// The [`ServerId::key`] of the first `len` (1–15) octets of `head`, a big-endian
/// 16-octet window starting at the server ID.
#[inline(always)]
fn key_of_head(head: u128, len: usize) -> u128 {
    let len = len.clamp(1, SERVER_ID_LEN_MAX as usize);
    (head & (u128::MAX << (128 - 8 * len as u32))) | len as u128
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerId({self})")
    }
}

/// Bytes from hex text: an optional `0x` prefix, surrounding whitespace ignored.
/// Errors name the problem (odd length, the first non-hex character).
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let t = text.trim();
    let t = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
    if t.len() % 2 != 0 {
        return Err(format!("{} hex digits: an even number is needed (two per octet)", t.len()));
    }
    if let Some(c) = t.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(format!("{c:?} is not a hex digit"));
    }
    // All ASCII hex digits: every pair parses.
    Ok((0..t.len()).step_by(2).map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap_or(0)).collect())
}

/// The algorithm of a configuration (draft §5.2, §5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// No key: the server ID is in clear after the first octet.
    Plaintext,
    /// A key and server ID + nonce = 16 octets: one AES-128-ECB block (§5.4.1).
    SinglePass,
    /// A key and any other length: the four-pass Feistel network (§5.4.2).
    FourPass,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::Plaintext => "plaintext",
            Algorithm::SinglePass => "AES-128-ECB single pass",
            Algorithm::FourPass => "AES-128-ECB four-pass",
        })
    }
}

/// Why a DCID gives no server ID under a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The DCID is shorter than the configuration's 1 + server ID + nonce octets.
    TooShort {
        /// Octets the configuration needs.
        need: usize,
        /// Octets the DCID has.
        got: usize,
    },
    /// The DCID's codepoint is not this configuration's.
    OtherCodepoint(u8),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::TooShort { need, got } => write!(f, "the DCID has {got} octets, the configuration needs {need}"),
            DecodeError::OtherCodepoint(c) => write!(f, "codepoint {c} is not this configuration's"),
        }
    }
}

/// One QUIC-LB configuration: codepoint, lengths and (optionally) the AES-128 key.
/// The key schedule is expanded once here, so decoding allocates nothing.
#[derive(Clone)]
pub struct QuicLbConfig {
    codepoint: u8,
    server_id_len: u8,
    nonce_len: u8,
    /// What `cipher` and the lengths give (computed once: read per packet).
    algorithm: Algorithm,
    cipher: Option<Aes128>,
}

impl fmt::Debug for QuicLbConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuicLbConfig")
            .field("codepoint", &self.codepoint)
            .field("server_id_len", &self.server_id_len)
            .field("nonce_len", &self.nonce_len)
            .field("algorithm", &self.algorithm())
            .finish()
    }
}

impl QuicLbConfig {
    /// A configuration. Errors (as text naming the rule): codepoint above 6, server ID
    /// length outside 1–15, nonce length outside 4–18, or their sum above 19 (draft §5.3).
    pub fn new(codepoint: u8, server_id_len: u8, nonce_len: u8, key: Option<[u8; KEY_LEN]>) -> Result<Self, String> {
        if codepoint > MAX_CODEPOINT {
            return Err(format!("config rotation codepoint {codepoint}: must be 0–{MAX_CODEPOINT} (7 marks unroutable CIDs)"));
        }
        if !(SERVER_ID_LEN_MIN..=SERVER_ID_LEN_MAX).contains(&server_id_len) {
            return Err(format!("server ID length {server_id_len}: must be {SERVER_ID_LEN_MIN}–{SERVER_ID_LEN_MAX} octets"));
        }
        if !(NONCE_LEN_MIN..=NONCE_LEN_MAX).contains(&nonce_len) {
            return Err(format!("nonce length {nonce_len}: must be {NONCE_LEN_MIN}–{NONCE_LEN_MAX} octets"));
        }
        if server_id_len + nonce_len > PLAINTEXT_LEN_MAX {
            return Err(format!(
                "server ID length {server_id_len} + nonce length {nonce_len} = {}: must be at most {PLAINTEXT_LEN_MAX} (a QUIC v1 CID has at most 20 octets)",
                server_id_len + nonce_len
            ));
        }
        let cipher = key.map(|k| Aes128::new(GenericArray::from_slice(&k)));
        let algorithm = match (&cipher, server_id_len + nonce_len) {
            (None, _) => Algorithm::Plaintext,
            (Some(_), 16) => Algorithm::SinglePass,
            (Some(_), _) => Algorithm::FourPass,
        };
        Ok(QuicLbConfig { codepoint, server_id_len, nonce_len, algorithm, cipher })
    }

    /// The config rotation codepoint (0–6).
    pub fn codepoint(&self) -> u8 {
        self.codepoint
    }

    /// Server ID length in octets.
    pub fn server_id_len(&self) -> usize {
        usize::from(self.server_id_len)
    }

    /// Nonce length in octets.
    pub fn nonce_len(&self) -> usize {
        usize::from(self.nonce_len)
    }

    /// The CID length this configuration produces and needs: 1 + server ID + nonce.
    pub fn cid_len(&self) -> usize {
        1 + self.plaintext_len()
    }

    fn plaintext_len(&self) -> usize {
        usize::from(self.server_id_len + self.nonce_len)
    }

    /// Which of the draft's algorithms this configuration runs.
    #[inline]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The CID length, when `dcid` has at least that many octets and this configuration's
    /// codepoint; else why not.
    #[inline(always)]
    fn check(&self, dcid: &[u8]) -> Result<usize, DecodeError> {
        let need = self.cid_len();
        if dcid.len() < need {
            return Err(DecodeError::TooShort { need, got: dcid.len() });
        }
        match codepoint(dcid) {
            Some(c) if c == self.codepoint => Ok(need),
            Some(c) => Err(DecodeError::OtherCodepoint(c)),
            None => Err(DecodeError::TooShort { need, got: 0 }),
        }
    }

    /// The server ID a DCID carries under this configuration. Reads the first
    /// [`cid_len`](Self::cid_len) octets (a longer DCID's extra octets are the server's,
    /// §5.3 "Server Actions"); allocates nothing; cannot panic.
    pub fn decode(&self, dcid: &[u8]) -> Result<ServerId, DecodeError> {
        let need = self.check(dcid)?;
        let sid_len = self.server_id_len();
        let body = &dcid[1..need];
        let mut sid = [0u8; SERVER_ID_LEN_MAX as usize];
        match (&self.cipher, self.algorithm()) {
            (None, _) | (_, Algorithm::Plaintext) => sid[..sid_len].copy_from_slice(&body[..sid_len]),
            (Some(aes), Algorithm::SinglePass) => {
                let mut block = GenericArray::clone_from_slice(body);
                aes.decrypt_block(&mut block);
                sid[..sid_len].copy_from_slice(&block[..sid_len]);
            }
            (Some(aes), Algorithm::FourPass) => {
                let plain = feistel_decrypt(aes, body, sid_len);
                sid[..sid_len].copy_from_slice(&plain[..sid_len]);
            }
        }
        Ok(ServerId { len: self.server_id_len, bytes: sid })
    }

    /// [`decode`](Self::decode) as the server ID's [`ServerId::key`]: same results and
    /// errors, for the packet path. The server ID is read (or decrypted) as one 16-octet
    /// window and masked, not copied octet by octet (a variable-length copy through the
    /// stack, read back as wider words, stalls on store forwarding: it was most of a
    /// plaintext lookup's time). Allocates nothing; cannot panic.
    #[inline]
    pub fn decode_key(&self, dcid: &[u8]) -> Result<u128, DecodeError> {
        let need = self.check(dcid)?;
        let sid_len = self.server_id_len();
        // the 16 octets after the first, zero-padded when the DCID is shorter (the
        // padding lies past the server ID: it is masked off)
        let window = || match dcid.get(1..).and_then(|b| b.first_chunk::<16>()) {
            Some(w) => *w,
            None => {
                let mut w = [0u8; 16];
                let body = dcid.get(1..need).unwrap_or(&[]);
                if let Some(d) = w.get_mut(..body.len()) {
                    d.copy_from_slice(body);
                }
                w
            }
        };
        let head = match (&self.cipher, self.algorithm) {
            (None, _) | (_, Algorithm::Plaintext) => u128::from_be_bytes(window()),
            (Some(aes), Algorithm::SinglePass) => {
                // need = 17: the window is the whole block
                let mut block = GenericArray::from(window());
                aes.decrypt_block(&mut block);
                u128::from_be_bytes(block.into())
            }
            (Some(aes), Algorithm::FourPass) => {
                let plain = feistel_decrypt(aes, dcid.get(1..need).unwrap_or(&[]), sid_len);
                plain.first_chunk::<16>().map_or(0, |h| u128::from_be_bytes(*h))
            }
        };
        Ok(key_of_head(head, sid_len))
    }

    /// The CID a server with `server_id` issues with `nonce` (draft §5.3–5.4): the first
    /// octet is the codepoint and the self-described length (CID length − 1, §3.3).
    /// Returns the CID bytes in a 20-octet array and its length. Errors: the server ID or
    /// nonce length differs from the configuration's.
    pub fn encode(&self, server_id: &ServerId, nonce: &[u8]) -> Result<([u8; 20], usize), String> {
        if server_id.len() != self.server_id_len() {
            return Err(format!("server ID {server_id} has {} octets, the configuration {}", server_id.len(), self.server_id_len));
        }
        if nonce.len() != self.nonce_len() {
            return Err(format!("nonce has {} octets, the configuration {}", nonce.len(), self.nonce_len));
        }
        let len = self.cid_len();
        let mut cid = [0u8; 20];
        cid[0] = (self.codepoint << 5) | ((len - 1) as u8 & 0x1f);
        let pt_len = self.plaintext_len();
        cid[1..=server_id.len()].copy_from_slice(server_id.as_bytes());
        cid[1 + server_id.len()..len].copy_from_slice(nonce);
        match (&self.cipher, self.algorithm()) {
            (None, _) | (_, Algorithm::Plaintext) => {}
            (Some(aes), Algorithm::SinglePass) => {
                let block = GenericArray::from_mut_slice(&mut cid[1..17]);
                aes.encrypt_block(block);
            }
            (Some(aes), Algorithm::FourPass) => {
                let out = feistel_encrypt(aes, &cid[1..len]);
                cid[1..len].copy_from_slice(&out[..pt_len]);
            }
        }
        Ok((cid, len))
    }
}

/// Half of a Feistel block: up to 10 octets (half of 19, rounded up).
type Half = [u8; 10];

/// `truncate(AES_ECB(key, expand(len, pass, half)), half_len)` (draft §5.4.2).
fn round(aes: &Aes128, len: usize, pass: u8, half: &Half, half_len: usize) -> Half {
    let mut block = GenericArray::from([0u8; 16]);
    block[..half_len].copy_from_slice(&half[..half_len]);
    block[14] = len as u8;
    block[15] = pass;
    aes.encrypt_block(&mut block);
    let mut out = [0u8; 10];
    out[..half_len].copy_from_slice(&block[..half_len]);
    out
}

fn xor_into(dst: &mut Half, src: &Half) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

/// Splits `bytes` (5–19 octets) into left and right halves of `ceil(len/2)` octets; for
/// an odd length the middle octet's high nibble goes left and its low nibble right
/// (draft §5.4.2 step 2).
fn split(bytes: &[u8]) -> (Half, Half, usize) {
    let len = bytes.len();
    let half_len = len.div_ceil(2);
    let mut left = [0u8; 10];
    let mut right = [0u8; 10];
    left[..half_len].copy_from_slice(&bytes[..half_len]);
    right[..half_len].copy_from_slice(&bytes[len / 2..]);
    if len % 2 == 1 {
        left[half_len - 1] &= 0xf0;
        right[0] &= 0x0f;
    }
    (left, right, half_len)
}

/// The inverse of [`split`]: the halves concatenated, the middle nibbles merged.
fn join(left: &Half, right: &Half, len: usize) -> [u8; 19] {
    let half_len = len.div_ceil(2);
    let mut out = [0u8; 19];
    out[..half_len].copy_from_slice(&left[..half_len]);
    if len % 2 == 1 {
        out[half_len - 1] |= right[0];
        out[half_len..len].copy_from_slice(&right[1..half_len]);
    } else {
        out[half_len..len].copy_from_slice(&right[..half_len]);
    }
    out
}

fn clear_left(h: &mut Half, half_len: usize, odd: bool) {
    if odd {
        h[half_len - 1] &= 0xf0;
    }
}

fn clear_right(h: &mut Half, odd: bool) {
    if odd {
        h[0] &= 0x0f;
    }
}

/// Four-pass encryption of `plain` (server ID || nonce, 5–19 octets, never 16).
fn feistel_encrypt(aes: &Aes128, plain: &[u8]) -> [u8; 19] {
    let len = plain.len();
    let odd = len % 2 == 1;
    let (mut left, mut right, hl) = split(plain);
    xor_into(&mut right, &round(aes, len, 1, &left, hl));
    clear_right(&mut right, odd);
    xor_into(&mut left, &round(aes, len, 2, &right, hl));
    clear_left(&mut left, hl, odd);
    xor_into(&mut right, &round(aes, len, 3, &left, hl));
    clear_right(&mut right, odd);
    xor_into(&mut left, &round(aes, len, 4, &right, hl));
    clear_left(&mut left, hl, odd);
    join(&left, &right, len)
}

/// Four-pass decryption; stops after three passes when the server ID lies wholly in
/// the left half (draft §5.5.2). Only the first `sid_len` octets of the result are
/// meaningful after three passes.
fn feistel_decrypt(aes: &Aes128, cipher: &[u8], sid_len: usize) -> [u8; 19] {
    let len = cipher.len();
    let odd = len % 2 == 1;
    let (mut left, mut right, hl) = split(cipher);
    xor_into(&mut left, &round(aes, len, 4, &right, hl));
    clear_left(&mut left, hl, odd);
    xor_into(&mut right, &round(aes, len, 3, &left, hl));
    clear_right(&mut right, odd);
    xor_into(&mut left, &round(aes, len, 2, &right, hl));
    clear_left(&mut left, hl, odd);
    if sid_len > len / 2 {
        xor_into(&mut right, &round(aes, len, 1, &left, hl));
        clear_right(&mut right, odd);
    }
    join(&left, &right, len)
}

#[cfg(test)]
mod tests;
