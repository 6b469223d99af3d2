//! The keyed state of one output subtask as a view: the input's views of its key groups, their
//! states renamed, dropped and reindexed to the output's list, expired TTL data left out.

use crate::plan::{KeyFilter, OperatorPlan};
use statekit_core::{
    Entry, EntryVisitor, KeyGroupAssigner, KeyGroupRange, KeyGroupScheme, KeyedStateView, OwnedEntry, StateDescriptor,
    StateError,
};
use std::ops::ControlFlow;

/// One input view and where its states go.
struct Part {
    view: Box<dyn KeyedStateView>,
    /// Input state index → output state index (`None`: dropped).
    map: Vec<Option<u32>>,
    /// Whether `map` keeps the input's order of states, so entries can stream through in
    /// canonical order without sorting.
    ordered: bool,
}

/// The output's keyed state of one subtask (key groups `range`).
pub(crate) struct MigratedView {
    max_parallelism: u32,
    scheme: KeyGroupScheme,
    range: KeyGroupRange,
    states: Vec<StateDescriptor>,
    parts: Vec<Part>,
    purge_at: Option<i64>,
    keys: KeyFilter,
}

impl MigratedView {
    /// The view of `range` of operator `op` over `views` (the input's views meeting `range`),
    /// in the input's key groups (its max parallelism).
    pub(crate) fn new(
        op: &OperatorPlan,
        range: KeyGroupRange,
        views: Vec<Box<dyn KeyedStateView>>,
        purge_at: Option<i64>,
    ) -> Self {
        let states: Vec<StateDescriptor> = op.keyed_states.iter().map(|s| s.target.clone()).collect();
        let parts = views
            .into_iter()
            .map(|view| {
                let map: Vec<Option<u32>> = view
                    .states()
                    .iter()
                    .map(|d| {
                        op.keyed_states
                            .iter()
                            .position(|s| s.source == d.name)
                            .and_then(|i| u32::try_from(i).ok())
                    })
                    .collect();
                let kept: Vec<u32> = map.iter().flatten().copied().collect();
                let ordered = kept.windows(2).all(|w| w.first() < w.get(1));
                Part { view, map, ordered }
            })
            .collect();
        MigratedView {
            max_parallelism: op.source_max_parallelism,
            scheme: op.key_group_scheme,
            range,
            states,
            parts,
            purge_at,
            keys: op.keys.clone(),
        }
    }

    /// The output entry of input entry `e` of `part`, or `None` when it is left out.
    fn translate<'e>(&self, part: &Part, e: &Entry<'e>) -> Option<Entry<'e>> {
        let state = (*part.map.get(e.state as usize)?)?;
        if !self.keys.keeps(e.key) {
            return None;
        }
        if let (Some(now), Some(ts)) = (self.purge_at, e.timestamp) {
            let ttl = self.states.get(state as usize).and_then(|d| d.ttl);
            if ttl.is_some_and(|t| t.is_expired(ts, now)) {
                return None;
            }
        }
        Some(Entry { state, ..*e })
    }
}

