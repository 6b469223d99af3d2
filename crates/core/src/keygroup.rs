//! Key groups: the unit in which keyed state is split, moved and rescaled.
//!
//! A job's *max parallelism* `M` (1..=32768, default 128) fixes the number of key groups.
//! Every key belongs to exactly one key group, and subtask `i` of `p` owns a contiguous
//! [`KeyGroupRange`]; both formulas are Flink's, so ranges match Flink's for the same
//! `(M, p, i)`.
//!
//! Key → key group (statekit's stable, documented rule, see `docs/format.md`):
//! `kg = murmur3_x86_32(serialized key bytes, seed 0) mod M` ([`key_group_for_key`]).
//! Flink itself hashes the Java `hashCode` of the key object; [`flink_key_group_for_hash_code`]
//! reproduces that for tools that need Flink's assignment.

use crate::error::ParallelismError;
use crate::hash::{flink_murmur_hash_int, murmur3_x86_32};
use crate::StateError;
use std::fmt;

/// Largest max parallelism (and so number of key groups) statekit accepts: 2^15, as in Flink.
pub const UPPER_BOUND_MAX_PARALLELISM: u32 = 1 << 15;
/// Default max parallelism when none is configured.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// Checks `1 <= max_parallelism <= 32768`.
pub fn check_max_parallelism(max_parallelism: u32) -> Result<(), StateError> {
    if max_parallelism == 0 || max_parallelism > UPPER_BOUND_MAX_PARALLELISM {
        return Err(StateError::InvalidParallelism(ParallelismError::MaxParallelism {
            max_parallelism,
            upper_bound: UPPER_BOUND_MAX_PARALLELISM,
        }));
    }
    Ok(())
}

/// Checks `1 <= parallelism <= max_parallelism` (and the max parallelism itself).
pub fn check_parallelism(parallelism: u32, max_parallelism: u32) -> Result<(), StateError> {
    check_max_parallelism(max_parallelism)?;
    if parallelism == 0 || parallelism > max_parallelism {
        return Err(StateError::InvalidParallelism(ParallelismError::Parallelism {
            parallelism,
            max_parallelism,
        }));
    }
    Ok(())
}

/// Flink's default max parallelism for a given parallelism:
/// `min(max(next_power_of_two(p + p/2), 128), 32768)`.
pub fn default_max_parallelism(parallelism: u32) -> u32 {
    let p = u64::from(parallelism);
    let wanted = (p + p / 2).max(1).next_power_of_two();
    wanted.clamp(128, u64::from(UPPER_BOUND_MAX_PARALLELISM)) as u32
}

/// The key group of a serialized key: `murmur3_x86_32(key, 0) % max_parallelism`.
///
/// `max_parallelism` must be in 1..=32768 (checked by callers when they configure it).
#[inline]
pub fn key_group_for_key(key: &[u8], max_parallelism: u32) -> u32 {
    murmur3_x86_32(key, 0) % max_parallelism.max(1)
}

/// Flink's assignment for a key whose Java `hashCode()` is `hash_code`:
/// `murmurHash(hashCode) % maxParallelism`.
pub fn flink_key_group_for_hash_code(hash_code: i32, max_parallelism: u32) -> u32 {
    (flink_murmur_hash_int(hash_code) as u32) % max_parallelism.max(1)
}

/// The subtask (operator index) that owns `key_group` at `parallelism`: `kg * p / M`.
pub fn subtask_for_key_group(max_parallelism: u32, parallelism: u32, key_group: u32) -> u32 {
    (u64::from(key_group) * u64::from(parallelism) / u64::from(max_parallelism.max(1))) as u32
}

/// A contiguous, possibly empty, range of key groups `[start, end]` (inclusive, as Flink
/// prints it). Stored as a half-open interval so the empty range needs no sentinel.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyGroupRange {
    start: u32,
    end_exclusive: u32,
}

impl KeyGroupRange {
    /// The empty range.
    pub const EMPTY: KeyGroupRange = KeyGroupRange {
        start: 0,
        end_exclusive: 0,
    };

    /// `[start, end]`, both inclusive. Returns [`KeyGroupRange::EMPTY`] when `end < start`.
    pub fn new(start: u32, end_inclusive: u32) -> Self {
        if end_inclusive < start {
            Self::EMPTY
        } else {
            KeyGroupRange {
                start,
                end_exclusive: end_inclusive + 1,
            }
        }
    }

