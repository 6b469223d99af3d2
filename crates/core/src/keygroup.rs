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
//!
//! Which of the two rules a snapshot's keys follow is its [`KeyGroupScheme`]: state written by
//! statekit follows statekit's rule, state read from Apache Flink keeps Flink's, and the scheme
//! travels with the data (the operator record of `_metadata`, every view, every backend) so
//! that every path — a point lookup, a rescale, a conversion — computes the group the data
//! was put in. [`KeyGroupAssigner`] is a scheme fixed to one key type and max parallelism.

use crate::error::ParallelismError;
use crate::hash::{flink_murmur_hash_int, murmur3_x86_32};
use crate::{StateError, TypeSchema};
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

/// The rule that maps a key to its key group: a property of the data, recorded per operator.
///
/// ```
/// use statekit_core::{keygroup::KeyGroupScheme, TypeSchema};
/// // Flink puts the String key "a" in key group 81 of 128; statekit's own rule gives 50.
/// assert_eq!(KeyGroupScheme::Flink.key_group(b"a", &TypeSchema::Utf8, 128)?, 81);
/// assert_eq!(KeyGroupScheme::Statekit.key_group(b"a", &TypeSchema::Utf8, 128)?, 50);
/// # Ok::<(), statekit_core::keygroup::KeyGroupError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyGroupScheme {
    /// statekit's rule: `murmur3_x86_32(serialized key, seed 0) % max_parallelism`
    /// ([`key_group_for_key`]); defined for keys of every type.
    #[default]
    Statekit,
    /// Apache Flink's rule: `murmurHash(key.hashCode()) % maxParallelism`, with the `hashCode`
    /// Java computes for the key's type. statekit computes it for `String` and `Character`
    /// ([`TypeSchema::Utf8`]), `Integer`, `Short` and `Byte` ([`TypeSchema::I32`]), `Long`
    /// ([`TypeSchema::I64`]), `Boolean` ([`TypeSchema::Bool`]), `Float` ([`TypeSchema::F32`])
    /// and `Double` ([`TypeSchema::F64`]) keys; other key types are
    /// [`KeyGroupError::UnsupportedKeyType`].
    Flink,
}

impl KeyGroupScheme {
    /// The scheme's name as `_metadata` dumps and `--json` print it: `statekit` or `flink`.
    pub fn name(self) -> &'static str {
        match self {
            KeyGroupScheme::Statekit => "statekit",
            KeyGroupScheme::Flink => "flink",
        }
    }

    /// True when the scheme can place keys of this type.
    pub fn supports(self, key_schema: &TypeSchema) -> bool {
        match self {
            KeyGroupScheme::Statekit => true,
            KeyGroupScheme::Flink => JavaHash::of(key_schema).is_some(),
        }
    }

    /// The key group of `key` (serialized as `key_schema` says) under this scheme.
    /// Nothing is allocated: callers may use it per key (a loop over many keys of one type
    /// may also hold a [`KeyGroupScheme::assigner`]).
    pub fn key_group(self, key: &[u8], key_schema: &TypeSchema, max_parallelism: u32) -> Result<u32, KeyGroupError> {
        place(self.rule(key_schema), key, key_schema, max_parallelism.max(1))
    }

    /// The rule this scheme places keys of `key_schema` by.
    fn rule(self, key_schema: &TypeSchema) -> Rule {
        match self {
            KeyGroupScheme::Statekit => Rule::Statekit,
            KeyGroupScheme::Flink => JavaHash::of(key_schema).map_or(Rule::Unsupported, Rule::Flink),
        }
    }

    /// This scheme fixed to one key type and max parallelism. Under Flink's rule for a key
    /// type statekit cannot hash ([`KeyGroupScheme::supports`] is false), every
    /// [`KeyGroupAssigner::key_group`] fails with [`KeyGroupError::UnsupportedKeyType`]: the
    /// data still reads, restores and converts in its given key groups, but no key can be
    /// placed anew.
    pub fn assigner(self, key_schema: &TypeSchema, max_parallelism: u32) -> KeyGroupAssigner {
        KeyGroupAssigner {
            rule: self.rule(key_schema),
            key_schema: key_schema.clone(),
            max_parallelism: max_parallelism.max(1),
        }
    }
}

impl fmt::Display for KeyGroupScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KeyGroupScheme {
    type Err = KeyGroupError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "statekit" => Ok(KeyGroupScheme::Statekit),
            "flink" => Ok(KeyGroupScheme::Flink),
            _ => Err(KeyGroupError::UnknownScheme { name: s.to_string() }),
        }
    }
}

/// Why a key has no key group under a scheme.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyGroupError {
    /// Flink's rule needs the key's Java `hashCode`, which statekit does not compute for this type.
    #[error(
        "Apache Flink's key-group rule hashes the key's Java hashCode, which statekit computes for \
         String, Character, Integer, Short, Byte, Long, Boolean, Float and Double keys, not for {key_type} keys"
    )]
    UnsupportedKeyType {
        /// The key type ([`TypeSchema`]'s display).
        key_type: String,
    },
    /// The key's bytes are not a value of its type (e.g. not UTF-8 for a string key).
    #[error("a key of {len} bytes is not a {key_type} value, so its key group under Flink's rule is undefined")]
    MalformedKey {
        /// The key type ([`TypeSchema`]'s display).
        key_type: String,
        /// The key's length in bytes.
        len: usize,
    },
    /// A scheme name that is neither `statekit` nor `flink`.
    #[error("unknown key-group scheme {name:?} (known: statekit, flink)")]
    UnknownScheme {
        /// The name given.
        name: String,
    },
}

