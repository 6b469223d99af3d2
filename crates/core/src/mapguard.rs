//! Surviving the truncation of a memory-mapped file.
//!
//! Readers map snapshot files ([`crate::storage::LocalStorage::open`]). If another process
//! truncates a file while it is mapped (`cp` over it, `truncate`, a tool writing in place),
//! touching a page past the new end raises `SIGBUS`, which kills the process. statekit never
//! truncates a committed file itself (writers go through a temporary name and rename; gc
//! unlinks, which leaves mappings intact), but a long-running reader — the inspector, a diff of
//! two large snapshots — cannot rule out other programs.
//!
//! So every map is registered here, and a `SIGBUS` handler checks the faulting address: inside
//! a registered map, it replaces the pages from the faulting one to the end of the map with
//! anonymous zero pages (`mmap(MAP_FIXED | MAP_ANONYMOUS)`, async-signal-safe), marks the map
//! as truncated and returns; the read then sees zeros, which fail the next checksum, and the
//! reader reports the file as truncated while being read ([`MapGuard::truncated`]) instead of
//! the checksum. A fault elsewhere goes to the handler installed before (Rust's own, or the
//! default action), so nothing else changes.
//!
//! The registry is a fixed table of atomics (no locks or allocation in the handler). When it is
//! full a map is simply not guarded.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Maps guarded at once; more are mapped unguarded.
const SLOTS: usize = 16384;

static STARTS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static ENDS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static USED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
static TRUNCATED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// Where the next search for a free slot starts.
static HINT: AtomicUsize = AtomicUsize::new(0);
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// The disposition of `SIGBUS` before ours, to pass other faults on to.
struct Previous(libc::sigaction);
// SAFETY: a plain C struct of integers and function addresses, written once before the
// handler is installed and only read afterwards.
unsafe impl Sync for Previous {}
unsafe impl Send for Previous {}
static PREVIOUS: OnceLock<Option<Previous>> = OnceLock::new();

/// A registered map; unregisters on drop (drop it before unmapping).
#[derive(Debug)]
pub(crate) struct MapGuard {
    slot: Option<usize>,
}

impl MapGuard {
    /// Registers the map `[ptr, ptr + len)`.
    pub(crate) fn register(ptr: *const u8, len: usize) -> MapGuard {
        if len == 0 || !install() {
            return MapGuard { slot: None };
        }
        let start = HINT.load(Ordering::Relaxed);
        for k in 0..SLOTS {
            let i = (start + k) % SLOTS;
            if USED.get(i).is_some_and(|u| {
                u.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            }) {
                HINT.store(i + 1, Ordering::Relaxed);
                TRUNCATED[i].store(false, Ordering::Relaxed);
                ENDS[i].store(ptr as usize + len, Ordering::Relaxed);
                STARTS[i].store(ptr as usize, Ordering::Release);
                return MapGuard { slot: Some(i) };
            }
        }
        MapGuard { slot: None }
    }

    /// True when a page of the map faulted because its file had been truncated: the bytes
    /// read since are zeros, not the file's.
    pub(crate) fn truncated(&self) -> bool {
        self.slot.is_some_and(|i| TRUNCATED[i].load(Ordering::Acquire))
    }
}

impl Drop for MapGuard {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            STARTS[i].store(0, Ordering::Release);
            ENDS[i].store(0, Ordering::Relaxed);
            USED[i].store(false, Ordering::Release);
        }
    }
}

/// Installs the handler once; false when it could not be installed.
fn install() -> bool {
    PREVIOUS
        .get_or_init(|| {
            // SAFETY: sysconf and sigaction with valid, initialised arguments; the handler only
            // uses async-signal-safe operations (atomics, mmap, sigaction).
            unsafe {
                let page = libc::sysconf(libc::_SC_PAGESIZE);
                if page > 0 {
                    PAGE.store(page as usize, Ordering::Relaxed);
                }
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, &new, &mut old) != 0 {
                    return None;
                }
                Some(Previous(old))
            }
        })
        .is_some()
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_addr() as usize }
    };
    if addr != 0 {
        for i in 0..SLOTS {
            let start = STARTS[i].load(Ordering::Acquire);
            if start == 0 || addr < start {
                continue;
            }
            let end = ENDS[i].load(Ordering::Relaxed);
            if addr >= end {
                continue;
            }
            let page = PAGE.load(Ordering::Relaxed);
            let from = addr & !(page - 1);
            let to = end.div_ceil(page) * page;
            // SAFETY: [from, to) lies inside a live, registered read-only map of this process
            // (the map is unregistered before it is unmapped); replacing its pages with
            // anonymous zero pages keeps the address range valid until the owner unmaps it.
            let p = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    to - from,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                TRUNCATED[i].store(true, Ordering::Release);
                return;
            }
            break;
        }
    }
    // Not ours (or the remap failed): what would have happened without us.
    // SAFETY: calls the previous handler with the arguments the kernel gave us, or restores
    // the default action so the faulting instruction, re-executed, ends the process as usual.
    unsafe {
        match PREVIOUS.get() {
            Some(Some(Previous(prev))) if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN => {
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(prev.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                    f(sig);
                }
            }
            _ => {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::storage::{LocalStorage, Storage};

    /// Regression (issue 10): truncating a file while it is mapped killed the reader with
    /// SIGBUS. Now the read sees zeros and the blob says it was truncated.
    #[test]
    fn truncating_a_mapped_file_does_not_kill_the_reader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = LocalStorage::new(dir.path());
        let data = vec![7u8; 5 * 4096 + 100];
        s.put_atomic("f", &data).expect("put");
        let blob = s.open("f").expect("open");
        assert_eq!(blob.bytes()[0], 7);
        assert!(!blob.truncated());
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("f"))
            .expect("open for truncation")
            .set_len(4096)
            .expect("truncate");
        let bytes = blob.bytes();
        assert_eq!(bytes[100], 7, "the first page is still the file's");
        let tail: u64 = bytes[2 * 4096..].iter().map(|&b| u64::from(b)).sum();
        assert_eq!(tail, 0, "pages past the new end read as zeros");
        assert!(blob.truncated());
        // Other blobs are unaffected.
        s.put_atomic("g", &data).expect("put");
        let other = s.open("g").expect("open");
        assert!(!other.truncated());
        assert_eq!(other.bytes()[3 * 4096], 7);
    }
}