    /// Every key group of a job with this max parallelism: `[0, M-1]`.
    pub fn all(max_parallelism: u32) -> Self {
        Self::new(0, max_parallelism.saturating_sub(1))
    }

    /// The range subtask `index` of `parallelism` owns, with Flink's formula:
    /// `start = ceil(i*M/p)`, `end = floor(((i+1)*M - 1)/p)`.
    pub fn for_subtask(max_parallelism: u32, parallelism: u32, index: u32) -> Self {
        let m = u64::from(max_parallelism);
        let p = u64::from(parallelism.max(1));
        let i = u64::from(index);
        let start = (i * m).div_ceil(p);
        let end = ((i + 1) * m).saturating_sub(1) / p;
        if end < start || m == 0 {
            Self::EMPTY
        } else {
            Self::new(start as u32, end as u32)
        }
    }

    /// First key group (meaningless for an empty range).
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Last key group, inclusive; `None` for the empty range.
    pub fn end_inclusive(&self) -> Option<u32> {
        if self.is_empty() {
            None
        } else {
            Some(self.end_exclusive - 1)
        }
    }

    /// One past the last key group.
    pub fn end_exclusive(&self) -> u32 {
        self.end_exclusive
    }

    /// Number of key groups.
    pub fn len(&self) -> u32 {
        self.end_exclusive - self.start
    }

    /// True when the range holds no key group.
    pub fn is_empty(&self) -> bool {
        self.end_exclusive <= self.start
    }

    /// True when `key_group` lies in the range.
    pub fn contains(&self, key_group: u32) -> bool {
        key_group >= self.start && key_group < self.end_exclusive
    }

    /// The key groups both ranges hold.
    pub fn intersection(&self, other: &KeyGroupRange) -> KeyGroupRange {
        let start = self.start.max(other.start);
        let end = self.end_exclusive.min(other.end_exclusive);
        if end <= start {
            Self::EMPTY
        } else {
            KeyGroupRange {
                start,
                end_exclusive: end,
            }
        }
    }

    /// Iterates the key groups in ascending order.
    pub fn iter(&self) -> std::ops::Range<u32> {
        self.start..self.end_exclusive.max(self.start)
    }
}

impl fmt::Debug for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.end_inclusive() {
            None => write!(f, "[empty]"),
            Some(end) => write!(f, "[{}, {}]", self.start, end),
        }
    }
}

impl IntoIterator for KeyGroupRange {
    type Item = u32;
    type IntoIter = std::ops::Range<u32>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn flink_example_ranges() {
        assert_eq!(KeyGroupRange::for_subtask(128, 3, 0), KeyGroupRange::new(0, 42));
        assert_eq!(KeyGroupRange::for_subtask(128, 3, 1), KeyGroupRange::new(43, 85));
        assert_eq!(KeyGroupRange::for_subtask(128, 3, 2), KeyGroupRange::new(86, 127));
        assert_eq!(KeyGroupRange::for_subtask(128, 1, 0), KeyGroupRange::all(128));
    }

    #[test]
    fn default_max_parallelism_matches_flink() {
        assert_eq!(default_max_parallelism(1), 128);
        assert_eq!(default_max_parallelism(85), 128);
        assert_eq!(default_max_parallelism(86), 256);
        assert_eq!(default_max_parallelism(100_000), 32768);
    }

    #[test]
    fn parallelism_checks() {
        assert!(check_max_parallelism(0).is_err());
        assert!(check_max_parallelism(32769).is_err());
        assert!(check_max_parallelism(32768).is_ok());
        assert!(check_parallelism(129, 128).is_err());
        assert!(check_parallelism(128, 128).is_ok());
    }

    proptest! {
        #[test]
        fn ranges_partition_all_key_groups(m in 1u32..=32768, p_seed in any::<u32>()) {
            let p = 1 + p_seed % m;
            let mut next = 0;
            for i in 0..p {
                let r = KeyGroupRange::for_subtask(m, p, i);
                prop_assert!(!r.is_empty());
                prop_assert_eq!(r.start(), next);
                for kg in [r.start(), r.end_exclusive() - 1] {
                    prop_assert_eq!(subtask_for_key_group(m, p, kg), i);
                }
                next = r.end_exclusive();
            }
            prop_assert_eq!(next, m);
        }

        #[test]
        fn key_group_in_range(key in proptest::collection::vec(any::<u8>(), 0..40), m in 1u32..=32768) {
            prop_assert!(key_group_for_key(&key, m) < m);
        }
    }
}
