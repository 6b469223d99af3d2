//! The heads of Flink's state streams: the keyed backend's and the operator backend's
//! serialization proxies, with each state's meta info (name, kind, serializers).

use crate::error::FlinkError;
use crate::input::Input;
use crate::serializer::{read_snapshot, FlinkType};
use std::collections::BTreeMap;

/// What kind of state a meta info describes (`BackendStateType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendStateType {
    /// Keyed state (`KEY_VALUE`).
    KeyValue,
    /// Operator list state (`OPERATOR`).
    Operator,
    /// Broadcast state (`BROADCAST`).
    Broadcast,
    /// Timers (`PRIORITY_QUEUE`).
    PriorityQueue,
    /// Flink 2.0's asynchronous keyed state (`KEY_VALUE_V2`).
    KeyValueV2,
}

/// One state's meta info (`StateMetaInfoSnapshot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateMeta {
    /// The state's name (timers: `_timer_state/event_<service>`, `…/processing_<service>`).
    pub name: String,
    /// Its kind of state.
    pub backend_type: BackendStateType,
    /// Options (`KEYED_STATE_TYPE` = `VALUE|LIST|MAP|REDUCING|AGGREGATING|FOLDING`,
    /// `OPERATOR_STATE_DISTRIBUTION_MODE`).
    pub options: BTreeMap<String, String>,
    /// Serializers by role (`NAMESPACE_SERIALIZER`, `VALUE_SERIALIZER`, `KEY_SERIALIZER`).
    pub serializers: BTreeMap<String, FlinkType>,
}

impl StateMeta {
    /// The `KEYED_STATE_TYPE` option.
    pub fn keyed_state_type(&self) -> Option<&str> {
        self.options.get("KEYED_STATE_TYPE").map(String::as_str)
    }

    /// The serializer in role `role`.
    pub fn serializer(&self, role: &str) -> Option<&FlinkType> {
        self.serializers.get(role)
    }
}

/// The head of a keyed state stream (`KeyedBackendSerializationProxy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyedProxy {
    /// Its version (6 since Flink 1.17's oldest readable).
    pub version: i32,
    /// Key groups are Snappy-framed compressed.
    pub compressed: bool,
    /// The key type.
    pub key: FlinkType,
    /// The states, in state-id order (the id in the data is the index).
    pub states: Vec<StateMeta>,
    /// Bytes the head takes (data starts there).
    pub len: usize,
}

/// The head of an operator state stream (`OperatorBackendSerializationProxy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorProxy {
    /// Its version (5 up to Flink 1.17, 6 since 1.18).
    pub version: i32,
    /// States are Snappy-framed compressed (version 6).
    pub compressed: bool,
    /// List (and union) states.
    pub states: Vec<StateMeta>,
    /// Broadcast states.
    pub broadcast: Vec<StateMeta>,
    /// Bytes the head takes.
    pub len: usize,
}

/// Reads the keyed backend's head from the start of a keyed state stream.
pub fn decode_keyed_proxy(bytes: &[u8], file: &str) -> Result<KeyedProxy, FlinkError> {
    let mut i = Input::new(bytes, file);
    let version = i.i32("keyed state proxy version")?;
    if version != 6 {
        return Err(i.unsupported_at(
            0,
            "keyed state proxy version",
            format!("{version} (Flink 1.17 and later read only version 6)"),
        ));
    }
    let compressed = i.bool("compression flag")?;
    let key = read_snapshot(&mut i, "key serializer")?;
    let n = read_count16(&mut i, "number of states")?;
    let mut states = Vec::with_capacity(n);
    for _ in 0..n {
        states.push(read_meta(&mut i)?);
    }
    Ok(KeyedProxy {
        version,
        compressed,
        key,
        states,
        len: i.pos(),
    })
}

/// Reads the operator backend's head from the start of an operator state stream.
pub fn decode_operator_proxy(bytes: &[u8], file: &str) -> Result<OperatorProxy, FlinkError> {
    let mut i = Input::new(bytes, file);
    let version = i.i32("operator state proxy version")?;
    if !(5..=6).contains(&version) {
        return Err(i.unsupported_at(
            0,
            "operator state proxy version",
            format!("{version} (5 and 6 are read)"),
        ));
    }
    let compressed = if version >= 6 {
        i.bool("compression flag")?
    } else {
        false
    };
    let n = read_count16(&mut i, "number of operator states")?;
    let mut states = Vec::with_capacity(n);
    for _ in 0..n {
        states.push(read_meta(&mut i)?);
    }
    let n = read_count16(&mut i, "number of broadcast states")?;
    let mut broadcast = Vec::with_capacity(n);
    for _ in 0..n {
        broadcast.push(read_meta(&mut i)?);
    }
    Ok(OperatorProxy {
        version,
        compressed,
        states,
        broadcast,
        len: i.pos(),
    })
}

fn read_count16(i: &mut Input<'_>, field: &str) -> Result<usize, FlinkError> {
    let at = i.pos();
    let n = i.u16(field)?;
    if n > 0x7fff || usize::from(n) > i.remaining() {
        return Err(i.corrupt_at(at, field, format!("{n} states in {} bytes", i.remaining())));
    }
    Ok(usize::from(n))
}

/// `utf name, i32 type, i32 n × (utf, utf) options, i32 n × (utf role, snapshot)`.
pub(crate) fn read_meta(i: &mut Input<'_>) -> Result<StateMeta, FlinkError> {
    let name = i.utf("state name")?;
    let at = i.pos();
    let backend_type = match i.i32("state type")? {
        0 => BackendStateType::KeyValue,
        1 => BackendStateType::Operator,
        2 => BackendStateType::Broadcast,
        3 => BackendStateType::PriorityQueue,
        4 | 10 => BackendStateType::KeyValueV2,
        t => return Err(i.corrupt_at(at, "state type", format!("state {name:?}: type {t} unknown"))),
    };
    let n = i.items("number of options", 4)?;
    let mut options = BTreeMap::new();
    for _ in 0..n {
        let k = i.utf("option")?;
        let v = i.utf("option")?;
        options.insert(k, v);
    }
    let n = i.items("number of serializers", 6)?;
    let mut serializers = BTreeMap::new();
    for _ in 0..n {
        let role = i.utf("serializer role")?;
        let field = format!("state {name:?} {role}");
        let t = read_snapshot(i, &field)?;
        serializers.insert(role, t);
    }
    Ok(StateMeta {
        name,
        backend_type,
        options,
        serializers,
    })
}
