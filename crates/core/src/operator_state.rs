//! Operator (non-keyed) state: list, union and broadcast, and their redistribution when
//! the parallelism changes. One implementation serves every keyed backend, as in Flink.

use crate::error::StateError;
use crate::state::{OperatorStateDescriptor, OperatorStateMode};
use std::collections::BTreeMap;

/// The contents of one operator state of one subtask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OperatorStateData {
    /// List and union states: the elements in order.
    List(Vec<Vec<u8>>),
    /// Broadcast state: entries in ascending key order.
    Broadcast(BTreeMap<Vec<u8>, Vec<u8>>),
}

/// A snapshot of one subtask's operator states.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorStateSnapshot {
    /// Each state with its contents, in registration order.
    pub states: Vec<(OperatorStateDescriptor, OperatorStateData)>,
}

impl OperatorStateSnapshot {
    /// True when no state is recorded.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }
}

/// A handle to a registered operator state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OperatorStateHandle(pub u32);

/// The operator state of one subtask.
#[derive(Clone, Debug, Default)]
pub struct OperatorStateStore {
    states: Vec<(OperatorStateDescriptor, OperatorStateData)>,
}

impl OperatorStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store holding a (redistributed) snapshot.
    pub fn from_snapshot(snapshot: OperatorStateSnapshot) -> Self {
        OperatorStateStore {
            states: snapshot.states,
        }
    }

    /// Registers a state or returns the existing one of that name (mode must match).
    pub fn register(&mut self, desc: OperatorStateDescriptor) -> Result<OperatorStateHandle, StateError> {
        if let Some(i) = self.states.iter().position(|(d, _)| d.name == desc.name) {
            let existing = &self.states[i].0;
            if existing.mode != desc.mode {
                return Err(StateError::Incompatible(crate::Incompatibility::OperatorStateMode {
                    state: desc.name.clone(),
                    now: desc.mode,
                    registered: existing.mode,
                }));
            }
            return Ok(OperatorStateHandle(i as u32));
        }
        let data = match desc.mode {
            OperatorStateMode::Broadcast => OperatorStateData::Broadcast(BTreeMap::new()),
            _ => OperatorStateData::List(Vec::new()),
        };
        self.states.push((desc, data));
        Ok(OperatorStateHandle((self.states.len() - 1) as u32))
    }

    /// The handle of a state by name.
    pub fn handle(&self, name: &str) -> Option<OperatorStateHandle> {
        self.states
            .iter()
            .position(|(d, _)| d.name == name)
            .map(|i| OperatorStateHandle(i as u32))
    }

    fn list_mut(&mut self, h: OperatorStateHandle) -> Result<&mut Vec<Vec<u8>>, StateError> {
        match self.states.get_mut(h.0 as usize) {
            Some((_, OperatorStateData::List(l))) => Ok(l),
            Some((d, _)) => Err(StateError::Incompatible(crate::Incompatibility::NotAList {
                state: d.name.clone(),
            })),
            None => Err(StateError::UnknownState(format!("operator state #{}", h.0))),
        }
    }

    fn map_mut(&mut self, h: OperatorStateHandle) -> Result<&mut BTreeMap<Vec<u8>, Vec<u8>>, StateError> {
        match self.states.get_mut(h.0 as usize) {
            Some((_, OperatorStateData::Broadcast(m))) => Ok(m),
            Some((d, _)) => Err(StateError::Incompatible(crate::Incompatibility::NotBroadcast {
                state: d.name.clone(),
            })),
            None => Err(StateError::UnknownState(format!("operator state #{}", h.0))),
        }
    }

    /// List/union: the elements.
    pub fn list(&mut self, h: OperatorStateHandle) -> Result<&[Vec<u8>], StateError> {
        Ok(self.list_mut(h)?.as_slice())
    }

    /// List/union: appends an element.
    pub fn list_add(&mut self, h: OperatorStateHandle, element: &[u8]) -> Result<(), StateError> {
        self.list_mut(h)?.push(element.to_vec());
        Ok(())
    }

    /// List/union: replaces all elements.
    pub fn list_update(&mut self, h: OperatorStateHandle, elements: Vec<Vec<u8>>) -> Result<(), StateError> {
        *self.list_mut(h)? = elements;
        Ok(())
    }

    /// Broadcast: the value of a key.
    pub fn broadcast_get(&mut self, h: OperatorStateHandle, key: &[u8]) -> Result<Option<&[u8]>, StateError> {
        Ok(self.map_mut(h)?.get(key).map(Vec::as_slice))
    }

    /// Broadcast: inserts or replaces an entry.
    pub fn broadcast_put(&mut self, h: OperatorStateHandle, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.map_mut(h)?.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    /// Broadcast: removes an entry.
    pub fn broadcast_remove(&mut self, h: OperatorStateHandle, key: &[u8]) -> Result<bool, StateError> {
        Ok(self.map_mut(h)?.remove(key).is_some())
    }

    /// Broadcast: all entries.
    pub fn broadcast_entries(&mut self, h: OperatorStateHandle) -> Result<&BTreeMap<Vec<u8>, Vec<u8>>, StateError> {
        Ok(&*self.map_mut(h)?)
    }

    /// A copy of every state (operator state is small; copying is the snapshot).
    pub fn snapshot(&self) -> OperatorStateSnapshot {
        OperatorStateSnapshot {
            states: self.states.clone(),
        }
    }
}

