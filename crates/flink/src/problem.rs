//! Why bytes of a Flink snapshot do not decode, or need what statekit does not have: the
//! typed reason inside a [`FlinkError`](crate::FlinkError) (which adds the file, offset and
//! field), built by the value, key and change decoders.

use statekit_core::schema::ValueEncodeError;
use statekit_core::{ErrorKind, KeyedStateKind};

/// The reason a value, key, record or change of a Flink snapshot cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeProblem {
    /// Reading a field failed (too few bytes, a bad flag): the reader's error.
    #[error("{0}")]
    Read(Box<crate::FlinkError>),
    /// A part of a key, value or record: `key`, `value`, `element`, …
    #[error("{part}: {source}")]
    In {
        /// The part.
        part: &'static str,
        /// What is wrong in it.
        source: Box<DecodeProblem>,
    },
    /// A state's layout (from its meta info).
    #[error("state {state:?}: {source}")]
    State {
        /// The state's name.
        state: String,
        /// What is wrong with it.
        source: Box<DecodeProblem>,
    },
    /// A `String` value that is null.
    #[error("a null String")]
    NullString,
    /// A part whose type has no length (Kryo, Avro, user code) where more follows.
    #[error("{what} of {type_name}{why}")]
    NoEnd {
        /// The part (`a key`, `a value`, …).
        what: &'static str,
        /// Its type.
        type_name: String,
        /// Why its end is needed (the layout).
        why: &'static str,
    },
    /// Counts that claim more than the bytes can hold.
    #[error("the value decodes to more than {limit} bytes ({}x the {encoded} bytes it may come from, plus {}): implausible counts", statekit_core::limits::MAX_EXPANSION, statekit_core::limits::VALUE_BUDGET_SLACK)]
    TooLarge {
        /// The value's budget.
        limit: u64,
        /// The bytes it may come from.
        encoded: usize,
    },
    /// A count past the value's budget.
    #[error("a count of {n} at {at}: {source}")]
    Count {
        /// The count.
        n: usize,
        /// Its position.
        at: usize,
        /// Why it is too large.
        source: Box<DecodeProblem>,
    },
    /// The decoded value does not encode by its schema.
    #[error("{0}")]
    Encode(ValueEncodeError),
    /// A value nested past the bound.
    #[error("value nested deeper than {}", crate::value::MAX_DEPTH)]
    TooDeep,
    /// A POJO subclass, whose fields the snapshot does not describe.
    #[error("a subclass of POJO {class} (flags {flags:#x}): its fields are not in the snapshot")]
    PojoSubclass {
        /// The POJO's class.
        class: String,
        /// The flags byte.
        flags: u8,
    },
    /// An enum ordinal past its constants.
    #[error("enum {class}: ordinal {ordinal} at {at}, {constants} constants")]
    EnumOrdinal {
        /// The enum's class.
        class: String,
        /// The ordinal read.
        ordinal: i32,
        /// Its position.
        at: usize,
        /// How many constants the enum has.
        constants: usize,
    },
    /// A value of a type statekit does not decode.
    #[error("a value of {class}, which statekit does not decode")]
    Opaque {
        /// Its class.
        class: String,
    },
    /// A byte Flink always writes as 0 that is not.
    #[error("a {what} byte of {byte:#04x}, where Flink writes 0")]
    NonZero {
        /// What the byte is (`Void`, `namespace`).
        what: &'static str,
        /// The byte.
        byte: u8,
    },
    /// A string length past the address space.
    #[error("string length")]
    StringLength,
    /// A string longer than the bytes left.
    #[error("a string of {chars} characters in {bytes} bytes")]
    StringTooLong {
        /// Its length in UTF-16 units.
        chars: usize,
        /// The bytes left.
        bytes: usize,
    },
    /// A string unit past 16 bits.
    #[error("string character {unit:#x} is not a UTF-16 unit")]
    NotUtf16 {
        /// The unit read.
        unit: u32,
    },
    /// Unpaired UTF-16 surrogates.
    #[error("a string with an unpaired surrogate")]
    UnpairedSurrogate,
    /// A string varint of more than 5 bytes.
    #[error("string varint longer than 5 bytes")]
    VarintTooLong,
    /// Bytes left over after a part.
    #[error("{bytes} bytes after {what}")]
    Trailing {
        /// How many.
        bytes: usize,
        /// After what (`the timer`, `the key's parts`, `the value`).
        what: &'static str,
    },
    /// Bytes left over after a change.
    #[error("{bytes} bytes after the change (operation {op})")]
    TrailingAfterChange {
        /// How many.
        bytes: usize,
        /// The change's operation.
        op: u8,
    },
    /// A change of a state id before the metadata change that declares it.
    #[error("state id {id} before its metadata change")]
    StateIdBeforeMetadata {
        /// The change's state id.
        id: u16,
    },
    /// A state id that maps to no state.
    #[error("state id")]
    StateId,
    /// A timer addition of other than one timer.
    #[error("{n} timers in one change (1 expected)")]
    TimerCount {
        /// The count read.
        n: i32,
    },
    /// An operation a timer state does not have.
    #[error("operation {op} on a timer state")]
    TimerOperation {
        /// The operation.
        op: u8,
    },
    /// An operation the state's kind does not have.
    #[error("operation {op} on {kind} state")]
    Operation {
        /// The operation.
        op: u8,
        /// The state's kind.
        kind: KeyedStateKind,
    },
    /// A map state whose meta info has no user key type.
    #[error("a map state without a user key type")]
    MapWithoutUserKey,
    /// Merged namespaces of a state whose merge is user code.
    #[error(
        "merged namespaces of reducing, aggregating or value state (a merging window): the merge function is user code"
    )]
    MergeNeedsUserCode,
    /// A key in the data of another key group (Flink's rule).
    #[error("a key of key group {found} in key group {expected}'s data")]
    ForeignKeyGroup {
        /// The key's group.
        found: u32,
        /// The group whose data holds it.
        expected: u32,
    },
    /// Broadcast keys of a type with no length.
    #[error("broadcast keys of {type_name} cannot be told apart from their values without user code")]
    BroadcastKeys {
        /// The key type.
        type_name: String,
    },
    /// Broadcast values of a type with no length, followed by more entries.
    #[error("broadcast values of {type_name} cannot be told apart from the next key without user code")]
    BroadcastValues {
        /// The value type.
        type_name: String,
    },
    /// List elements without their `,` separator.
    #[error("list elements are not separated by ','")]
    ListSeparator,
    /// An opaque key before a namespace of no fixed width.
    #[error("an opaque key before a variable-length namespace cannot be split")]
    OpaqueKeySplit,
    /// A key shorter than its namespace's width.
    #[error("shorter than its namespace")]
    KeyShorterThanNamespace,
    /// A length suffix that does not match the part before it.
    #[error("length suffix byte {byte} does not match the part's length")]
    LengthSuffix {
        /// The byte read.
        byte: u8,
    },
    /// A timer state whose meta info has no timer serializer.
    #[error("a timer state without a timer serializer")]
    NoTimerSerializer,
    /// A keyed state type statekit does not read.
    #[error("keyed state type {0:?} is not read")]
    StateType(Option<String>),
    /// No namespace serializer in the meta info.
    #[error("no namespace serializer")]
    NoNamespaceSerializer,
    /// No value serializer in the meta info.
    #[error("no value serializer")]
    NoValueSerializer,
    /// A list or map state whose value serializer is not a list's or map's.
    #[error("a {kind:?} state with value serializer {serializer}")]
    ValueSerializer {
        /// The state's kind.
        kind: KeyedStateKind,
        /// The serializer's type.
        serializer: String,
    },
}

