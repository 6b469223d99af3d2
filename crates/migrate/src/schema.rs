//! A snapshot's state schema as a file a user can read and edit, and the check "will this
//! snapshot restore into a job that declares this schema?" — before anyone deploys.

use crate::MigrateError;
use serde::{Deserialize, Serialize};
use statekit_core::{
    KeyGroupScheme, KeyedStateKind, OperatorStateDescriptor, OperatorStateMode, StateDescriptor, TtlConfig,
    TtlUpdateType, TypeSchema,
};
use statekit_format::SnapshotMetadata;
use statekit_snapshot::Snapshot;
use std::fmt;

/// The state schema of a job or a snapshot: its operators and their states, types written as
/// `statekit show` writes them (`string`, `i64`, `(i64, i64)`, …).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSchema {
    /// The operators, by uid.
    pub operators: Vec<OperatorSchema>,
}

/// One operator's state schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorSchema {
    /// The uid.
    pub uid: String,
    /// The operator id (hex; the murmur3 hash of the uid unless the snapshot says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_id: Option<String>,
    /// Max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// Parallelism (a snapshot's; a job may restore at another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// Keyed states.
    #[serde(default)]
    pub keyed_states: Vec<KeyedStateSchema>,
    /// Operator (non-keyed) states.
    #[serde(default)]
    pub operator_states: Vec<OperatorStateSchema>,
    /// The rule its keys are in key groups by: `"flink"` for state that came from Apache
    /// Flink (`murmurHash(key.hashCode())`); statekit's own rule when absent.
    #[serde(default, skip_serializing_if = "is_statekit", with = "scheme_name")]
    pub key_group_scheme: KeyGroupScheme,
}

fn is_statekit(s: &KeyGroupScheme) -> bool {
    *s == KeyGroupScheme::Statekit
}

/// A [`KeyGroupScheme`] as its name (`statekit`, `flink`).
mod scheme_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use statekit_core::KeyGroupScheme;

    pub(super) fn serialize<S: Serializer>(s: &KeyGroupScheme, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(s.name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<KeyGroupScheme, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// A keyed state's schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedStateSchema {
    /// The name.
    pub name: String,
    /// `value`, `list`, `map`, `reducing` or `aggregating`.
    pub kind: String,
    /// The key type.
    pub key: String,
    /// The namespace type.
    pub namespace: String,
    /// The map user-key type (map state only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_key: Option<String>,
    /// The value (element, accumulator) type.
    pub value: String,
    /// The TTL in milliseconds, when the state has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// When the TTL timestamp is refreshed: `on-read-and-write`; absent for Flink's default,
    /// on create and write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_update: Option<String>,
    /// Parts statekit keeps as the bytes their serializer wrote, each `part: serializer`
    /// (`value: KryoSerializerSnapshot (java.util.UUID)`): values of an Apache Flink
    /// snapshot written by Kryo, Avro or a user's serializer. Informational: `check` ignores
    /// it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opaque: Vec<String>,
}

/// An operator state's schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStateSchema {
    /// The name.
    pub name: String,
    /// `list`, `union` or `broadcast`.
    pub mode: String,
    /// The element (broadcast: value) type.
    pub value: String,
    /// The broadcast key type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Parts statekit keeps as the bytes their serializer wrote, each `part: serializer`
    /// (`value: KryoSerializerSnapshot (java.util.UUID)`): values of an Apache Flink
    /// snapshot written by Kryo, Avro or a user's serializer. Informational: `check` ignores
    /// it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opaque: Vec<String>,
}

impl KeyedStateSchema {
    /// The schema of a descriptor.
    pub fn of(d: &StateDescriptor) -> Self {
        KeyedStateSchema {
            name: d.name.clone(),
            kind: d.kind.to_string(),
            key: d.key_schema.to_string(),
            namespace: d.namespace_schema.to_string(),
            user_key: d.user_key_schema.as_ref().map(ToString::to_string),
            value: d.value_schema.to_string(),
            ttl_ms: d.ttl.map(|t| t.ttl_ms),
            ttl_update: d
                .ttl
                .filter(|t| t.update_type == TtlUpdateType::OnReadAndWrite)
                .map(|_| "on-read-and-write".to_string()),
            opaque: Vec::new(),
        }
    }

