//! Bounds every decoder applies to lengths and counts read from untrusted bytes, so a
//! corrupted or hostile file costs at most a bounded multiple of its own size in memory and
//! time — however well its checksums were forged.

/// A decoded or decompressed item may be at most this many times larger than the bytes it
/// was decoded from (plus [`EXPANSION_SLACK`]). LZ4 cannot exceed it (its best ratio is about
/// 255:1); writers that could (Zstandard) fall back to LZ4 for such data.
pub const MAX_EXPANSION: u64 = 256;

/// Bytes allowed beyond `stored × MAX_EXPANSION`, for tiny inputs.
pub const EXPANSION_SLACK: u64 = 64;

/// True when `raw` bytes decoded from `stored` bytes stay within the expansion bound.
pub fn within_expansion(stored: u64, raw: u64) -> bool {
    raw <= expansion_limit(stored)
}

/// The most bytes `stored` bytes may decode or decompress to.
pub fn expansion_limit(stored: u64) -> u64 {
    stored.saturating_mul(MAX_EXPANSION).saturating_add(EXPANSION_SLACK)
}

/// Memory a decoded [`Value`](crate::Value) may take, counted as [`VALUE_NODE_BYTES`] per
/// value node plus the bytes of its strings and byte strings: `encoded × MAX_EXPANSION +
/// VALUE_BUDGET_SLACK`. Only zero-width elements (`unit`, empty tuples) can approach it; every
/// other element costs at least one encoded byte.
pub fn value_budget(encoded: usize) -> u64 {
    (encoded as u64)
        .saturating_mul(MAX_EXPANSION)
        .saturating_add(VALUE_BUDGET_SLACK)
}

/// Slack of [`value_budget`] for tiny values (a handful of nodes).
pub const VALUE_BUDGET_SLACK: u64 = 64 << 10;

/// What one decoded value node counts against [`value_budget`].
pub const VALUE_NODE_BYTES: u64 = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_saturate() {
        assert!(within_expansion(1, 256 + 64));
        assert!(!within_expansion(1, 256 + 65));
        assert_eq!(expansion_limit(u64::MAX), u64::MAX);
        assert!(value_budget(usize::MAX) >= VALUE_BUDGET_SLACK);
    }
}
