//! The differences of two snapshots as a report: typed records that serialise (serde) to the
//! JSON `statekit diff --json` / `--jsonl` prints, values decoded by their schemas
//! ([`Decoded`], the one JSON shape of a value: [`statekit_core::json`]).
//!
//! A [`Difference`] holds stored bytes and descriptors; its [`DifferenceReport`] holds what is
//! printed of it: values decoded, descriptors as text, the `type` of the record. The
//! [`DiffSummary`] becomes a [`SummaryReport`]. [`DiffReport`] is the whole document
//! (`{"differences": [...], "summary": {...}}`); a tool that prints differences as
//! [`diff_snapshots`](super::diff_snapshots) finds them (memory bounded) serialises each
//! [`DifferenceReport`] as it comes, then the [`SummaryReport`]. No format is chosen here:
//! the tools write JSON with `serde_json`.
//!
//! The keys of every object are in name order, as the tool has always printed them (its JSON
//! was built as sorted maps): the fields of each record are declared in that order, and the
//! records whose keys depend on the state ([`KeyReport`], [`MapEntryReport`]) write them in
//! that order by hand.

use super::{Change, DiffSummary, Difference, FieldChange, Item, KeyDetail, KeyDiff, MapEntryDiff, OperatorStateDiff};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use statekit_core::json::Decoded;
use statekit_core::{OperatorStateDescriptor, StateDescriptor, TypeSchema};

/// What a record of the output is: its `type` (`operator`, `state`, `operator_state`, `key`,
/// `summary`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordType {
    /// An [`OperatorReport`].
    Operator,
    /// A [`StateReport`].
    State,
    /// An [`OperatorStateReport`].
    OperatorState,
    /// A [`KeyReport`].
    Key,
    /// The [`SummaryReport`].
    Summary,
}

/// A whole comparison: every difference, then the summary. Serialises to
/// `{"differences":[…],"summary":{…}}` (`statekit diff --json` prints this document with one
/// difference per line, streamed as they are found).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffReport {
    /// The differences, in the order found.
    pub differences: Vec<DifferenceReport>,
    /// The counts.
    pub summary: SummaryReport,
}

/// One difference as printed: a record per kind of difference.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum DifferenceReport {
    /// An operator added, removed or changed.
    Operator(OperatorReport),
    /// A keyed state added, removed or changed.
    State(StateReport),
    /// An operator state added, removed, changed or with other contents.
    OperatorState(OperatorStateReport),
    /// A key of a keyed state with other entries.
    Key(KeyReport),
}

impl From<&Difference> for DifferenceReport {
    fn from(d: &Difference) -> Self {
        match d {
            Difference::Operator(o) => DifferenceReport::Operator(OperatorReport {
                change: o.change,
                fields: o.fields.clone(),
                keyed_not_compared: o.keyed_not_compared.clone(),
                layout_only: o.layout_only(),
                record: RecordType::Operator,
                uid: o.uid.clone(),
            }),
            Difference::State(s) => DifferenceReport::State(StateReport {
                change: s.change,
                entries_compared: s.entries_compared,
                fields: s.fields.clone(),
                new: s.new.as_ref().map(StateDescriptorReport::from),
                old: s.old.as_ref().map(StateDescriptorReport::from),
                state: s.name.clone(),
                record: RecordType::State,
                uid: s.uid.clone(),
            }),
            Difference::OperatorState(s) => DifferenceReport::OperatorState(OperatorStateReport::from(s)),
            Difference::Key(k) => DifferenceReport::Key(KeyReport::from(k)),
        }
    }
}

/// An operator only on one side, or with changed properties.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OperatorReport {
    /// Added, removed or modified.
    pub change: Change,
    /// The changed properties.
    pub fields: Vec<FieldChange>,
    /// Why its keyed entries were not compared, when they were not.
    pub keyed_not_compared: Option<String>,
    /// Only layout properties changed (not a difference of the state).
    pub layout_only: bool,
    /// [`RecordType::Operator`].
    #[serde(rename = "type")]
    pub record: RecordType,
    /// The operator's uid.
    pub uid: String,
}