impl KeyGroupError {
    /// The kind of failure: an unsupported key type, or a caller's bad key or name.
    pub fn kind(&self) -> crate::ErrorKind {
        match self {
            KeyGroupError::UnsupportedKeyType { .. } => crate::ErrorKind::Unsupported,
            KeyGroupError::MalformedKey { .. } | KeyGroupError::UnknownScheme { .. } => crate::ErrorKind::Caller,
        }
    }
}

impl crate::error::HasErrorKind for KeyGroupError {
    fn kind(&self) -> crate::ErrorKind {
        KeyGroupError::kind(self)
    }
}

/// How Java hashes a key type statekit can place under Flink's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JavaHash {
    /// `String.hashCode` (and `Character.hashCode`, the same for a one-character string).
    String,
    /// `Integer.hashCode` (and `Short`, `Byte`): the value.
    Int,
    /// `Long.hashCode`: `(int)(v ^ (v >>> 32))`.
    Long,
    /// `Boolean.hashCode`: 1231 or 1237.
    Bool,
    /// `Float.hashCode`: `floatToIntBits` (NaN canonical).
    Float,
    /// `Double.hashCode`: `doubleToLongBits` (NaN canonical), folded as `Long`.
    Double,
}

impl JavaHash {
    fn of(schema: &TypeSchema) -> Option<JavaHash> {
        Some(match schema {
            TypeSchema::Utf8 => JavaHash::String,
            TypeSchema::I32 => JavaHash::Int,
            TypeSchema::I64 => JavaHash::Long,
            TypeSchema::Bool => JavaHash::Bool,
            TypeSchema::F32 => JavaHash::Float,
            TypeSchema::F64 => JavaHash::Double,
            _ => return None,
        })
    }

    /// The Java `hashCode` of the key whose statekit encoding is `key`.
    fn hash_code(self, key: &[u8]) -> Option<i32> {
        let fold = |v: i64| (v ^ ((v as u64) >> 32) as i64) as i32;
        Some(match self {
            JavaHash::String => crate::hash::java_string_hash_code(std::str::from_utf8(key).ok()?),
            JavaHash::Int => i32::from_be_bytes(key.try_into().ok()?),
            JavaHash::Long => fold(i64::from_be_bytes(key.try_into().ok()?)),
            JavaHash::Bool => match key {
                [1] => 1231,
                [0] => 1237,
                _ => return None,
            },
            JavaHash::Float => {
                let f = f32::from_be_bytes(key.try_into().ok()?);
                if f.is_nan() {
                    0x7fc0_0000
                } else {
                    f.to_bits() as i32
                }
            }
            JavaHash::Double => {
                let d = f64::from_be_bytes(key.try_into().ok()?);
                fold(if d.is_nan() {
                    0x7ff8_0000_0000_0000
                } else {
                    d.to_bits() as i64
                })
            }
        })
    }
}

/// The rule of a [`KeyGroupAssigner`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Statekit,
    Flink(JavaHash),
    /// Flink's rule for a key type statekit cannot hash.
    Unsupported,
}

/// A [`KeyGroupScheme`] fixed to one key type and max parallelism: the function every path
/// that places a key (a backend's put, a point lookup, a rescale) calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyGroupAssigner {
    rule: Rule,
    key_schema: TypeSchema,
    max_parallelism: u32,
}

impl KeyGroupAssigner {
    /// statekit's rule for any key type.
    pub fn statekit(max_parallelism: u32) -> Self {
        KeyGroupAssigner {
            rule: Rule::Statekit,
            key_schema: TypeSchema::Bytes,
            max_parallelism: max_parallelism.max(1),
        }
    }

    /// The scheme.
    pub fn scheme(&self) -> KeyGroupScheme {
        match self.rule {
            Rule::Statekit => KeyGroupScheme::Statekit,
            Rule::Flink(_) | Rule::Unsupported => KeyGroupScheme::Flink,
        }
    }

    /// The max parallelism (number of key groups).
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// True for statekit's rule, whose key group [`key_group_for_key`] computes from the bytes
    /// alone (a backend may then reuse that hash).
    pub fn is_statekit(&self) -> bool {
        self.rule == Rule::Statekit
    }

    /// True when keys can be placed: false only under Flink's rule for a key type statekit
    /// cannot hash.
    pub fn places_keys(&self) -> bool {
        self.rule != Rule::Unsupported
    }

    /// The key group of `key`; fails only under Flink's rule: for a key type statekit
    /// cannot hash, or bytes that are not a value of the key type.
    #[inline]
    pub fn key_group(&self, key: &[u8]) -> Result<u32, KeyGroupError> {
        place(self.rule, key, &self.key_schema, self.max_parallelism)
    }
}

/// The key group of `key` (a value of `key_schema`) under `rule`, of `max_parallelism` (≥ 1).
#[inline]
fn place(rule: Rule, key: &[u8], key_schema: &TypeSchema, max_parallelism: u32) -> Result<u32, KeyGroupError> {
    match rule {
        Rule::Statekit => Ok(key_group_for_key(key, max_parallelism)),
        Rule::Unsupported => Err(KeyGroupError::UnsupportedKeyType {
            key_type: key_schema.to_string(),
        }),
        Rule::Flink(h) => match h.hash_code(key) {
            Some(code) => Ok(flink_key_group_for_hash_code(code, max_parallelism)),
            None => Err(KeyGroupError::MalformedKey {
                key_type: key_schema.to_string(),
                len: key.len(),
            }),
        },
    }
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
