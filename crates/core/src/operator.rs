//! Operator identity: operators are named by a user-chosen **uid**; their 128-bit
//! [`OperatorId`] is derived from it exactly as Flink derives it.

use crate::hash::murmur3_x64_128;
use std::fmt;
use std::str::FromStr;

/// A 16-byte operator id. For an operator with a uid it is `murmur3_x64_128(utf8(uid), 0)`
/// in Guava's byte order, so it equals Flink's `OperatorID` for the same uid, and its hex
/// form equals the one Flink prints.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperatorId(pub [u8; 16]);

impl OperatorId {
    /// The id Flink assigns to an operator with this uid.
    ///
    /// ```
    /// use statekit_core::OperatorId;
    /// assert_eq!(OperatorId::from_uid("hello").to_string(), "029bbd41b3a7d8cb191dae486a901e5b");
    /// ```
    pub fn from_uid(uid: &str) -> Self {
        OperatorId(murmur3_x64_128(uid.as_bytes(), 0))
    }

    /// The 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperatorId({self})")
    }
}

/// Error parsing an [`OperatorId`] from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("operator id must be 32 hexadecimal characters, got {0:?}")]
pub struct ParseOperatorIdError(pub String);

impl FromStr for OperatorId {
    type Err = ParseOperatorIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseOperatorIdError(s.to_string());
        if s.len() != 32 || !s.is_ascii() {
            return Err(err());
        }
        let mut out = [0u8; 16];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| err())?;
        }
        Ok(OperatorId(out))
    }
}

/// True when a uid looks generated rather than chosen by a person (32 hex characters, or
/// empty). Such uids change when the program changes; tools warn about them.
pub fn uid_looks_auto_generated(uid: &str) -> bool {
    uid.is_empty() || (uid.len() == 32 && uid.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_hex() {
        let id = OperatorId::from_uid("counter");
        let parsed: OperatorId = id.to_string().parse().expect("parse");
        assert_eq!(id, parsed);
        assert!("xyz".parse::<OperatorId>().is_err());
        assert!("zz9bbd41b3a7d8cb191dae486a901e5b".parse::<OperatorId>().is_err());
    }

    #[test]
    fn auto_generated() {
        assert!(uid_looks_auto_generated("029bbd41b3a7d8cb191dae486a901e5b"));
        assert!(!uid_looks_auto_generated("counter"));
    }
}
