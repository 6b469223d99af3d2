//! The inspection commands. Each is a thin layer over library calls; none reads a format by
//! itself.

pub mod changelog;
pub mod diff;
pub mod dump;
pub mod gc;
pub mod inspect;
pub mod migrate;
#[cfg(feature = "query")]
pub mod query;
pub mod table;
