//! Turning stored bytes into text, and user text into key bytes, for the commands. The text
//! of values, entries and operator-state elements is the library's (`statekit_core::text`,
//! which the inspector shows too), re-exported here, so that a value reads the same
//! everywhere; their JSON is the library's too (`statekit_core::json`: [`Decoded`] and the
//! `Serialize` of `Value`); the few JSON helpers left here are thin wrappers over it for the
//! commands that still build `serde_json` values.

use anyhow::Result;
use serde_json::{json, Value as Json};
use statekit_core::json::Decoded;
use statekit_core::TypeSchema;

/// The one text rendering of values, entries and operator-state elements, counts and times
/// (the library's, shared with the inspector).
pub use statekit_core::text::{
    cell, count, entry_line, noun, op_element_line, op_entry_line, text, utc_time, EntryParts,
};
/// A diff's values as text (the library's, shared with the inspector).
pub use statekit_snapshot::diff::text::{item_text, list_text};

/// A key-group range in JSON: `[first, last]` (numbers, both included), `[]` when empty
/// ([`statekit_core::json::key_group_range`]).
pub fn key_groups_json(r: statekit_core::KeyGroupRange) -> Json {
    statekit_core::json::key_group_range(&r, serde_json::value::Serializer).unwrap_or(Json::Null)
}

/// Lower-case hex.
pub use statekit_core::json::hex;

/// [`op_element_line`] as JSON (`dump --json`).
pub fn op_element_json(subtask: u32, index: usize, schema: &TypeSchema, bytes: &[u8]) -> Json {
    json!({"subtask": subtask, "index": index, "value": json_of(schema, bytes)})
}

/// [`op_entry_line`] as JSON (`dump --json`).
pub fn op_entry_json(subtask: u32, ks: &TypeSchema, key: &[u8], vs: &TypeSchema, value: &[u8]) -> Json {
    json!({"subtask": subtask, "key": json_of(ks, key), "value": json_of(vs, value)})
}

/// Bytes as JSON per their schema, or `{"error": …, "hex": …}` when they do not decode: the
/// library's [`Decoded`] as a `serde_json` value.
pub fn json_of(schema: &TypeSchema, bytes: &[u8]) -> Json {
    serde_json::to_value(Decoded::of(schema, bytes)).unwrap_or(Json::Null)
}

/// How `--key` text is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyFormat {
    /// By the key's schema: text for strings, numbers for integers, hex for bytes.
    Auto,
    /// Hexadecimal bytes (optionally `0x`-prefixed).
    Hex,
    /// The UTF-8 bytes of the text.
    Utf8,
}

/// The stored bytes of a key given on the command line ([`statekit_core::text::parse_key`]).
pub fn parse_key(text: &str, schema: &TypeSchema, format: KeyFormat) -> Result<Vec<u8>> {
    let format = match format {
        KeyFormat::Auto => statekit_core::text::KeyFormat::Auto,
        KeyFormat::Hex => statekit_core::text::KeyFormat::Hex,
        KeyFormat::Utf8 => statekit_core::text::KeyFormat::Utf8,
    };
    Ok(statekit_core::text::parse_key(text, schema, format)?)
}

/// A state's TTL as ` ttl 60000ms`; a TTL whose duration the snapshot does not store (an
/// Apache Flink state's: the duration lives in the job) as ` ttl (duration not stored)`.
pub fn ttl_text(ttl_ms: Option<u64>) -> String {
    match ttl_ms {
        None => String::new(),
        Some(statekit_core::TtlConfig::DURATION_NOT_STORED) => " ttl (duration not stored)".to_string(),
        Some(ms) => format!(" ttl {ms}ms"),
    }
}