    /// The descriptor this schema declares (types read as `Display` writes them).
    pub fn to_descriptor(&self) -> Result<StateDescriptor, MigrateError> {
        let bad = |reason: String| MigrateError::BadSchema {
            what: format!("keyed state {:?}", self.name),
            reason,
        };
        let ty = |field: &str, text: &str| text.parse::<TypeSchema>().map_err(|e| bad(format!("{field}: {e}")));
        let kind = match self.kind.as_str() {
            "value" => KeyedStateKind::Value,
            "list" => KeyedStateKind::List,
            "map" => KeyedStateKind::Map,
            "reducing" => KeyedStateKind::Reducing,
            "aggregating" => KeyedStateKind::Aggregating,
            other => {
                return Err(bad(format!(
                    "kind {other:?} (expected value, list, map, reducing or aggregating)"
                )))
            }
        };
        let user_key_schema = match (&self.user_key, kind) {
            (Some(t), KeyedStateKind::Map) => Some(ty("user_key", t)?),
            (None, KeyedStateKind::Map) => return Err(bad("a map state needs a user_key type".into())),
            (Some(_), _) => return Err(bad("only a map state has a user_key type".into())),
            (None, _) => None,
        };
        let update_type = match self.ttl_update.as_deref() {
            None | Some("on-create-and-write") => TtlUpdateType::OnCreateAndWrite,
            Some("on-read-and-write") => TtlUpdateType::OnReadAndWrite,
            Some(other) => {
                return Err(bad(format!(
                    "ttl_update {other:?} (expected on-create-and-write or on-read-and-write)"
                )))
            }
        };
        let ttl = match self.ttl_ms {
            Some(0) => return Err(bad("ttl_ms must be above 0".into())),
            Some(ms) => Some(TtlConfig {
                ttl_ms: ms,
                update_type,
            }),
            None => None,
        };
        Ok(StateDescriptor {
            name: self.name.clone(),
            kind,
            key_schema: ty("key", &self.key)?,
            namespace_schema: ty("namespace", &self.namespace)?,
            value_schema: ty("value", &self.value)?,
            user_key_schema,
            ttl,
        })
    }
}

impl OperatorStateSchema {
    /// The schema of a descriptor.
    pub fn of(d: &OperatorStateDescriptor) -> Self {
        OperatorStateSchema {
            name: d.name.clone(),
            mode: d.mode.to_string(),
            value: d.value_schema.to_string(),
            key: d.key_schema.as_ref().map(ToString::to_string),
            opaque: Vec::new(),
        }
    }

    /// The descriptor this schema declares.
    pub fn to_descriptor(&self) -> Result<OperatorStateDescriptor, MigrateError> {
        let bad = |reason: String| MigrateError::BadSchema {
            what: format!("operator state {:?}", self.name),
            reason,
        };
        let mode = match self.mode.as_str() {
            "list" => OperatorStateMode::List,
            "union" => OperatorStateMode::Union,
            "broadcast" => OperatorStateMode::Broadcast,
            other => return Err(bad(format!("mode {other:?} (expected list, union or broadcast)"))),
        };
        let key_schema = match (&self.key, mode) {
            (Some(t), OperatorStateMode::Broadcast) => {
                Some(t.parse::<TypeSchema>().map_err(|e| bad(format!("key: {e}")))?)
            }
            (None, OperatorStateMode::Broadcast) => return Err(bad("a broadcast state needs a key type".into())),
            (Some(_), _) => return Err(bad("only a broadcast state has a key type".into())),
            (None, _) => None,
        };
        Ok(OperatorStateDescriptor {
            name: self.name.clone(),
            mode,
            value_schema: self.value.parse().map_err(|e| bad(format!("value: {e}")))?,
            key_schema,
        })
    }
}

impl JobSchema {
    /// The schema of a snapshot, from its `_metadata`.
    pub fn of(meta: &SnapshotMetadata) -> Self {
        JobSchema {
            operators: meta
                .operators
                .iter()
                .map(|o| OperatorSchema {
                    uid: o.uid.clone(),
                    operator_id: Some(o.operator_id.to_string()),
                    max_parallelism: o.max_parallelism,
                    parallelism: Some(o.parallelism),
                    keyed_states: o.keyed_states.iter().map(KeyedStateSchema::of).collect(),
                    operator_states: o.operator_states.iter().map(OperatorStateSchema::of).collect(),
                    key_group_scheme: o.key_group_scheme,
                })
                .collect(),
        }
    }

    /// The schema of an opened snapshot: [`JobSchema::of`] its metadata, with the parts
    /// of its states that statekit keeps as bytes (values of types another family wrote)
    /// named with their serializers ([`KeyedStateSchema::opaque`]). Open a Flink snapshot
    /// with [`statekit_snapshot::OpenOptions::state_schema`] for its states.
    pub fn of_snapshot(snapshot: &Snapshot) -> Result<Self, MigrateError> {
        let mut schema = JobSchema::of(snapshot.metadata());
        for p in snapshot.opaque_parts()? {
            let Some(o) = schema.operators.iter_mut().find(|o| o.uid == p.uid) else {
                continue;
            };
            let note = format!("{}: {}", p.part, p.serializer);
            if let Some(k) = o.keyed_states.iter_mut().find(|k| k.name == p.state) {
                k.opaque.push(note);
            } else if let Some(s) = o.operator_states.iter_mut().find(|s| s.name == p.state) {
                s.opaque.push(note);
            }
        }
        Ok(schema)
    }

