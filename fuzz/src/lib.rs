//! Shared parts of statekit's fuzz targets (see `fuzz/README.md`).
//!
//! * [`alloc`]: the allocation cap (the global allocator of every target);
//! * [`fixup`]: CRC repair, so mutations reach the structure behind the checksums;
//! * [`typed`]: typed decoding by schema as the tools do it, and the schema builder.

pub mod alloc;
pub mod fixup;
pub mod typed;

#[global_allocator]
static ALLOC: alloc::CappedAlloc = alloc::CappedAlloc;

/// Call first in every fuzz target: records the input's length for the allocation cap.
#[inline]
pub fn begin(data: &[u8]) {
    alloc::set_input_len(data.len());
}
