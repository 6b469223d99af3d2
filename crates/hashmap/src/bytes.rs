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
            data[..b.len()].copy_from_slice(b);
            Bytes::Inline {
                len: b.len() as u8,
                data,
            }
        } else {
            Bytes::Heap(b.to_vec())
        }
    }

    /// Takes a vector (moved inline, and freed, when short).
    #[inline]
    pub(crate) fn from_vec(v: Vec<u8>) -> Self {
        if v.len() <= INLINE {
            Self::new(&v)
        } else {
            Bytes::Heap(v)
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
                data[..b.len()].copy_from_slice(b);
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
        assert_eq!(Bytes::from_vec(long.clone()).as_slice(), &long[..]);
        assert!(matches!(Bytes::from_vec(vec![1, 2]), Bytes::Inline { .. }));
        assert_eq!(Bytes::new(&long).into_vec(), long);
        assert_eq!(Bytes::new(b"q").into_vec(), b"q");
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