    /// The operator with this uid.
    pub fn operator(&self, uid: &str) -> Option<&OperatorSchema> {
        self.operators.iter().find(|o| o.uid == uid)
    }
}

/// What [`check`] found about one operator or state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Finding {
    /// The snapshot has state of an operator the job does not declare: restoring needs
    /// consent to skip it (Flink's `--allowNonRestoredState`), or `rewrite --drop-operator`.
    NotRestored {
        /// The operator.
        uid: String,
    },
    /// The job declares an operator the snapshot has no state of: it starts empty.
    NewOperator {
        /// The operator.
        uid: String,
    },
    /// The max parallelism differs: keys would land in other key groups.
    MaxParallelism {
        /// The operator.
        uid: String,
        /// The snapshot's.
        snapshot: u32,
        /// The job's.
        job: u32,
    },
    /// The job declares a state the snapshot does not have: it starts empty.
    NewState {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
    },
    /// The snapshot has a state the job no longer declares: it is not restored.
    StateNotDeclared {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
    },
    /// A keyed state changed kind (value ↔ list ↔ map …), or an operator state changed mode.
    KindChanged {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
        /// The snapshot's kind.
        snapshot: String,
        /// The job's kind.
        job: String,
    },
    /// A type changed (`key`, `namespace`, `user_key`, `value`).
    TypeChanged {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
        /// Which type.
        field: String,
        /// The snapshot's.
        snapshot: String,
        /// The job's.
        job: String,
    },
    /// TTL switched on or off (the stored values' layout differs).
    TtlSwitched {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
        /// Whether the snapshot's state has a TTL.
        snapshot: bool,
    },
    /// The TTL's duration changed (compatible: stored timestamps are judged by the new one).
    TtlChanged {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
        /// The snapshot's, in milliseconds.
        snapshot: u64,
        /// The job's, in milliseconds.
        job: u64,
    },
}

impl Finding {
    /// Whether it keeps the snapshot from restoring into the job as it is.
    pub fn is_incompatible(&self) -> bool {
        matches!(
            self,
            Finding::NotRestored { .. }
                | Finding::MaxParallelism { .. }
                | Finding::KindChanged { .. }
                | Finding::TypeChanged { .. }
                | Finding::TtlSwitched { .. }
        )
    }