impl KeyedStateView for MigratedView {
    statekit_core::keyed_accessors!(max_parallelism, key_group_scheme, key_group_range, states);

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        if !self.range.contains(key_group) {
            return Ok(ControlFlow::Continue(()));
        }
        let parts: Vec<&Part> = self
            .parts
            .iter()
            .filter(|p| p.view.key_group_range().contains(key_group))
            .collect();
        if let [part] = parts.as_slice() {
            if part.ordered {
                return part
                    .view
                    .visit_key_group(key_group, &mut |e| match self.translate(part, e) {
                        Some(out) => visitor(&out),
                        None => Ok(ControlFlow::Continue(())),
                    });
            }
        }
        // States reordered (an input subtask listed them in another order) or the key group in
        // several input views: one key group is gathered and put in canonical order (a stable
        // sort keeps list elements in their order).
        let mut entries: Vec<OwnedEntry> = Vec::new();
        for part in parts {
            let _ = part.view.visit_key_group(key_group, &mut |e| {
                if let Some(out) = self.translate(part, e) {
                    entries.push(OwnedEntry::from_entry(key_group, &out));
                }
                Ok(ControlFlow::Continue(()))
            })?;
        }
        entries.sort_by(|a, b| a.as_entry().canonical_cmp(&b.as_entry()));
        for e in &entries {
            if visitor(&e.as_entry())?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// The largest factor by which a max parallelism may grow for [`SplitView`] to be used instead
/// of the external sort: each input key group is read once per output key group it splits
/// into, so beyond a few the sort's one pass is cheaper.
pub(crate) const MAX_SPLIT_FACTOR: u32 = 4;

/// Whether `op`'s new max parallelism splits every input key group (a multiple of the input's,
/// at most [`MAX_SPLIT_FACTOR`] times it), so [`SplitView`] can stand in for the external
/// sort. Both key-group rules take a hash modulo the max parallelism, so either splits so.
pub(crate) fn splits(op: &OperatorPlan) -> bool {
    let (from, to) = (op.source_max_parallelism, op.max_parallelism);
    from > 0 && to > from && to % from == 0 && to / from <= MAX_SPLIT_FACTOR
}

/// The input key groups that output key groups `range` draw from when the max parallelism
/// grows from `from` to a multiple of it: key group `k`'s keys are all in input key group
/// `k mod from` (`murmur(key) mod (m·from) mod from = murmur(key) mod from`). The smallest
/// range covering them (every key group when `range` wraps around).
pub(crate) fn split_source(range: KeyGroupRange, from: u32) -> KeyGroupRange {
    let from = from.max(1);
    match range.end_inclusive() {
        None => KeyGroupRange::EMPTY,
        Some(end) if range.len() < from && range.start() % from <= end % from => {
            KeyGroupRange::new(range.start() % from, end % from)
        }
        Some(_) => KeyGroupRange::all(from),
    }
}

/// Output key groups under a max parallelism that is a multiple of the input's, streamed
/// without sorting: output key group `k` is input key group `k mod N`'s entries whose key
/// falls in `k` under the new max parallelism. A key group's entries are in canonical order,
/// and a subsequence of them still is. A key found in an input key group its hash does not
/// map to is damage (the sort would move it silently; here it would be lost), so it is an
/// error naming both groups.
pub(crate) struct SplitView {
    inner: MigratedView,
    max_parallelism: u32,
    range: KeyGroupRange,
    /// Per output state: the operator's key-group rule for its key type at the new max
    /// parallelism.
    groups: Vec<KeyGroupAssigner>,
}

impl SplitView {
    /// Output key groups `range` under `max_parallelism`, from `inner` (the input's key
    /// groups [`split_source`] names, edits applied).
    pub(crate) fn new(inner: MigratedView, max_parallelism: u32, range: KeyGroupRange) -> Self {
        let groups = inner
            .states()
            .iter()
            .map(|d| inner.scheme.assigner(&d.key_schema, max_parallelism))
            .collect();
        SplitView {
            inner,
            max_parallelism,
            range,
            groups,
        }
    }
}

impl KeyedStateView for SplitView {
    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn key_group_scheme(&self) -> KeyGroupScheme {
        self.inner.scheme
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn states(&self) -> &[StateDescriptor] {
        self.inner.states()
    }

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        if !self.range.contains(key_group) {
            return Ok(ControlFlow::Continue(()));
        }
        let from = self.inner.max_parallelism().max(1);
        let source = key_group % from;
        let mut misplaced: Option<u32> = None;
        let flow = self.inner.visit_key_group(source, &mut |e| {
            let groups = self
                .groups
                .get(e.state as usize)
                .ok_or(StateError::UnknownState(e.state.to_string()))?;
            let to = groups
                .key_group(e.key)
                .map_err(|err| StateError::Other(Box::new(err)))?;
            if to == key_group {
                visitor(e)
            } else if to % from == source {
                Ok(ControlFlow::Continue(()))
            } else {
                misplaced = Some(to % from);
                Ok(ControlFlow::Break(()))
            }
        })?;
        if let Some(belongs) = misplaced {
            return Err(StateError::Stream(statekit_core::StreamProblem::MisplacedKey {
                key_group: source,
                max_parallelism: from,
                belongs,
            }));
        }
        Ok(flow)
    }
}