/// A keyed state only on one side, or with a changed descriptor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateReport {
    /// Added, removed or modified.
    pub change: Change,
    /// Whether its entries are compared (kind and every schema equal).
    pub entries_compared: bool,
    /// The changed properties.
    pub fields: Vec<FieldChange>,
    /// The descriptor on side b.
    pub new: Option<StateDescriptorReport>,
    /// The descriptor on side a.
    pub old: Option<StateDescriptorReport>,
    /// The state's name.
    pub state: String,
    /// [`RecordType::State`].
    #[serde(rename = "type")]
    pub record: RecordType,
    /// The operator's uid.
    pub uid: String,
}

/// A keyed state's descriptor as text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StateDescriptorReport {
    /// The key schema.
    pub key: String,
    /// The state kind (`value`, `list`, `map`, …).
    pub kind: String,
    /// The namespace schema.
    pub namespace: String,
    /// The TTL in milliseconds, when the state has one.
    pub ttl_ms: Option<u64>,
    /// The map user-key schema (map states).
    pub user_key: Option<String>,
    /// The value schema.
    pub value: String,
}

impl From<&StateDescriptor> for StateDescriptorReport {
    fn from(d: &StateDescriptor) -> Self {
        StateDescriptorReport {
            key: d.key_schema.to_string(),
            kind: d.kind.to_string(),
            namespace: d.namespace_schema.to_string(),
            ttl_ms: d.ttl.map(|t| t.ttl_ms),
            user_key: d.user_key_schema.as_ref().map(ToString::to_string),
            value: d.value_schema.to_string(),
        }
    }
}

/// An operator state's descriptor as text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OperatorStateDescriptorReport {
    /// The key schema (broadcast states).
    pub key: Option<String>,
    /// The distribution mode (`list`, `union`, `broadcast`).
    pub mode: String,
    /// The value schema.
    pub value: String,
}

impl From<&OperatorStateDescriptor> for OperatorStateDescriptorReport {
    fn from(d: &OperatorStateDescriptor) -> Self {
        OperatorStateDescriptorReport {
            key: d.key_schema.as_ref().map(ToString::to_string),
            mode: d.mode.to_string(),
            value: d.value_schema.to_string(),
        }
    }
}

/// An operator state only on one side, with a changed descriptor, or with other contents.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OperatorStateReport {
    /// List and union states: elements only on side b.
    pub added_elements: Vec<Decoded>,
    /// Added, removed or modified.
    pub change: Change,
    /// Broadcast states: the entries that differ.
    pub entries: Vec<BroadcastEntryReport>,
    /// The changed properties.
    pub fields: Vec<FieldChange>,
    /// The descriptor on side b.
    pub new: Option<OperatorStateDescriptorReport>,
    /// The descriptor on side a.
    pub old: Option<OperatorStateDescriptorReport>,
    /// List and union states: elements only on side a.
    pub removed_elements: Vec<Decoded>,
    /// The state's name.
    pub state: String,
    /// [`RecordType::OperatorState`].
    #[serde(rename = "type")]
    pub record: RecordType,
    /// The operator's uid.
    pub uid: String,
}

/// A broadcast entry that differs (its values without TTL timestamps).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BroadcastEntryReport {
    /// The entry's key.
    pub key: Decoded,
    /// The value on side b.
    pub new: Option<Decoded>,
    /// The value on side a.
    pub old: Option<Decoded>,
}

impl From<&OperatorStateDiff> for OperatorStateReport {
    fn from(s: &OperatorStateDiff) -> Self {
        // The new side's schemas when it has a descriptor.
        let desc = s.new.as_ref().or(s.old.as_ref());
        let vs = desc.map_or(TypeSchema::Bytes, |d| d.value_schema.clone());
        let ks = desc.and_then(|d| d.key_schema.clone()).unwrap_or(TypeSchema::Bytes);
        let elements = |l: &[Vec<u8>]| l.iter().map(|e| Decoded::of(&vs, e)).collect();
        let value = |i: &Option<Item>| i.as_ref().map(|i| Decoded::of(&vs, &i.bytes));
        OperatorStateReport {
            added_elements: elements(&s.added_elements),
            change: s.change,
            entries: s
                .entries
                .iter()
                .map(|e| BroadcastEntryReport {
                    key: Decoded::of(&ks, &e.user_key),
                    new: value(&e.new),
                    old: value(&e.old),
                })
                .collect(),
            fields: s.fields.clone(),
            new: s.new.as_ref().map(OperatorStateDescriptorReport::from),
            old: s.old.as_ref().map(OperatorStateDescriptorReport::from),
            removed_elements: elements(&s.removed_elements),
            state: s.name.clone(),
            record: RecordType::OperatorState,
            uid: s.uid.clone(),
        }
    }
}

