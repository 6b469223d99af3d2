//! Flink's operator ids: 16 bytes, shown as 32 hex digits, derived from the uid by Guava's
//! `murmur3_128` (x64, seed 0) over its UTF-8 bytes.

use std::fmt;
use std::str::FromStr;

/// A Flink operator id (`OperatorID`): the 16 bytes `_metadata` stores, in order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlinkOperatorId(pub [u8; 16]);

impl FlinkOperatorId {
    /// The id Flink gives an operator with this uid (`StreamGraphHasherV2`, also the State
    /// Processor API's `OperatorIdentifier.forUid`).
    pub fn from_uid(uid: &str) -> Self {
        let mut cursor = std::io::Cursor::new(uid.as_bytes());
        // Reading from memory cannot fail.
        let h = murmur3::murmur3_x64_128(&mut cursor, 0).unwrap_or_default();
        // Guava's asBytes(): h1 then h2, each little-endian; the crate returns h2 << 64 | h1.
        FlinkOperatorId(h.to_le_bytes())
    }

    /// The 32 lowercase hex digits Flink's logs and UI show.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for FlinkOperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for FlinkOperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FlinkOperatorId({self})")
    }
}

/// An operator id that is not 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an operator id (32 hex digits)")]
pub struct BadOperatorId(pub String);

impl FromStr for FlinkOperatorId {
    type Err = BadOperatorId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadOperatorId(s.to_string());
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            let pair = s.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *o = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(FlinkOperatorId(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_refusals() {
        let id: FlinkOperatorId = "3e932ddce8af317ca99a3064137a256a".parse().expect("hex");
        assert_eq!(id.to_string(), "3e932ddce8af317ca99a3064137a256a");
        assert!("3e932ddce8af317ca99a3064137a256".parse::<FlinkOperatorId>().is_err());
        assert!("zz932ddce8af317ca99a3064137a256a".parse::<FlinkOperatorId>().is_err());
        assert!("ü3932ddce8af317ca99a3064137a256".parse::<FlinkOperatorId>().is_err());
    }
}
