//! State kinds and descriptors.

use crate::schema::TypeSchema;
use std::fmt;
use std::sync::Arc;

/// The kind of a keyed state. Each holds one entry per (key, namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyedStateKind {
    /// One value.
    Value,
    /// An ordered list of elements.
    List,
    /// A map from user keys to values.
    Map,
    /// One value folded with a reduce function on every add.
    Reducing,
    /// One accumulator folded with an aggregate function on every add.
    Aggregating,
}

impl KeyedStateKind {
    /// All kinds, in their on-disk code order.
    pub const ALL: [KeyedStateKind; 5] = [
        KeyedStateKind::Value,
        KeyedStateKind::List,
        KeyedStateKind::Map,
        KeyedStateKind::Reducing,
        KeyedStateKind::Aggregating,
    ];

    /// The code stored on disk (`docs/format.md`).
    pub fn code(self) -> u8 {
        match self {
            KeyedStateKind::Value => 0,
            KeyedStateKind::List => 1,
            KeyedStateKind::Map => 2,
            KeyedStateKind::Reducing => 3,
            KeyedStateKind::Aggregating => 4,
        }
    }

    /// Inverse of [`KeyedStateKind::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// True for kinds holding a single value per (key, namespace).
    pub fn is_single_value(self) -> bool {
        matches!(
            self,
            KeyedStateKind::Value | KeyedStateKind::Reducing | KeyedStateKind::Aggregating
        )
    }
}

impl fmt::Display for KeyedStateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyedStateKind::Value => "value",
            KeyedStateKind::List => "list",
            KeyedStateKind::Map => "map",
            KeyedStateKind::Reducing => "reducing",
            KeyedStateKind::Aggregating => "aggregating",
        })
    }
}

/// How operator (non-keyed) state is redistributed when parallelism changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperatorStateMode {
    /// A list whose elements are split among the new subtasks (Flink's SPLIT_DISTRIBUTE).
    List,
    /// A list every new subtask receives whole: the union of all old subtasks' lists.
    Union,
    /// A key/value map identical on every subtask; each new subtask gets one copy.
    Broadcast,
}

impl OperatorStateMode {
    /// The code stored on disk; the same ordinals as Flink's `OperatorStateHandle.Mode`.
    pub fn code(self) -> u8 {
        match self {
            OperatorStateMode::List => 0,
            OperatorStateMode::Union => 1,
            OperatorStateMode::Broadcast => 2,
        }
    }

    /// Inverse of [`OperatorStateMode::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(OperatorStateMode::List),
            1 => Some(OperatorStateMode::Union),
            2 => Some(OperatorStateMode::Broadcast),
            _ => None,
        }
    }
}

impl fmt::Display for OperatorStateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OperatorStateMode::List => "list",
            OperatorStateMode::Union => "union",
            OperatorStateMode::Broadcast => "broadcast",
        })
    }
}

/// When a TTL'd entry's timestamp is refreshed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TtlUpdateType {
    /// On creation and on every write (Flink's default).
    OnCreateAndWrite,
    /// Also on every read.
    OnReadAndWrite,
}

/// Time-to-live of keyed state entries. An entry whose last-update timestamp is older than
/// `ttl_ms` is invisible to reads and dropped by snapshots. For lists every element, and for
/// maps every user entry, has its own timestamp (as in Flink).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TtlConfig {
    /// Lifetime in milliseconds (> 0).
    pub ttl_ms: u64,
    /// When timestamps are refreshed.
    pub update_type: TtlUpdateType,
}

impl TtlConfig {
    /// The `ttl_ms` of a TTL whose duration the snapshot does not store (an Apache Flink
    /// state's: the duration lives in the job). Nothing ever expires under it.
    pub const DURATION_NOT_STORED: u64 = u64::MAX;

    /// TTL refreshed on create and write.
    pub fn new(ttl_ms: u64) -> Self {
        TtlConfig {
            ttl_ms,
            update_type: TtlUpdateType::OnCreateAndWrite,
        }
    }

    /// True when an entry written at `timestamp_ms` has expired at `now_ms`.
    #[inline]
    pub fn is_expired(&self, timestamp_ms: i64, now_ms: i64) -> bool {
        let ttl = i64::try_from(self.ttl_ms).unwrap_or(i64::MAX);
        timestamp_ms.saturating_add(ttl) <= now_ms
    }
}