/// A value (or list element, or map value) with its TTL timestamp.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemReport {
    /// The value.
    pub value: Decoded,
    /// Its last-update timestamp (TTL'd state).
    pub ttl_timestamp_ms: Option<i64>,
}

impl ItemReport {
    fn of(schema: &TypeSchema, it: &Item) -> Self {
        ItemReport {
            value: Decoded::of(schema, &it.bytes),
            ttl_timestamp_ms: it.timestamp,
        }
    }
}

/// The values of a key that differs.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyValues {
    /// Not collected (`--keys-only`).
    None,
    /// Value, reducing and aggregating state: the value on each side.
    Value {
        /// On side a.
        old: Option<ItemReport>,
        /// On side b.
        new: Option<ItemReport>,
    },
    /// List state: the whole list on each side; `None` on the side an added or removed key
    /// is not on.
    List {
        /// On side a.
        old: Option<Vec<ItemReport>>,
        /// On side b.
        new: Option<Vec<ItemReport>>,
    },
    /// Map state: the entries that differ.
    Map(Vec<MapEntryReport>),
}

/// A (key, namespace) of a keyed state whose entries differ. Its JSON:
/// `change`, `entries` (map states), `key`, `key_group`, `kind`, `namespace`, `new` and `old`
/// (value and list states) with, for a state with TTL, `new_ttl_timestamp_ms` /
/// `old_ttl_timestamp_ms` (value states) or `new_ttl_timestamps_ms` /
/// `old_ttl_timestamps_ms` (list states), `state`, `type`, `uid`.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyReport {
    /// Added, removed or modified.
    pub change: Change,
    /// The key.
    pub key: Decoded,
    /// The key's key group.
    pub key_group: u32,
    /// The state's kind.
    pub kind: String,
    /// The namespace.
    pub namespace: Decoded,
    /// The state's name.
    pub state: String,
    /// The operator's uid.
    pub uid: String,
    /// Whether the state has a TTL (then the values' timestamps are printed).
    pub ttl: bool,
    /// The differing values.
    pub values: KeyValues,
}

impl From<&KeyDiff> for KeyReport {
    fn from(k: &KeyDiff) -> Self {
        let d = &k.state;
        let vs = &d.value_schema;
        let list = |l: &[Item]| l.iter().map(|i| ItemReport::of(vs, i)).collect::<Vec<_>>();
        let item = |i: &Option<Item>| i.as_ref().map(|i| ItemReport::of(vs, i));
        let values = match &k.detail {
            KeyDetail::None => KeyValues::None,
            KeyDetail::Value { old, new } => KeyValues::Value {
                old: item(old),
                new: item(new),
            },
            // An added key has no old list, a removed one no new list.
            KeyDetail::List { old, new } => KeyValues::List {
                old: (k.change != Change::Added).then(|| list(old)),
                new: (k.change != Change::Removed).then(|| list(new)),
            },
            KeyDetail::Map(entries) => {
                let uks = d.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
                KeyValues::Map(entries.iter().map(|e| MapEntryReport::of(&uks, vs, e)).collect())
            }
        };
        KeyReport {
            change: k.change,
            key: Decoded::of(&d.key_schema, &k.key),
            key_group: k.key_group,
            kind: d.kind.to_string(),
            namespace: Decoded::of(&d.namespace_schema, &k.namespace),
            state: d.name.clone(),
            uid: k.uid.to_string(),
            ttl: d.ttl.is_some(),
            values,
        }
    }
}

/// A map entry of a key that differs.
#[derive(Clone, Debug, PartialEq)]
pub struct MapEntryReport {
    /// Added (only on b), removed (only on a) or modified.
    pub change: Change,
    /// The user key.
    pub user_key: Decoded,
    /// On side a.
    pub old: Option<ItemReport>,
    /// On side b.
    pub new: Option<ItemReport>,
}

impl MapEntryReport {
    fn of(uks: &TypeSchema, vs: &TypeSchema, e: &MapEntryDiff) -> Self {
        MapEntryReport {
            change: match (&e.old, &e.new) {
                (None, _) => Change::Added,
                (_, None) => Change::Removed,
                _ => Change::Modified,
            },
            user_key: Decoded::of(uks, &e.user_key),
            old: e.old.as_ref().map(|i| ItemReport::of(vs, i)),
            new: e.new.as_ref().map(|i| ItemReport::of(vs, i)),
        }
    }
}