/// Redistributes operator state from `old.len()` subtasks to `new_parallelism` subtasks,
/// with Flink's rules:
/// * **list**: when the parallelism is unchanged each subtask keeps its elements; otherwise
///   all elements (old subtask order, then element order) are cut into `new_parallelism`
///   contiguous runs whose lengths differ by at most one, the longer runs first;
/// * **union**: every new subtask gets all elements of all old subtasks, in old subtask order;
/// * **broadcast**: new subtask `i` gets a copy of old subtask `i mod old.len()`'s map.
///
/// States are matched by name; a state missing from some old subtasks contributes nothing
/// from them. The union of the new list states equals the union of the old ones.
pub fn redistribute(
    old: &[OperatorStateSnapshot],
    new_parallelism: u32,
) -> Result<Vec<OperatorStateSnapshot>, StateError> {
    if new_parallelism == 0 {
        return Err(StateError::InvalidParallelism(
            crate::error::ParallelismError::ZeroNewParallelism,
        ));
    }
    let n = new_parallelism as usize;
    let mut out = vec![OperatorStateSnapshot::default(); n];
    let mut names: Vec<&OperatorStateDescriptor> = Vec::new();
    for snap in old {
        for (d, _) in &snap.states {
            match names.iter().find(|x| x.name == d.name) {
                Some(existing) if existing.mode != d.mode => {
                    return Err(StateError::Restore(crate::RestoreError::OperatorStateModes {
                        state: d.name.clone(),
                        first: existing.mode,
                        other: d.mode,
                    }))
                }
                Some(_) => {}
                None => names.push(d),
            }
        }
    }
    for desc in names {
        let per_old: Vec<Option<&OperatorStateData>> = old
            .iter()
            .map(|s| s.states.iter().find(|(d, _)| d.name == desc.name).map(|(_, data)| data))
            .collect();
        match desc.mode {
            OperatorStateMode::List if old.len() == n => {
                for (i, data) in per_old.iter().enumerate() {
                    let list = match data {
                        Some(OperatorStateData::List(l)) => l.clone(),
                        _ => Vec::new(),
                    };
                    out[i].states.push((desc.clone(), OperatorStateData::List(list)));
                }
            }
            OperatorStateMode::List | OperatorStateMode::Union => {
                let all: Vec<Vec<u8>> = per_old
                    .iter()
                    .flat_map(|d| match d {
                        Some(OperatorStateData::List(l)) => l.clone(),
                        _ => Vec::new(),
                    })
                    .collect();
                if desc.mode == OperatorStateMode::Union {
                    for slot in out.iter_mut() {
                        slot.states.push((desc.clone(), OperatorStateData::List(all.clone())));
                    }
                } else {
                    let base = all.len() / n;
                    let extra = all.len() % n;
                    let mut it = all.into_iter();
                    for (i, slot) in out.iter_mut().enumerate() {
                        let take = base + usize::from(i < extra);
                        let part: Vec<Vec<u8>> = it.by_ref().take(take).collect();
                        slot.states.push((desc.clone(), OperatorStateData::List(part)));
                    }
                }
            }
            OperatorStateMode::Broadcast => {
                for (i, slot) in out.iter_mut().enumerate() {
                    let src = if per_old.is_empty() {
                        None
                    } else {
                        per_old[i % per_old.len()]
                    };
                    let map = match src {
                        Some(OperatorStateData::Broadcast(m)) => m.clone(),
                        _ => BTreeMap::new(),
                    };
                    slot.states.push((desc.clone(), OperatorStateData::Broadcast(map)));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TypeSchema;

    fn desc(name: &str, mode: OperatorStateMode) -> OperatorStateDescriptor {
        OperatorStateDescriptor {
            name: name.into(),
            mode,
            value_schema: TypeSchema::Bytes,
            key_schema: (mode == OperatorStateMode::Broadcast).then_some(TypeSchema::Bytes),
        }
    }

    fn snapshot_with(elements: &[&[u8]], bkey: &[u8]) -> OperatorStateSnapshot {
        let mut s = OperatorStateStore::new();
        let l = s.register(desc("offsets", OperatorStateMode::List)).expect("reg");
        let u = s.register(desc("union", OperatorStateMode::Union)).expect("reg");
        let b = s.register(desc("rules", OperatorStateMode::Broadcast)).expect("reg");
        for e in elements {
            s.list_add(l, e).expect("add");
            s.list_add(u, e).expect("add");
        }
        s.broadcast_put(b, bkey, b"v").expect("put");
        s.snapshot()
    }

    #[test]
    fn list_split_union_broadcast() {
        let old = vec![
            snapshot_with(&[b"a", b"b", b"c"], b"k"),
            snapshot_with(&[b"d", b"e"], b"k"),
        ];
        let new = redistribute(&old, 3).expect("redistribute");
        let lists: Vec<Vec<Vec<u8>>> = new
            .iter()
            .map(|s| match &s.states[0].1 {
                OperatorStateData::List(l) => l.clone(),
                OperatorStateData::Broadcast(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            lists,
            vec![
                vec![b"a".to_vec(), b"b".to_vec()],
                vec![b"c".to_vec(), b"d".to_vec()],
                vec![b"e".to_vec()]
            ]
        );
        for s in &new {
            assert_eq!(
                s.states[1].1,
                OperatorStateData::List(vec![
                    b"a".to_vec(),
                    b"b".to_vec(),
                    b"c".to_vec(),
                    b"d".to_vec(),
                    b"e".to_vec()
                ])
            );
            match &s.states[2].1 {
                OperatorStateData::Broadcast(m) => assert_eq!(m.len(), 1),
                OperatorStateData::List(_) => unreachable!(),
            }
        }
        // Same parallelism keeps the list assignment; union still gives everyone everything.
        let same = redistribute(&old, 2).expect("redistribute");
        for (s, o) in same.iter().zip(&old) {
            assert_eq!(s.states[0], o.states[0]);
            assert_eq!(s.states[2], o.states[2]);
            assert_eq!(s.states[1].1, new[0].states[1].1);
        }
    }

    #[test]
    fn mode_mismatch_is_an_error() {
        let mut s = OperatorStateStore::new();
        s.register(desc("x", OperatorStateMode::List)).expect("reg");
        assert!(s.register(desc("x", OperatorStateMode::Union)).is_err());
    }
}