/// The TTL context of one state operation: the state's TTL and, when it has one, the time
/// now (read from the backend's clock once per operation). Backends share it so expiry means
/// the same in every one.
#[derive(Clone, Copy, Debug)]
pub struct TtlContext {
    /// The state's TTL, if any.
    pub cfg: Option<TtlConfig>,
    /// The time now (ms since the epoch); 0 when the state has no TTL.
    pub now: i64,
}

impl TtlContext {
    /// The context for an operation on `desc` at the time `clock` says (read only when the
    /// state has a TTL).
    #[inline]
    pub fn of(desc: &StateDescriptor, clock: &dyn crate::Clock) -> Self {
        TtlContext {
            cfg: desc.ttl,
            now: if desc.ttl.is_some() { clock.now_ms() } else { 0 },
        }
    }

    /// True when data stamped `ts` is visible (always, without TTL).
    #[inline]
    pub fn live(&self, ts: i64) -> bool {
        match &self.cfg {
            None => true,
            Some(cfg) => !cfg.is_expired(ts, self.now),
        }
    }

    /// True when reads refresh the timestamp ([`TtlUpdateType::OnReadAndWrite`]).
    #[inline]
    pub fn refresh_on_read(&self) -> bool {
        matches!(&self.cfg, Some(c) if c.update_type == TtlUpdateType::OnReadAndWrite)
    }

    /// True when stored data carries a timestamp (the state has a TTL).
    #[inline]
    pub fn stamped(&self) -> bool {
        self.cfg.is_some()
    }

    /// The timestamp a write records (`None` without TTL).
    #[inline]
    pub fn stamp(&self) -> Option<i64> {
        self.cfg.map(|_| self.now)
    }
}

/// The kinds an operation accepts, as [`crate::StateError::WrongKind`] names them.
pub mod accepts {
    /// `get`/`put`/`clear`-style single values.
    pub const SINGLE: &str = "a value, reducing or aggregating state";
    /// List operations.
    pub const LIST: &str = "a list state";
    /// Map operations.
    pub const MAP: &str = "a map state";
    /// `add`.
    pub const ADDABLE: &str = "a list, reducing or aggregating state";
    /// Merging namespaces.
    pub const MERGEABLE: &str = "a list, reducing or aggregating state";
}

/// Everything recorded about a keyed state: its name (unique within an operator), kind,
/// the schemas of its key, namespace, value (for lists: element; for maps: map value) and
/// map user key, and its TTL.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StateDescriptor {
    /// Name, unique within the operator.
    pub name: String,
    /// Kind.
    pub kind: KeyedStateKind,
    /// Schema of the key.
    pub key_schema: TypeSchema,
    /// Schema of the namespace ([`TypeSchema::Unit`] for non-windowed state).
    pub namespace_schema: TypeSchema,
    /// Schema of the value; for lists the element, for maps the map value, for aggregating
    /// state the accumulator.
    pub value_schema: TypeSchema,
    /// Schema of the map user key (maps only).
    pub user_key_schema: Option<TypeSchema>,
    /// Optional time-to-live.
    pub ttl: Option<TtlConfig>,
}

impl StateDescriptor {
    fn base(name: &str, kind: KeyedStateKind, key: TypeSchema, value: TypeSchema) -> Self {
        StateDescriptor {
            name: name.to_string(),
            kind,
            key_schema: key,
            namespace_schema: TypeSchema::Unit,
            value_schema: value,
            user_key_schema: None,
            ttl: None,
        }
    }

    /// A value state.
    pub fn value(name: &str, key: TypeSchema, value: TypeSchema) -> Self {
        Self::base(name, KeyedStateKind::Value, key, value)
    }

    /// A list state of `element`s.
    pub fn list(name: &str, key: TypeSchema, element: TypeSchema) -> Self {
        Self::base(name, KeyedStateKind::List, key, element)
    }

    /// A map state from `user_key` to `value`.
    pub fn map(name: &str, key: TypeSchema, user_key: TypeSchema, value: TypeSchema) -> Self {
        let mut d = Self::base(name, KeyedStateKind::Map, key, value);
        d.user_key_schema = Some(user_key);
        d
    }