/// The value of an optional item, `null` without one.
fn value_of(i: &Option<ItemReport>) -> Option<&Decoded> {
    i.as_ref().map(|i| &i.value)
}

/// The timestamp of an optional item, `null` without one.
fn timestamp_of(i: &Option<ItemReport>) -> Option<i64> {
    i.as_ref().and_then(|i| i.ttl_timestamp_ms)
}

/// A list's values (`null` for no list) and timestamps (`[]` for no list).
fn list_parts(l: &Option<Vec<ItemReport>>) -> (Option<Vec<&Decoded>>, Vec<Option<i64>>) {
    let items = l.as_deref().unwrap_or_default();
    (
        l.as_ref().map(|l| l.iter().map(|i| &i.value).collect()),
        items.iter().map(|i| i.ttl_timestamp_ms).collect(),
    )
}

impl Serialize for KeyReport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("change", &self.change)?;
        if let KeyValues::Map(entries) = &self.values {
            let entries: Vec<_> = entries.iter().map(|e| MapEntryJson(e, self.ttl)).collect();
            m.serialize_entry("entries", &entries)?;
        }
        m.serialize_entry("key", &self.key)?;
        m.serialize_entry("key_group", &self.key_group)?;
        m.serialize_entry("kind", &self.kind)?;
        m.serialize_entry("namespace", &self.namespace)?;
        match &self.values {
            KeyValues::None | KeyValues::Map(_) => {}
            KeyValues::Value { old, new } => {
                m.serialize_entry("new", &value_of(new))?;
                if self.ttl {
                    m.serialize_entry("new_ttl_timestamp_ms", &timestamp_of(new))?;
                }
                m.serialize_entry("old", &value_of(old))?;
                if self.ttl {
                    m.serialize_entry("old_ttl_timestamp_ms", &timestamp_of(old))?;
                }
            }
            KeyValues::List { old, new } => {
                let ((new, new_ts), (old, old_ts)) = (list_parts(new), list_parts(old));
                m.serialize_entry("new", &new)?;
                if self.ttl {
                    m.serialize_entry("new_ttl_timestamps_ms", &new_ts)?;
                }
                m.serialize_entry("old", &old)?;
                if self.ttl {
                    m.serialize_entry("old_ttl_timestamps_ms", &old_ts)?;
                }
            }
        }
        m.serialize_entry("state", &self.state)?;
        m.serialize_entry("type", &RecordType::Key)?;
        m.serialize_entry("uid", &self.uid)?;
        m.end()
    }
}

/// A map entry's JSON: `change`, `new`, `old`, `user_key`, and for a state with TTL
/// `new_ttl_timestamp_ms` / `old_ttl_timestamp_ms`.
struct MapEntryJson<'a>(&'a MapEntryReport, bool);

impl Serialize for MapEntryJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (e, ttl) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("change", &e.change)?;
        m.serialize_entry("new", &value_of(&e.new))?;
        if ttl {
            m.serialize_entry("new_ttl_timestamp_ms", &timestamp_of(&e.new))?;
        }
        m.serialize_entry("old", &value_of(&e.old))?;
        if ttl {
            m.serialize_entry("old_ttl_timestamp_ms", &timestamp_of(&e.old))?;
        }
        m.serialize_entry("user_key", &e.user_key)?;
        m.end()
    }
}

/// A count on each side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sides {
    /// Side a (old).
    pub a: u64,
    /// Side b (new).
    pub b: u64,
}

/// The counts of a comparison (the summary record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SummaryReport {
    /// Keyed entry bytes read.
    pub bytes: Sides,
    /// Keyed entries read.
    pub entries: Sides,
    /// No difference found, and the walk was not stopped early.
    pub identical: bool,
    /// Keys whose entries differ.
    pub keys: u64,
    /// Operators that differ in layout (parallelism) only.
    pub layout_only_operators: u64,
    /// Operator states that differ.
    pub operator_states: u64,
    /// Operators that differ.
    pub operators: u64,
    /// Keyed states that differ.
    pub states: u64,
    /// The walk was stopped before the end (a limit).
    pub truncated: bool,
    /// [`RecordType::Summary`].
    #[serde(rename = "type")]
    pub record: RecordType,
}

