//! Hash functions whose exact output is part of statekit's contract.
//!
//! * [`murmur3_x86_32`] assigns keys to key groups (see [`crate::keygroup`]).
//! * [`murmur3_x64_128`] turns an operator uid into its [`crate::OperatorId`], byte for byte the
//!   value Flink's `StreamGraphHasherV2` computes (Guava `murmur3_128`, seed 0, `asBytes()`).
//! * [`flink_murmur_hash_int`] and [`java_string_hash_code`] reproduce Flink's key-group
//!   assignment for keys whose Java `hashCode` is known, for interoperability tools.
//!
//! These functions never change: a change would move every key to another key group.

const C1_32: u32 = 0xcc9e_2d51;
const C2_32: u32 = 0x1b87_3593;

/// Murmur3's scrambling of one 4-byte block.
#[inline(always)]
fn scramble(k1: u32) -> u32 {
    k1.wrapping_mul(C1_32).rotate_left(15).wrapping_mul(C2_32)
}

/// Murmur3's mixing of one full 4-byte block into the state `h1`.
#[inline(always)]
fn mix_block(h1: u32, k1: u32) -> u32 {
    (h1 ^ scramble(k1))
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

#[inline(always)]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// MurmurHash3, x86 32-bit variant, over `data` with `seed`.
///
/// ```
/// assert_eq!(statekit_core::hash::murmur3_x86_32(b"hello", 0), 0x248b_fa47);
/// ```
#[inline]
pub fn murmur3_x86_32(data: &[u8], seed: u32) -> u32 {
    let mut h1 = seed;
    let mut chunks = data.chunks_exact(4);
    for block in &mut chunks {
        h1 = mix_block(h1, u32::from_le_bytes([block[0], block[1], block[2], block[3]]));
    }
    let tail = chunks.remainder();
    let mut k1: u32 = 0;
    for (i, b) in tail.iter().enumerate() {
        k1 ^= u32::from(*b) << (8 * i);
    }
    if !tail.is_empty() {
        h1 ^= scramble(k1);
    }
    h1 ^= data.len() as u32;
    fmix32(h1)
}

/// [`murmur3_x86_32`] of exactly eight bytes, with the two blocks unrolled (no loop).
///
/// ```
/// use statekit_core::hash::{murmur3_x86_32, murmur3_x86_32_of8};
/// let k = 42i64.to_be_bytes();
/// assert_eq!(murmur3_x86_32_of8(&k, 0), murmur3_x86_32(&k, 0));
/// ```
#[inline(always)]
pub fn murmur3_x86_32_of8(data: &[u8; 8], seed: u32) -> u32 {
    let [a0, a1, a2, a3, b0, b1, b2, b3] = *data;
    let h1 = mix_block(seed, u32::from_le_bytes([a0, a1, a2, a3]));
    let h1 = mix_block(h1, u32::from_le_bytes([b0, b1, b2, b3]));
    fmix32(h1 ^ 8)
}

/// MurmurHash3, x64 128-bit variant, returned as Guava's `HashCode.asBytes()`:
/// `h1` little-endian followed by `h2` little-endian.
///
/// ```
/// let id = statekit_core::hash::murmur3_x64_128(b"hello", 0);
/// assert_eq!(id[0], 0x02);
/// ```
pub fn murmur3_x64_128(data: &[u8], seed: u64) -> [u8; 16] {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let mut h1 = seed;
    let mut h2 = seed;
    let mut chunks = data.chunks_exact(16);
    for block in &mut chunks {
        let mut k1 = u64::from_le_bytes(block[0..8].try_into().unwrap_or([0; 8]));
        let mut k2 = u64::from_le_bytes(block[8..16].try_into().unwrap_or([0; 8]));
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = chunks.remainder();
    let mut k1: u64 = 0;
    let mut k2: u64 = 0;
    for (i, b) in tail.iter().enumerate() {
        if i < 8 {
            k1 ^= u64::from(*b) << (8 * i);
        } else {
            k2 ^= u64::from(*b) << (8 * (i - 8));
        }
    }
    if tail.len() > 8 {
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
    }
    if !tail.is_empty() {
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&h1.to_le_bytes());
    out[8..].copy_from_slice(&h2.to_le_bytes());
    out
}

/// Flink's `MathUtils.murmurHash(int)`: one murmur3 block over a Java `hashCode`, made
/// non-negative (negative values are negated, `i32::MIN` maps to 0).
pub fn flink_murmur_hash_int(code: i32) -> i32 {
    let mut k = code as u32;
    k = k.wrapping_mul(C1_32);
    k = k.rotate_left(15);
    k = k.wrapping_mul(C2_32);
    k = k.rotate_left(13);
    k = k.wrapping_mul(5).wrapping_add(0xe654_6b64);
    k ^= 4;
    let h = fmix32(k) as i32;
    if h >= 0 {
        h
    } else if h != i32::MIN {
        -h
    } else {
        0
    }
}

/// Java's `String.hashCode()` (31-polynomial over UTF-16 code units).
pub fn java_string_hash_code(s: &str) -> i32 {
    let mut h: i32 = 0;
    for unit in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn murmur32_vectors() {
        assert_eq!(murmur3_x86_32(b"", 0), 0);
        assert_eq!(murmur3_x86_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_x86_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(
            murmur3_x86_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
    }

    #[test]
    fn murmur128_vectors_match_guava() {
        // Guava: Hashing.murmur3_128().hashString(s, UTF_8).toString()
        assert_eq!(hex(&murmur3_x64_128(b"", 0)), "00000000000000000000000000000000");
        assert_eq!(hex(&murmur3_x64_128(b"hello", 0)), "029bbd41b3a7d8cb191dae486a901e5b");
        assert_eq!(
            hex(&murmur3_x64_128(b"The quick brown fox jumps over the lazy dog", 0)),
            "6c1b07bc7bbc4be347939ac4a93c437a"
        );
    }

    #[test]
    fn java_hash() {
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("hello"), 99_162_322);
    }

    #[test]
    fn flink_murmur_is_non_negative() {
        for c in [i32::MIN, -1, 0, 1, 97, i32::MAX, 99_162_322] {
            assert!(flink_murmur_hash_int(c) >= 0);
        }
    }
}
