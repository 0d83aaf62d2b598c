//! The page-state word: one `AtomicU64` per page id holding the latch state
//! (top 8 bits) and a version (low 56 bits), as in vmcache.
//!
//! State byte: 0 = evicted (not in memory; zeroed memory means "evicted"),
//! 1 = unlocked, 2 = marked (clock second chance), 3 = loading (a read is in
//! flight: this is the table of reads in flight, so two tasks that miss the
//! same page issue one read), 4 = exclusively locked, 5..=255 = shared with
//! `state - 4` holders. Every exclusive unlock and every eviction bumps the
//! version, so an optimistic reader detects any change by comparing words.

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) const EVICTED: u64 = 0;
pub(crate) const UNLOCKED: u64 = 1;
pub(crate) const MARKED: u64 = 2;
pub(crate) const LOADING: u64 = 3;
pub(crate) const LOCKED: u64 = 4;
const SHARED_BASE: u64 = 4;
const SHARED_MAX: u64 = 255 - SHARED_BASE;

const VERSION_MASK: u64 = (1 << 56) - 1;

#[inline]
pub(crate) fn state_of(word: u64) -> u64 {
    word >> 56
}

#[inline]
pub(crate) fn version_of(word: u64) -> u64 {
    word & VERSION_MASK
}

#[inline]
pub(crate) fn make(state: u64, version: u64) -> u64 {
    debug_assert!(state <= 255);
    (state << 56) | (version & VERSION_MASK)
}

/// True when an optimistic reader may read the page's frame.
#[inline]
pub(crate) fn readable(word: u64) -> bool {
    let s = state_of(word);
    s == UNLOCKED || s == MARKED || s > SHARED_BASE
}

/// Latch operations on one page's state word. All are try-operations: none
/// blocks, so a task that fails simply restarts after yielding.
#[repr(transparent)]
pub(crate) struct PageState(pub(crate) AtomicU64);

impl PageState {
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn cas(&self, old: u64, new: u64) -> bool {
        self.0
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Exclusive from a readable, unshared word (optimistic upgrade).
    #[inline]
    pub(crate) fn try_lock_x(&self, word: u64) -> bool {
        let s = state_of(word);
        (s == UNLOCKED || s == MARKED) && self.cas(word, make(LOCKED, version_of(word)))
    }

    /// Releases an exclusive latch into `state` (unlocked or evicted),
    /// bumping the version.
    #[inline]
    pub(crate) fn unlock_x_into(&self, state: u64) {
        let word = self.load();
        debug_assert_eq!(
            state_of(word),
            LOCKED,
            "unlock of a page not exclusively locked"
        );
        self.0
            .store(make(state, version_of(word) + 1), Ordering::Release);
    }

    /// One more shared holder, if the page is readable and not exclusive.
    #[inline]
    pub(crate) fn try_lock_s(&self) -> bool {
        let word = self.load();
        let s = state_of(word);
        let next = match s {
            UNLOCKED | MARKED => SHARED_BASE + 1,
            s if s > SHARED_BASE && s - SHARED_BASE < SHARED_MAX => s + 1,
            _ => return false,
        };
        self.cas(word, make(next, version_of(word)))
    }

    /// One shared holder fewer (the version does not change: readers
    /// changed nothing).
    #[inline]
    pub(crate) fn unlock_s(&self) {
        loop {
            let word = self.load();
            let s = state_of(word);
            debug_assert!(s > SHARED_BASE, "unlock_s without a shared latch");
            let next = if s == SHARED_BASE + 1 {
                UNLOCKED
            } else {
                s - 1
            };
            if self.cas(word, make(next, version_of(word))) {
                return;
            }
        }
    }

    /// Clears the clock mark of an accessed page (best effort).
    #[inline]
    pub(crate) fn touch(&self, word: u64) {
        if state_of(word) == MARKED {
            let _ = self.cas(word, make(UNLOCKED, version_of(word)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latch_transitions() {
        let p = PageState(AtomicU64::new(make(UNLOCKED, 7)));
        assert!(p.try_lock_s() && p.try_lock_s());
        assert_eq!(state_of(p.load()), SHARED_BASE + 2);
        assert!(!p.try_lock_x(p.load()), "no exclusive while shared");
        p.unlock_s();
        p.unlock_s();
        assert_eq!(
            p.load(),
            make(UNLOCKED, 7),
            "shared latches keep the version"
        );
        let w = p.load();
        assert!(p.try_lock_x(w));
        assert!(!p.try_lock_s(), "no shared while exclusive");
        assert!(!readable(p.load()));
        p.unlock_x_into(UNLOCKED);
        assert_eq!(
            p.load(),
            make(UNLOCKED, 8),
            "exclusive unlock bumps the version"
        );
        assert!(!p.try_lock_x(w), "stale word cannot upgrade");
        let w = p.load();
        p.touch(w);
        assert!(p.cas(w, make(MARKED, 8)));
        p.touch(p.load());
        assert_eq!(state_of(p.load()), UNLOCKED);
        assert_eq!(state_of(0), EVICTED, "zeroed memory is evicted");
    }
}
