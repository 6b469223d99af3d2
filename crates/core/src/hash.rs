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

/// A machine word Murmur3's finalizer mixes (`u32` for x86-32, `u64` for x64-128).
trait Word: Copy + std::ops::BitXor<Output = Self> + std::ops::Shr<u32, Output = Self> {
    fn wrapping_mul(self, m: Self) -> Self;
}

impl Word for u32 {
    #[inline(always)]
    fn wrapping_mul(self, m: u32) -> u32 {
        u32::wrapping_mul(self, m)
    }
}

impl Word for u64 {
    #[inline(always)]
    fn wrapping_mul(self, m: u64) -> u64 {
        u64::wrapping_mul(self, m)
    }
}

/// Murmur3's finalizer ("fmix"): `h ^= h >> s0; h *= m0; h ^= h >> s1; h *= m1; h ^= h >> s2`,
/// the shifts `s` and multipliers `m` those of the word size.
#[inline(always)]
fn fmix<W: Word>(h: W, s: [u32; 3], m: [W; 2]) -> W {
    let h = (h ^ (h >> s[0])).wrapping_mul(m[0]);
    let h = (h ^ (h >> s[1])).wrapping_mul(m[1]);
    h ^ (h >> s[2])
}

#[inline(always)]
fn fmix32(h: u32) -> u32 {
    fmix(h, [16, 13, 16], [0x85eb_ca6b, 0xc2b2_ae35])
}

#[inline]
fn fmix64(k: u64) -> u64 {
    fmix(k, [33, 33, 33], [0xff51_afd7_ed55_8ccd, 0xc4ce_b9fe_1a85_ec53])
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

/// Murmur3 x64-128's scrambling of one 8-byte block of a lane: times `c[0]`, rotated left
/// by `r`, times `c[1]`.
#[inline(always)]
fn scramble64(k: u64, c: [u64; 2], r: u32) -> u64 {
    k.wrapping_mul(c[0]).rotate_left(r).wrapping_mul(c[1])
}

/// Murmur3 x64-128's update of a lane `h` (its block already mixed in): rotated left by `r`,
/// plus the `other` lane, times 5, plus `n`.
#[inline(always)]
fn mix_lane(h: u64, r: u32, other: u64, n: u64) -> u64 {
    h.rotate_left(r).wrapping_add(other).wrapping_mul(5).wrapping_add(n)
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
        let k1 = u64::from_le_bytes(block[0..8].try_into().unwrap_or([0; 8]));
        let k2 = u64::from_le_bytes(block[8..16].try_into().unwrap_or([0; 8]));
        h1 = mix_lane(h1 ^ scramble64(k1, [C1, C2], 31), 27, h2, 0x52dc_e729);
        h2 = mix_lane(h2 ^ scramble64(k2, [C2, C1], 33), 31, h1, 0x3849_5ab5);
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
        h2 ^= scramble64(k2, [C2, C1], 33);
    }
    if !tail.is_empty() {
        h1 ^= scramble64(k1, [C1, C2], 31);
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