impl From<&DiffSummary> for SummaryReport {
    fn from(s: &DiffSummary) -> Self {
        SummaryReport {
            bytes: Sides {
                a: s.bytes[0],
                b: s.bytes[1],
            },
            entries: Sides {
                a: s.entries[0],
                b: s.entries[1],
            },
            identical: s.identical() && !s.truncated,
            keys: s.keys,
            layout_only_operators: s.layout,
            operator_states: s.operator_states,
            operators: s.operators,
            states: s.states,
            truncated: s.truncated,
            record: RecordType::Summary,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Field, KeyDiff, OperatorDiff, StateDiff};
    use super::*;
    use statekit_core::{encode_value, OperatorStateMode, TtlConfig, Value};
    use std::sync::Arc;

    fn json(d: &Difference) -> String {
        serde_json::to_string(&DifferenceReport::from(d)).expect("json")
    }

    fn enc(schema: &TypeSchema, v: Value) -> Vec<u8> {
        encode_value(schema, &v).expect("encodes")
    }

    fn item(bytes: Vec<u8>, timestamp: Option<i64>) -> Item {
        Item { bytes, timestamp }
    }

    fn key_diff(state: StateDescriptor, change: Change, detail: KeyDetail) -> Difference {
        Difference::Key(KeyDiff {
            uid: Arc::from("counter"),
            key: enc(&state.key_schema, Value::Str("a".into())),
            namespace: Vec::new(),
            state: Arc::new(state),
            key_group: 81,
            change,
            detail,
        })
    }

    #[test]
    fn operators_and_states() {
        let op = Difference::Operator(OperatorDiff {
            uid: "src".into(),
            change: Change::Modified,
            fields: vec![FieldChange {
                field: Field::Parallelism,
                old: "2".into(),
                new: "3".into(),
                layout: true,
            }],
            keyed_not_compared: None,
        });
        assert_eq!(
            json(&op),
            r#"{"change":"modified","fields":[{"field":"parallelism","layout":true,"new":"3","old":"2"}],"keyed_not_compared":null,"layout_only":true,"type":"operator","uid":"src"}"#
        );
        let st = Difference::State(StateDiff {
            uid: "counter".into(),
            name: "per-window".into(),
            change: Change::Removed,
            old: Some(
                StateDescriptor::map("per-window", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64)
                    .with_ttl(TtlConfig::new(60_000)),
            ),
            new: None,
            fields: Vec::new(),
            entries_compared: false,
        });
        assert_eq!(
            json(&st),
            r#"{"change":"removed","entries_compared":false,"fields":[],"new":null,"old":{"key":"string","kind":"map","namespace":"unit","ttl_ms":60000,"user_key":"string","value":"i64"},"state":"per-window","type":"state","uid":"counter"}"#
        );
    }

    #[test]
    fn operator_state_elements_and_broadcast_entries() {
        let list = Difference::OperatorState(OperatorStateDiff {
            uid: "src".into(),
            name: "offsets".into(),
            change: Change::Modified,
            old: Some(OperatorStateDescriptor {
                name: "offsets".into(),
                mode: OperatorStateMode::Union,
                value_schema: TypeSchema::I64,
                key_schema: None,
            }),
            new: Some(OperatorStateDescriptor {
                name: "offsets".into(),
                mode: OperatorStateMode::Broadcast,
                value_schema: TypeSchema::I64,
                key_schema: Some(TypeSchema::Utf8),
            }),
            fields: Vec::new(),
            removed_elements: vec![enc(&TypeSchema::I64, Value::I64(7)), vec![1, 2]],
            added_elements: vec![enc(&TypeSchema::I64, Value::I64(-1))],
            entries: vec![MapEntryDiff {
                user_key: enc(&TypeSchema::Utf8, Value::Str("k".into())),
                old: None,
                new: Some(item(enc(&TypeSchema::I64, Value::I64(3)), Some(5))),
            }],
        });
        let out = json(&list);
        let undecodable = match Decoded::of(&TypeSchema::I64, &[1, 2]) {
            Decoded::Undecodable { error, .. } => error,
            Decoded::Value(v) => panic!("decoded {v:?}"),
        };
        assert_eq!(
            out,
            format!(
                r#"{{"added_elements":[-1],"change":"modified","entries":[{{"key":"k","new":3,"old":null}}],"fields":[],"new":{{"key":"string","mode":"broadcast","value":"i64"}},"old":{{"key":null,"mode":"union","value":"i64"}},"removed_elements":[7,{{"error":"{undecodable}","hex":"0102"}}],"state":"offsets","type":"operator_state","uid":"src"}}"#
            )
        );
    }

    #[test]
    fn keys_of_every_kind() {
        let ttl = TtlConfig::new(1000);
        let value = StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64).with_ttl(ttl);
        let i64_item = |v: i64, ts: Option<i64>| item(enc(&TypeSchema::I64, Value::I64(v)), ts);
        let d = key_diff(
            value.clone(),
            Change::Modified,
            KeyDetail::Value {
                old: Some(i64_item(1, Some(10))),
                new: Some(i64_item(2, Some(20))),
            },
        );
        assert_eq!(
            json(&d),
            r#"{"change":"modified","key":"a","key_group":81,"kind":"value","namespace":null,"new":2,"new_ttl_timestamp_ms":20,"old":1,"old_ttl_timestamp_ms":10,"state":"count","type":"key","uid":"counter"}"#
        );
        let d = key_diff(value, Change::Added, KeyDetail::None);
        assert_eq!(
            json(&d),
            r#"{"change":"added","key":"a","key_group":81,"kind":"value","namespace":null,"state":"count","type":"key","uid":"counter"}"#
        );
        // An added list has no old list (null), and no old timestamps ([]).
        let list = StateDescriptor::list("seen", TypeSchema::Utf8, TypeSchema::I64).with_ttl(ttl);
        let d = key_diff(
            list,
            Change::Added,
            KeyDetail::List {
                old: Vec::new(),
                new: vec![i64_item(4, Some(40)), i64_item(5, None)],
            },
        );
        assert_eq!(
            json(&d),
            r#"{"change":"added","key":"a","key_group":81,"kind":"list","namespace":null,"new":[4,5],"new_ttl_timestamps_ms":[40,null],"old":null,"old_ttl_timestamps_ms":[],"state":"seen","type":"key","uid":"counter"}"#
        );
        // Without TTL no timestamps at all.
        let map = StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64);
        let uk = |s: &str| enc(&TypeSchema::Utf8, Value::Str(s.into()));
        let d = key_diff(
            map,
            Change::Modified,
            KeyDetail::Map(vec![
                MapEntryDiff {
                    user_key: uk("x"),
                    old: None,
                    new: Some(i64_item(1, None)),
                },
                MapEntryDiff {
                    user_key: uk("y"),
                    old: Some(i64_item(2, None)),
                    new: Some(i64_item(3, None)),
                },
            ]),
        );
        assert_eq!(
            json(&d),
            r#"{"change":"modified","entries":[{"change":"added","new":1,"old":null,"user_key":"x"},{"change":"modified","new":3,"old":2,"user_key":"y"}],"key":"a","key_group":81,"kind":"map","namespace":null,"state":"m","type":"key","uid":"counter"}"#
        );
    }

    #[test]
    fn map_entries_with_ttl_and_the_document() {
        let map =
            StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::Utf8).with_ttl(TtlConfig::new(5));
        let s = |t: &str| enc(&TypeSchema::Utf8, Value::Str(t.into()));
        let d = key_diff(
            map,
            Change::Removed,
            KeyDetail::Map(vec![MapEntryDiff {
                user_key: s("x"),
                old: Some(item(s("gone"), Some(7))),
                new: None,
            }]),
        );
        let summary = DiffSummary {
            keys: 1,
            layout: 2,
            entries: [3, 0],
            bytes: [30, 0],
            ..DiffSummary::default()
        };
        let report = DiffReport {
            differences: vec![DifferenceReport::from(&d)],
            summary: SummaryReport::from(&summary),
        };
        assert_eq!(
            serde_json::to_string(&report).expect("json"),
            r#"{"differences":[{"change":"removed","entries":[{"change":"removed","new":null,"new_ttl_timestamp_ms":null,"old":"gone","old_ttl_timestamp_ms":7,"user_key":"x"}],"key":"a","key_group":81,"kind":"map","namespace":null,"state":"m","type":"key","uid":"counter"}],"summary":{"bytes":{"a":30,"b":0},"entries":{"a":3,"b":0},"identical":false,"keys":1,"layout_only_operators":2,"operator_states":0,"operators":0,"states":0,"truncated":false,"type":"summary"}}"#
        );
        // A stopped walk is never `identical`.
        let stopped = DiffSummary {
            truncated: true,
            ..DiffSummary::default()
        };
        assert!(!SummaryReport::from(&stopped).identical);
        assert!(SummaryReport::from(&DiffSummary::default()).identical);
    }
}