    /// A reducing state.
    pub fn reducing(name: &str, key: TypeSchema, value: TypeSchema) -> Self {
        Self::base(name, KeyedStateKind::Reducing, key, value)
    }

    /// An aggregating state whose stored value is the accumulator.
    pub fn aggregating(name: &str, key: TypeSchema, accumulator: TypeSchema) -> Self {
        Self::base(name, KeyedStateKind::Aggregating, key, accumulator)
    }

    /// Sets the namespace schema.
    pub fn with_namespace(mut self, namespace: TypeSchema) -> Self {
        self.namespace_schema = namespace;
        self
    }

    /// Sets a TTL.
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Checks that a state registered again under the same name is compatible: same kind
    /// and schemas (TTL may change, as in Flink).
    pub fn check_compatible(&self, other: &StateDescriptor) -> Result<(), crate::Incompatibility> {
        use crate::Incompatibility;
        if self.kind != other.kind {
            return Err(Incompatibility::Kind {
                state: self.name.clone(),
                now: other.kind,
                registered: self.kind,
            });
        }
        let pairs = [
            ("key", &self.key_schema, &other.key_schema),
            ("namespace", &self.namespace_schema, &other.namespace_schema),
            ("value", &self.value_schema, &other.value_schema),
        ];
        for (what, a, b) in pairs {
            if a != b {
                return Err(Incompatibility::Schema {
                    state: self.name.clone(),
                    part: what,
                    now: Box::new(b.clone()),
                    recorded: Box::new(a.clone()),
                });
            }
        }
        if self.user_key_schema != other.user_key_schema {
            return Err(Incompatibility::UserKeySchema {
                state: self.name.clone(),
            });
        }
        Ok(())
    }
}

/// A descriptor of operator (non-keyed) state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OperatorStateDescriptor {
    /// Name, unique within the operator.
    pub name: String,
    /// Redistribution mode.
    pub mode: OperatorStateMode,
    /// Schema of list elements, or of broadcast map values.
    pub value_schema: TypeSchema,
    /// Schema of broadcast map keys (broadcast only).
    pub key_schema: Option<TypeSchema>,
}

/// `reduce(accumulated, new) -> accumulated`, over encoded values.
pub type ReduceFn = Arc<dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync>;

/// An aggregate function over encoded values: `add(acc, input) -> acc` (with `acc = None`
/// for the first input, meaning "create the accumulator"), and `merge(a, b) -> acc` for
/// merging namespaces.
#[derive(Clone)]
#[allow(clippy::type_complexity)] // the closure types are the documented API
pub struct AggregateFn {
    /// Folds one input into the accumulator (`None` = no accumulator yet).
    pub add: Arc<dyn Fn(Option<&[u8]>, &[u8]) -> Vec<u8> + Send + Sync>,
    /// Merges two accumulators.
    pub merge: Arc<dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync>,
}

/// User functions a reducing or aggregating state needs. They are not stored in snapshots;
/// an engine registers them again after a restore, as in Flink.
#[derive(Clone, Default)]
pub enum StateFunctions {
    /// Value, list and map states need none.
    #[default]
    None,
    /// For reducing state.
    Reduce(ReduceFn),
    /// For aggregating state.
    Aggregate(AggregateFn),
}

impl StateFunctions {
    /// Checks that the functions fit the kind of `desc` (`None` always fits).
    pub fn check_fits(&self, desc: &StateDescriptor) -> Result<(), crate::StateError> {
        let fits = match self {
            StateFunctions::None => true,
            StateFunctions::Reduce(_) => desc.kind == KeyedStateKind::Reducing,
            StateFunctions::Aggregate(_) => desc.kind == KeyedStateKind::Aggregating,
        };
        if fits {
            Ok(())
        } else {
            Err(crate::StateError::Incompatible(crate::Incompatibility::Functions {
                state: desc.name.clone(),
                kind: desc.kind,
                functions: self.name(),
            }))
        }
    }
}

impl StateFunctions {
    /// `None`, `Reduce(..)` or `Aggregate(..)` (also its `Debug` form).
    fn name(&self) -> &'static str {
        match self {
            StateFunctions::None => "None",
            StateFunctions::Reduce(_) => "Reduce(..)",
            StateFunctions::Aggregate(_) => "Aggregate(..)",
        }
    }
}

impl fmt::Debug for StateFunctions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
