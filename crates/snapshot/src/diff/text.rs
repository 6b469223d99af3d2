//! The differences as text: the lines `statekit diff` prints ([`difference_text`]) and their
//! columns as the inspector's diff list shows them ([`difference_cell`]), values rendered by
//! [`statekit_core::text`] as `statekit dump` prints them. The `--json` shape is
//! [`super::report`].

use super::{describe_state, Change, Difference, FieldChange, Item, KeyDetail, KeyDiff, MapEntryDiff, OperatorDiff};
use super::{OperatorStateDiff, StateDiff};
use statekit_core::text::{cell, text};
use statekit_core::TypeSchema;

/// A value with its TTL timestamp: `5 ttl_ts=1700000000000` ([`cell`] for the value).
pub fn item_text(schema: &TypeSchema, it: &Item, hex: bool) -> String {
    let v = cell(schema, &it.bytes, hex);
    match it.timestamp {
        Some(t) => format!("{v} ttl_ts={t}"),
        None => v,
    }
}

/// A list state's elements: `[1, 2, 3]` ([`item_text`] for each).
pub fn list_text(schema: &TypeSchema, items: &[Item], hex: bool) -> String {
    let inner: Vec<String> = items.iter().map(|i| item_text(schema, i, hex)).collect();
    format!("[{}]", inner.join(", "))
}

