//! Out-of-memory detection without a sanitizer.
//!
//! libFuzzer's `-malloc_limit_mb` relies on malloc hooks that only a sanitizer runtime
//! installs, so with `-s none` a single huge allocation (a corrupted length used as an
//! allocation size) would go unnoticed until it exhausts memory, or be satisfied lazily by the
//! kernel and never be noticed at all. [`CappedAlloc`] is the `#[global_allocator]` of every
//! fuzz target: it aborts the process (libFuzzer then saves the input as a `crash-*`
//! artifact) when one allocation asks for more than
//! `max(64 MiB, 512 × the current input's length)`. Every target calls [`crate::begin`]
//! first, which sets the input length.
//!
//! The abort path allocates nothing: the message is formatted into a stack buffer and
//! written to fd 2 with `libc::write`. Only when `RUST_BACKTRACE` is set (reproducing a
//! finding) does it then print a backtrace of the allocation, which allocates; the cap is off
//! from then on, until the abort.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The cap never goes below this many bytes.
pub const FLOOR_BYTES: usize = 64 << 20;
/// The cap is at least this multiple of the input's length.
pub const PER_INPUT_BYTE: usize = 512;

/// The marker every allocation-cap abort prints first (`scripts/fuzz.sh` looks for it).
pub const MARKER: &str = "==statekit-fuzz== allocation cap exceeded";

static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
/// Set once the cap was exceeded: the backtrace printed before the abort may allocate freely.
static TRIPPED: AtomicBool = AtomicBool::new(false);

/// Sets the length of the input being run (the cap scales with it).
pub fn set_input_len(len: usize) {
    INPUT_LEN.store(len, Ordering::Relaxed);
}

/// The cap for the current input.
pub fn cap() -> usize {
    FLOOR_BYTES.max(INPUT_LEN.load(Ordering::Relaxed).saturating_mul(PER_INPUT_BYTE))
}

/// `System`, aborting on any single allocation above [`cap`].
pub struct CappedAlloc;

#[inline]
fn check(size: usize) {
    let cap = cap();
    if size > cap && !TRIPPED.load(Ordering::Relaxed) {
        over_cap(size, cap);
    }
}

#[cold]
#[inline(never)]
fn over_cap(size: usize, cap: usize) -> ! {
    let mut buf = [0u8; 192];
    let mut n = 0;
    let mut put = |s: &[u8]| {
        for &b in s {
            if n < buf.len() {
                buf[n] = b;
                n += 1;
            }
        }
    };
    put(MARKER.as_bytes());
    put(b": one allocation of ");
    put(digits(size, &mut [0u8; 20]));
    put(b" bytes, the cap is ");
    put(digits(cap, &mut [0u8; 20]));
    put(b" bytes (max(64 MiB, 512 x input length ");
    put(digits(INPUT_LEN.load(Ordering::Relaxed), &mut [0u8; 20]));
    put(b"))\n");
    // SAFETY: writing an initialized stack buffer to fd 2.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), n);
    }
    TRIPPED.store(true, Ordering::Relaxed);
    if std::env::var_os("RUST_BACKTRACE").is_some() {
        eprintln!("{}", std::backtrace::Backtrace::force_capture());
    }
    std::process::abort()
}

fn digits(mut v: usize, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &out[i..];
        }
    }
}

// SAFETY: forwards to `System` unchanged; the check only aborts.
unsafe impl GlobalAlloc for CappedAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}
