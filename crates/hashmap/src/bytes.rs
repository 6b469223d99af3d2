//! [`Bytes`]: a byte string stored inline when short (values, list elements, map user keys).
//!
//! Most state values are small (counters, timestamps, short tuples). Keeping them inside the
//! table slot saves an allocation on insert, a cache miss on read, and makes copying a shard
//! for copy-on-write a plain memory copy for such entries.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;

/// Longest byte string kept inline (the enum stays 24 bytes, the size of a `Vec`).
pub(crate) const INLINE: usize = 15;

/// Copies `src` into `dst` (which must have the same length). Lengths up to 32 are done with
/// at most two overlapping fixed-size moves instead of a `memcpy` call: state keys and values
/// are mostly that short, and the library call dominated copying them.
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    debug_assert_eq!(dst.len(), n);
    if n >= 16 {
        if n <= 32 {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..n].copy_from_slice(&src[n - 16..n]);
        } else {
            dst.copy_from_slice(src);
        }
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..n].copy_from_slice(&src[n - 8..n]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..n].copy_from_slice(&src[n - 4..n]);
    } else if n > 0 {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

/// Asks the CPU to start loading (up to 512 bytes of) `bytes` into the cache. A visit reads
/// values in key order, which is random in memory: without this, each value's cache misses
/// were waited for in turn, and copying values out was most of writing a savepoint.
#[inline(always)]
pub(crate) fn prefetch(bytes: &[u8]) {
    let mut off = 0;
    while off < bytes.len().min(512) {
        prefetch_line(&bytes[off..]);
        off += 64;
    }
}

/// Hints the CPU to load the two cache lines at `at` and `at + 64` of `bytes` (nothing when
/// `at` is past the end): the first two lines of a group of slots, without a bounds check
/// per line.
#[inline(always)]
pub(crate) fn prefetch_two_lines(bytes: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < bytes.len() {
        let p = bytes.as_ptr().wrapping_add(at);
        // SAFETY: `_mm_prefetch` is a hint with no architectural effect: it never faults,
        // whatever the address (the second line may lie past the end of `bytes`), and reads
        // nothing into the program. `wrapping_add` makes no claim about the address. SSE is
        // part of the x86_64 baseline.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

/// Asks the CPU to start loading the cache line that holds the start of `bytes` (nothing for
/// an empty slice).
#[inline(always)]
pub(crate) fn prefetch_line(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if !bytes.is_empty() {
        // SAFETY: `_mm_prefetch` is a hint with no architectural effect: it never faults,
        // whatever the address, and reads nothing into the program. The address is inside
        // `bytes` anyway, and SSE is part of the x86_64 baseline.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(bytes.as_ptr().cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Byte-string equality without a `memcmp` call for lengths up to 32 (user keys, short keys).
#[inline(always)]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    #[inline(always)]
    fn word(s: &[u8], at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    }
    #[inline(always)]
    fn half(s: &[u8], at: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_ne_bytes(w)
    }
    #[inline(always)]
    fn wide(s: &[u8], at: usize) -> u128 {
        let mut w = [0u8; 16];
        w.copy_from_slice(&s[at..at + 16]);
        u128::from_ne_bytes(w)
    }
    if n > 32 {
        a == b
    } else if n >= 16 {
        (wide(a, 0) ^ wide(b, 0)) | (wide(a, n - 16) ^ wide(b, n - 16)) == 0
    } else if n >= 8 {
        (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0
    } else if n >= 4 {
        (half(a, 0) ^ half(b, 0)) | (half(a, n - 4) ^ half(b, n - 4)) == 0
    } else {
        n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1])
    }
}

/// A byte string: inline up to [`INLINE`] bytes, else a `Vec` whose capacity is reused by
/// [`Bytes::set`].
#[derive(Clone)]
pub(crate) enum Bytes {
    /// Short: `data[..len]`.
    Inline { len: u8, data: [u8; INLINE] },
    /// Long (or once long: the buffer is kept for reuse).
    Heap(Vec<u8>),
}

impl Bytes {
    /// A copy of `b`.
    #[inline]
    pub(crate) fn new(b: &[u8]) -> Self {
        if b.len() <= INLINE {
            let mut data = [0u8; INLINE];
            copy_short(&mut data[..b.len()], b);
            Bytes::Inline {
                len: b.len() as u8,
                data,
            }
        } else {
            Bytes::Heap(b.to_vec())
        }
    }

    /// Replaces the content without allocating when it fits inline or in the existing buffer.
    #[inline]
    pub(crate) fn set(&mut self, b: &[u8]) {
        match self {
            Bytes::Heap(v) if v.capacity() >= b.len() => {
                v.clear();
                v.extend_from_slice(b);
            }
            Bytes::Inline { len, data } if b.len() <= INLINE => {
                copy_short(&mut data[..b.len()], b);
                *len = b.len() as u8;
            }
            Bytes::Heap(v) if b.len() > INLINE => {
                v.clear();
                v.extend_from_slice(b);
            }
            _ => *self = Self::new(b),
        }
    }

    /// The bytes.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, data } => &data[..usize::from(*len)],
            Bytes::Heap(v) => v,
        }
    }

    /// The bytes as a vector.
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Bytes::Heap(v) => v,
            inline => inline.as_slice().to_vec(),
        }
    }

    /// Heap bytes held beyond the inline storage.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Bytes::Inline { .. } => 0,
            Bytes::Heap(v) => v.capacity(),
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for Bytes {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Bytes {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bytes {}

impl PartialOrd for Bytes {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bytes {
    /// The order of the byte slices (so `Borrow<[u8]>` lookups agree).
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_a_vec() {
        assert_eq!(std::mem::size_of::<Bytes>(), std::mem::size_of::<Vec<u8>>());
    }

    #[test]
    fn set_round_trips_across_representations() {
        let long: Vec<u8> = (0..40).collect();
        let mut b = Bytes::new(b"abc");
        assert!(matches!(b, Bytes::Inline { .. }));
        assert_eq!(b.as_slice(), b"abc");
        b.set(&long);
        assert!(matches!(b, Bytes::Heap(_)));
        assert_eq!(b.as_slice(), &long[..]);
        // Short content reuses the heap buffer.
        b.set(b"xy");
        assert!(matches!(b, Bytes::Heap(_)));
        assert_eq!(b.as_slice(), b"xy");
        b.set(b"");
        assert_eq!(b.as_slice(), b"");
        let full = [7u8; INLINE];
        let mut c = Bytes::new(b"");
        c.set(&full);
        assert!(matches!(c, Bytes::Inline { .. }));
        assert_eq!(c.as_slice(), &full[..]);
        assert_eq!(Bytes::new(&long).into_vec(), long);
        assert_eq!(Bytes::new(b"q").into_vec(), b"q");
    }

    #[test]
    fn short_copy_and_compare() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=40 {
            let mut dst = vec![0u8; n];
            copy_short(&mut dst, &src[..n]);
            assert_eq!(dst, &src[..n]);
            assert!(bytes_eq(&src[..n], &dst));
            for i in 0..n {
                let mut other = dst.clone();
                other[i] ^= 0x80;
                assert!(!bytes_eq(&src[..n], &other), "n {n} i {i}");
            }
            if n > 0 {
                assert!(!bytes_eq(&src[..n], &src[..n - 1]));
            }
            assert_eq!(Bytes::new(&src[..n]).as_slice(), &src[..n]);
        }
    }

    #[test]
    fn order_is_byte_order() {
        let mut v = [
            Bytes::new(b"b"),
            Bytes::new(&[b'a'; 20]),
            Bytes::new(b""),
            Bytes::new(b"a"),
        ];
        v.sort();
        let s: Vec<&[u8]> = v.iter().map(|b| b.as_slice()).collect();
        assert_eq!(s, vec![&b""[..], b"a", &[b'a'; 20][..], b"b"]);
    }
}