    /// A `statekit rewrite` that resolves it, where one does.
    pub fn fix(&self) -> Option<String> {
        match self {
            Finding::NotRestored { uid } => Some(format!("statekit rewrite IN OUT --drop-operator {uid}")),
            Finding::StateNotDeclared { uid, state } => {
                Some(format!("statekit rewrite IN OUT --drop-state {uid}/{state}"))
            }
            Finding::MaxParallelism { uid, job, .. } => {
                Some(format!("statekit rewrite IN OUT --max-parallelism {uid}={job}"))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::NotRestored { uid } => write!(
                f,
                "operator {uid:?}: the snapshot has its state but the job does not declare it: it would not be restored (needs --allow-non-restored-state)"
            ),
            Finding::NewOperator { uid } => write!(f, "operator {uid:?}: new in the job, starts empty"),
            Finding::MaxParallelism { uid, snapshot, job } => write!(
                f,
                "operator {uid:?}: max parallelism {snapshot} in the snapshot, {job} in the job: every key would belong to another key group"
            ),
            Finding::NewState { uid, state } => write!(f, "operator {uid:?}: state {state:?} is new, starts empty"),
            Finding::StateNotDeclared { uid, state } => write!(
                f,
                "operator {uid:?}: state {state:?} is in the snapshot but the job does not declare it: not restored"
            ),
            Finding::KindChanged {
                uid,
                state,
                snapshot,
                job,
            } => write!(f, "operator {uid:?}: state {state:?} is {snapshot} in the snapshot, {job} in the job"),
            Finding::TypeChanged {
                uid,
                state,
                field,
                snapshot,
                job,
            } => write!(
                f,
                "operator {uid:?}: state {state:?}: {field} type {snapshot} in the snapshot, {job} in the job"
            ),
            Finding::TtlSwitched { uid, state, snapshot } => write!(
                f,
                "operator {uid:?}: state {state:?}: TTL {} in the snapshot, {} in the job (the stored layout differs)",
                if *snapshot { "on" } else { "off" },
                if *snapshot { "off" } else { "on" }
            ),
            Finding::TtlChanged {
                uid,
                state,
                snapshot,
                job,
            } => write!(
                f,
                "operator {uid:?}: state {state:?}: TTL {snapshot} ms in the snapshot, {job} ms in the job (compatible)"
            ),
        }
    }
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Everything found, incompatibilities and notes, in operator order.
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// Whether the snapshot restores into the job as it is.
    pub fn is_compatible(&self) -> bool {
        !self.findings.iter().any(Finding::is_incompatible)
    }
}

/// Will a snapshot of schema `snapshot` restore into a job that declares `job`? Operators
/// are matched by uid; keyed states by name (kind, key, namespace, user-key and value types,
/// TTL on/off), operator states by name (mode and types).
pub fn check(snapshot: &JobSchema, job: &JobSchema) -> CheckReport {
    let mut findings = Vec::new();
    for s in &snapshot.operators {
        let Some(j) = job.operator(&s.uid) else {
            if !(s.keyed_states.is_empty() && s.operator_states.is_empty()) {
                findings.push(Finding::NotRestored { uid: s.uid.clone() });
            }
            continue;
        };
        let uid = &s.uid;
        if s.max_parallelism != j.max_parallelism && !s.keyed_states.is_empty() {
            findings.push(Finding::MaxParallelism {
                uid: uid.clone(),
                snapshot: s.max_parallelism,
                job: j.max_parallelism,
            });
        }
        for ks in &s.keyed_states {
            let Some(kj) = j.keyed_states.iter().find(|k| k.name == ks.name) else {
                findings.push(Finding::StateNotDeclared {
                    uid: uid.clone(),
                    state: ks.name.clone(),
                });
                continue;
            };
            let state = || ks.name.clone();
            if ks.kind != kj.kind {
                findings.push(Finding::KindChanged {
                    uid: uid.clone(),
                    state: state(),
                    snapshot: ks.kind.clone(),
                    job: kj.kind.clone(),
                });
                continue;
            }
            let types = [
                ("key", Some(&ks.key), Some(&kj.key)),
                ("namespace", Some(&ks.namespace), Some(&kj.namespace)),
                ("user_key", ks.user_key.as_ref(), kj.user_key.as_ref()),
                ("value", Some(&ks.value), Some(&kj.value)),
            ];
            for (field, a, b) in types {
                if a != b {
                    let show = |t: Option<&String>| t.cloned().unwrap_or_else(|| "none".into());
                    findings.push(Finding::TypeChanged {
                        uid: uid.clone(),
                        state: state(),
                        field: field.into(),
                        snapshot: show(a),
                        job: show(b),
                    });
                }
            }
            match (ks.ttl_ms, kj.ttl_ms) {
                (Some(_), None) | (None, Some(_)) => findings.push(Finding::TtlSwitched {
                    uid: uid.clone(),
                    state: state(),
                    snapshot: ks.ttl_ms.is_some(),
                }),
                (Some(a), Some(b)) if a != b => findings.push(Finding::TtlChanged {
                    uid: uid.clone(),
                    state: state(),
                    snapshot: a,
                    job: b,
                }),
                _ => {}
            }
        }
        for kj in j
            .keyed_states
            .iter()
            .filter(|k| !s.keyed_states.iter().any(|x| x.name == k.name))
        {
            findings.push(Finding::NewState {
                uid: uid.clone(),
                state: kj.name.clone(),
            });
        }
        for os in &s.operator_states {
            let Some(oj) = j.operator_states.iter().find(|o| o.name == os.name) else {
                findings.push(Finding::StateNotDeclared {
                    uid: uid.clone(),
                    state: os.name.clone(),
                });
                continue;
            };
            if os.mode != oj.mode {
                findings.push(Finding::KindChanged {
                    uid: uid.clone(),
                    state: os.name.clone(),
                    snapshot: os.mode.clone(),
                    job: oj.mode.clone(),
                });
                continue;
            }
            for (field, a, b) in [
                ("value", Some(&os.value), Some(&oj.value)),
                ("key", os.key.as_ref(), oj.key.as_ref()),
            ] {
                if a != b {
                    let show = |t: Option<&String>| t.cloned().unwrap_or_else(|| "none".into());
                    findings.push(Finding::TypeChanged {
                        uid: uid.clone(),
                        state: os.name.clone(),
                        field: field.into(),
                        snapshot: show(a),
                        job: show(b),
                    });
                }
            }
        }
        for oj in j
            .operator_states
            .iter()
            .filter(|o| !s.operator_states.iter().any(|x| x.name == o.name))
        {
            findings.push(Finding::NewState {
                uid: uid.clone(),
                state: oj.name.clone(),
            });
        }
    }
    for j in job.operators.iter().filter(|j| snapshot.operator(&j.uid).is_none()) {
        findings.push(Finding::NewOperator { uid: j.uid.clone() });
    }
    CheckReport { findings }
}