/// Changed properties as text: `parallelism 2 -> 3 (layout only), …`.
pub fn fields_text(fields: &[FieldChange]) -> String {
    fields
        .iter()
        .map(|f| {
            format!(
                "{} {} -> {}{}",
                f.field.as_str().replace('_', " "),
                f.old,
                f.new,
                if f.layout { " (layout only)" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line of a difference as the inspector's diff list shows it: the columns of a line
/// of [`difference_text`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffCells {
    /// `+`, `-`, `~`, or `=` for a layout-only change.
    pub sign: char,
    /// Operator uid.
    pub uid: String,
    /// State name (empty for an operator).
    pub state: String,
    /// Key (with namespace and user key), element or broadcast key; empty for descriptors.
    pub key: String,
    /// What changed: `old -> new` values, or the changed properties.
    pub what: String,
}

/// How many lines [`difference_text`] prints for `d` (the rows of the inspector's list).
pub fn difference_parts(d: &Difference) -> usize {
    match d {
        Difference::Operator(_) | Difference::State(_) => 1,
        Difference::OperatorState(s) => 1 + s.removed_elements.len() + s.added_elements.len() + s.entries.len(),
        Difference::Key(k) => match &k.detail {
            KeyDetail::Map(entries) => entries.len().max(1),
            _ => 1,
        },
    }
}

/// Line `part` of `d` as [`DiffCells`] (`None` past the last).
pub fn difference_cell(d: &Difference, part: usize, hex: bool) -> Option<DiffCells> {
    let cells = |sign: char, uid: &str, state: &str, key: String, what: String| DiffCells {
        sign,
        uid: uid.to_string(),
        state: state.to_string(),
        key,
        what,
    };
    if part >= difference_parts(d) {
        return None;
    }
    Some(match d {
        Difference::Operator(o) => {
            let what = match o.change {
                Change::Added => "operator added".to_string(),
                Change::Removed => "operator removed".to_string(),
                Change::Modified => fields_text(&o.fields),
            };
            let sign = if o.layout_only() { '=' } else { o.change.sign() };
            cells(sign, &o.uid, "", String::new(), what + &operator_notes(o))
        }
        Difference::State(s) => {
            let what = match s.change {
                Change::Added | Change::Removed => format!("{}: {}", s.change.name(), state_detail(s)),
                Change::Modified => state_detail(s),
            };
            cells(s.change.sign(), &s.uid, &s.name, String::new(), what)
        }
        Difference::OperatorState(s) => {
            let (vs, ks) = op_schemas(s);
            let (nr, na) = (s.removed_elements.len(), s.added_elements.len());
            if part == 0 {
                let what = op_state_parts(s).unwrap_or_else(|| s.change.name().to_string());
                cells(s.change.sign(), &s.uid, &s.name, String::new(), what)
            } else if part <= nr {
                let e = &s.removed_elements[part - 1];
                cells('-', &s.uid, &s.name, "element".into(), cell(&vs, e, hex))
            } else if part <= nr + na {
                let e = &s.added_elements[part - 1 - nr];
                cells('+', &s.uid, &s.name, "element".into(), cell(&vs, e, hex))
            } else {
                let e = &s.entries[part - 1 - nr - na];
                let (sign, what) = entry_values(&vs, e, hex);
                let key = format!("key={}", cell(&ks, &e.user_key, hex));
                cells(sign, &s.uid, &s.name, key, what)
            }
        }
        Difference::Key(k) => {
            let st = &k.state;
            let mut key = cell(&st.key_schema, &k.key, hex);
            if st.namespace_schema != TypeSchema::Unit {
                key.push_str(&format!(" ns={}", cell(&st.namespace_schema, &k.namespace, hex)));
            }
            let vs = &st.value_schema;
            let sign = k.change.sign();
            match &k.detail {
                KeyDetail::None => cells(sign, &k.uid, &st.name, key, String::new()),
                KeyDetail::Value { old, new } => {
                    let t = |i: &Item| item_text(vs, i, hex);
                    let what = match (old, new) {
                        (Some(o), Some(n)) => format!("{} -> {}", t(o), t(n)),
                        (Some(x), None) | (None, Some(x)) => t(x),
                        (None, None) => String::new(),
                    };
                    cells(sign, &k.uid, &st.name, key, what)
                }
                KeyDetail::List { old, new } => {
                    let what = match k.change {
                        Change::Added => list_text(vs, new, hex),
                        Change::Removed => list_text(vs, old, hex),
                        Change::Modified => format!("{} -> {}", list_text(vs, old, hex), list_text(vs, new, hex)),
                    };
                    cells(sign, &k.uid, &st.name, key, what)
                }
                KeyDetail::Map(entries) => match entries.get(part) {
                    None => cells(sign, &k.uid, &st.name, key, String::new()),
                    Some(e) => {
                        let uks = st.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
                        let (sign, what) = entry_values(vs, e, hex);
                        let key = format!("{key} user_key={}", cell(&uks, &e.user_key, hex));
                        cells(sign, &k.uid, &st.name, key, what)
                    }
                },
            }
        }
    })
}

/// What an operator difference adds after its changed properties: that only its layout
/// changed, or why its keyed state was not compared.
fn operator_notes(o: &OperatorDiff) -> String {
    let mut t = String::new();
    if o.layout_only() {
        t.push_str(" — not a state difference");
    }
    if let Some(why) = &o.keyed_not_compared {
        t.push_str(&format!("; keyed state not compared ({why})"));
    }
    t
}

/// A keyed-state difference after its name: the descriptor of an added or removed state,
/// the changed properties of a modified one.
fn state_detail(s: &StateDiff) -> String {
    match s.change {
        Change::Added => s.new.as_ref().map(describe_state).unwrap_or_default(),
        Change::Removed => s.old.as_ref().map(describe_state).unwrap_or_default(),
        Change::Modified => format!(
            "{}{}",
            fields_text(&s.fields),
            if s.entries_compared {
                ""
            } else {
                " (entries not compared)"
            }
        ),
    }
}

/// What the header line of an operator-state difference says after the name.
fn op_state_parts(s: &OperatorStateDiff) -> Option<String> {
    let mut parts = Vec::new();
    if !s.fields.is_empty() {
        parts.push(fields_text(&s.fields));
    }
    if !s.removed_elements.is_empty() || !s.added_elements.is_empty() {
        parts.push(format!(
            "{} elements removed, {} added",
            s.removed_elements.len(),
            s.added_elements.len()
        ));
    }
    if !s.entries.is_empty() {
        parts.push(format!("{} entries differ", s.entries.len()));
    }
    if let (Change::Added | Change::Removed, Some(d)) = (s.change, s.new.as_ref().or(s.old.as_ref())) {
        parts.push(format!("{} value {}", d.mode, d.value_schema));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The sign and `old -> new` text of a map (or broadcast) entry.
fn entry_values(vs: &TypeSchema, e: &MapEntryDiff, hex: bool) -> (char, String) {
    let t = |i: &Item| item_text(vs, i, hex);
    match (&e.old, &e.new) {
        (None, Some(n)) => ('+', t(n)),
        (Some(o), None) => ('-', t(o)),
        (Some(o), Some(n)) => ('~', format!("{} -> {}", t(o), t(n))),
        (None, None) => ('?', String::new()),
    }
}

/// The schemas of an operator state's values and keys (the new side's when it has one).
pub fn op_schemas(d: &OperatorStateDiff) -> (TypeSchema, TypeSchema) {
    let desc = d.new.as_ref().or(d.old.as_ref());
    (
        desc.map(|x| x.value_schema.clone()).unwrap_or(TypeSchema::Bytes),
        desc.and_then(|x| x.key_schema.clone()).unwrap_or(TypeSchema::Bytes),
    )
}

/// A difference as text lines (one, or a header and one line per element for operator
/// state).
pub fn difference_text(d: &Difference) -> Vec<String> {
    match d {
        Difference::Operator(o) => {
            let mut t = format!("{} operator {:?}", o.change.sign(), o.uid);
            if o.change == Change::Modified {
                t.push_str(&format!(": {}", fields_text(&o.fields)));
            }
            vec![t + &operator_notes(o)]
        }
        Difference::State(s) => vec![format!(
            "{} state {}/{}: {}",
            s.change.sign(),
            s.uid,
            s.name,
            state_detail(s)
        )],
        Difference::OperatorState(s) => {
            let name = format!("{}/{}", s.uid, s.name);
            let (vs, ks) = op_schemas(s);
            let mut head = format!("{} operator-state {name}", s.change.sign());
            if let Some(parts) = op_state_parts(s) {
                head.push_str(&format!(": {parts}"));
            }
            let mut lines = vec![head];
            for e in &s.removed_elements {
                lines.push(format!("    - element {}", text(&vs, e)));
            }
            for e in &s.added_elements {
                lines.push(format!("    + element {}", text(&vs, e)));
            }
            for e in &s.entries {
                lines.push(map_entry_text("    ", &ks, &vs, "key", e));
            }
            lines
        }
        Difference::Key(k) => key_text(k),
    }
}

fn map_entry_text(prefix: &str, ks: &TypeSchema, vs: &TypeSchema, key_name: &str, e: &MapEntryDiff) -> String {
    let k = text(ks, &e.user_key);
    match (&e.old, &e.new) {
        (None, Some(n)) => format!("{prefix}+ {key_name}={k} value={}", item_text(vs, n, false)),
        (Some(o), None) => format!("{prefix}- {key_name}={k} value={}", item_text(vs, o, false)),
        (Some(o), Some(n)) => format!(
            "{prefix}~ {key_name}={k} value={} -> {}",
            item_text(vs, o, false),
            item_text(vs, n, false)
        ),
        (None, None) => format!("{prefix}? {key_name}={k}"),
    }
}

fn key_text(k: &KeyDiff) -> Vec<String> {
    let d = &k.state;
    let mut loc = format!(
        "{}/{} kg={} key={}",
        k.uid,
        d.name,
        k.key_group,
        text(&d.key_schema, &k.key)
    );
    if d.namespace_schema != TypeSchema::Unit {
        loc.push_str(&format!(" ns={}", text(&d.namespace_schema, &k.namespace)));
    }
    let sign = k.change.sign();
    let vs = &d.value_schema;
    match &k.detail {
        KeyDetail::None => vec![format!("{sign} {loc}")],
        KeyDetail::Value { old, new } => vec![match (old, new) {
            (Some(o), Some(n)) => format!(
                "{sign} {loc} value={} -> {}",
                item_text(vs, o, false),
                item_text(vs, n, false)
            ),
            (Some(o), None) => format!("{sign} {loc} value={}", item_text(vs, o, false)),
            (None, Some(n)) => format!("{sign} {loc} value={}", item_text(vs, n, false)),
            (None, None) => format!("{sign} {loc}"),
        }],
        KeyDetail::List { old, new } => vec![match k.change {
            Change::Added => format!("{sign} {loc} list={}", list_text(vs, new, false)),
            Change::Removed => format!("{sign} {loc} list={}", list_text(vs, old, false)),
            Change::Modified => format!(
                "{sign} {loc} list={} -> {}",
                list_text(vs, old, false),
                list_text(vs, new, false)
            ),
        }],
        KeyDetail::Map(entries) => {
            let uks = d.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
            entries
                .iter()
                .map(|e| {
                    let line = map_entry_text("", &uks, vs, "user_key", e);
                    // "<sign> user_key=…" → "<sign> <loc> user_key=…"
                    let (s, rest) = line.split_at(1);
                    format!("{s} {loc}{rest}")
                })
                .collect()
        }
    }
}