impl DecodeProblem {
    /// `self` as a problem of `part` (`key`, `value`, `element`).
    pub(crate) fn in_part(self, part: &'static str) -> DecodeProblem {
        DecodeProblem::In {
            part,
            source: Box::new(self),
        }
    }

    /// What kind of failure this is: what needs user code or an unread feature is
    /// unsupported; everything else is damaged data.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DecodeProblem::Read(e) => e.kind(),
            DecodeProblem::In { source, .. }
            | DecodeProblem::State { source, .. }
            | DecodeProblem::Count { source, .. } => source.kind(),
            DecodeProblem::NoEnd { .. }
            | DecodeProblem::Opaque { .. }
            | DecodeProblem::PojoSubclass { .. }
            | DecodeProblem::MergeNeedsUserCode
            | DecodeProblem::BroadcastKeys { .. }
            | DecodeProblem::BroadcastValues { .. }
            | DecodeProblem::OpaqueKeySplit
            | DecodeProblem::StateType(_) => ErrorKind::Unsupported,
            _ => ErrorKind::Corrupt,
        }
    }
}

impl statekit_core::HasErrorKind for DecodeProblem {
    fn kind(&self) -> ErrorKind {
        DecodeProblem::kind(self)
    }
}

impl From<crate::FlinkError> for DecodeProblem {
    fn from(e: crate::FlinkError) -> Self {
        DecodeProblem::Read(Box::new(e))
    }
}

impl From<ValueEncodeError> for DecodeProblem {
    fn from(e: ValueEncodeError) -> Self {
        DecodeProblem::Encode(e)
    }
}

#[cfg(test)]
impl DecodeProblem {
    /// Whether the message contains `text` (the decoders' unit tests match on messages).
    pub(crate) fn contains(&self, text: &str) -> bool {
        self.to_string().contains(text)
    }
}
