//! The Internet checksum of IPv4, ICMP and UDP headers (RFC 1071).
//!
//! Hand-written on purpose (docs/decisions.md, "Packet formats hand-written"): it runs
//! on a 20-byte header per encapsulated packet and must not allocate or branch on data.
//!
//! RFC 1071 §1, the algorithm, beside the code that does it:
//!
//! > (1) Adjacent octets to be checksummed are paired to form 16-bit integers, and the 1's
//! >     complement sum of these 16-bit integers is formed.
//!
//! → [`sum_words`] (big-endian pairs; an odd last octet is padded with a zero octet, §4.1).
//!
//! > (2) To generate a checksum, the checksum field itself is cleared, the 16-bit 1's
//! >     complement sum is computed over the octets concerned, and the 1's complement of
//! >     this sum is placed in the checksum field.
//!
//! → [`checksum`] (`!fold(sum)`); the callers clear the field first.
//!
//! > (3) To check a checksum, the 1's complement sum is computed over the same set of
//! >     octets, including the checksum field. If the result is all 1 bits (-0 in 1's
//! >     complement arithmetic), the check succeeds.
//!
//! → `checksum(header) == 0` on a header with its checksum filled in.
//!
//! §2(B) "Deferred carries": the sum is kept in a 64-bit accumulator and the carries are
//! folded back once at the end ([`fold`]), which gives the same result as adding each carry
//! at once (end-around carry is associative).

/// The Internet checksum of `data` (RFC 1071 §1 step 2): the one's complement of the one's
/// complement sum of its big-endian 16-bit words; an odd trailing byte is padded with zero.
///
/// Returns the value to store (host order; write it with `to_be_bytes`). Over a header
/// whose checksum field is already filled in, the result is 0 when the checksum is valid.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum_words(data, 0))
}

/// Adds `data` as big-endian 16-bit words to `acc` (RFC 1071 §1 step 1, §4.1: an odd last
/// byte is the high byte of a word whose low byte is 0). Carries are deferred (§2(B)): a
/// `u64` holds the sum of 2^48 words, far beyond any packet.
#[inline]
pub fn sum_words(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u64::from(*b) << 8;
    }
    acc
}

/// Folds the deferred carries into 16 bits (RFC 1071 §4.1:
/// `while (sum>>16) sum = (sum & 0xffff) + (sum >> 16);`).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive reference: one's complement addition word by word with the end-around carry
    /// applied at every step (RFC 1071 §1, no deferred carries), on a zero-padded copy.
    fn reference(data: &[u8]) -> u16 {
        let mut padded = data.to_vec();
        if padded.len() % 2 == 1 {
            padded.push(0);
        }
        let mut sum: u16 = 0;
        for w in padded.chunks(2) {
            let (s, carry) = sum.overflowing_add(u16::from_be_bytes([w[0], w[1]]));
            sum = s + u16::from(carry);
        }
        !sum
    }

    #[test]
    fn rfc1071_section3_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), !0xddf2u16);
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(checksum(&[0xff]), !0xff00u16);
    }

    proptest::proptest! {
        /// Differential test against the naive per-word end-around-carry sum.
        #[test]
        fn matches_naive_reference(data in proptest::collection::vec(proptest::num::u8::ANY, 0..1600)) {
            proptest::prop_assert_eq!(checksum(&data), reference(&data));
        }

        /// RFC 1071 §1 step 3: a block with its checksum appended verifies to zero.
        #[test]
        fn filled_checksum_verifies(mut data in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if data.len() % 2 == 1 {
                data.push(0);
            }
            let c = checksum(&data);
            data.extend_from_slice(&c.to_be_bytes());
            proptest::prop_assert_eq!(checksum(&data), 0);
        }
    }
}
