//! What this process is waiting for, said on stderr when SIGINT or SIGTERM stops it during the
//! wait (a launcher's timeout, Ctrl-C): a rank killed while it waits names what it waited for
//! instead of dying silently. A leaf: the runtime's long waits set the words ([`set`]) and clear
//! them; [`install`] takes the two signals where the program left them at their default.
//!
//! The handler only writes the words (one `write(2)`) and then dies of the signal as it would
//! have: the default action is put back and the signal raised again. The words live in one fixed
//! buffer of atomics (no allocation, nothing to free under a handler); a handler that runs while
//! another thread rewrites them may write a mixed line, never anything unsafe.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

/// The longest words kept (longer ones are cut).
const CAP: usize = 1024;
static WORDS: [AtomicU8; CAP] = [const { AtomicU8::new(0) }; CAP];
static LEN: AtomicUsize = AtomicUsize::new(0);

/// The words said if the process is stopped now (`None`: no wait worth naming).
pub fn set(words: Option<String>) {
    LEN.store(0, Ordering::SeqCst);
    let Some(w) = words else { return };
    let mut bytes = w.into_bytes();
    bytes.truncate(CAP - 1);
    bytes.push(b'\n');
    for (slot, b) in WORDS.iter().zip(&bytes) {
        slot.store(*b, Ordering::Relaxed);
    }
    LEN.store(bytes.len(), Ordering::SeqCst);
}

/// The words set now, if any.
pub fn get() -> Option<String> {
    let n = LEN.load(Ordering::SeqCst);
    let bytes: Vec<u8> = WORDS[..n].iter().map(|b| b.load(Ordering::Relaxed)).collect();
    (n > 0).then(|| String::from_utf8_lossy(&bytes).trim_end().to_string())
}

extern "C" fn say_and_die(sig: libc::c_int) {
    let n = LEN.load(Ordering::SeqCst).min(CAP);
    let mut line = [0u8; CAP];
    for (to, from) in line.iter_mut().zip(&WORDS[..n]) {
        *to = from.load(Ordering::Relaxed);
    }
    // SAFETY: write(2), signal(2) and raise(3) are async-signal-safe; `line` lives on this stack.
    unsafe {
        if n > 0 {
            libc::write(2, line.as_ptr().cast(), n);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Take SIGINT and SIGTERM where the program left them at their default action (a program's
/// own handler, or an ignored signal, is kept), once per process.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: sigaction with a zeroed struct reads the current action; the new one is a
            // plain handler of the right signature.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                    continue;
                }
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = say_and_die as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(sig, &new, std::ptr::null_mut());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_words_are_kept_cut_and_cleared() {
        super::set(Some("waiting for rank(s) 3".into()));
        assert_eq!(super::get().as_deref(), Some("waiting for rank(s) 3"));
        super::set(Some("x".repeat(5000)));
        assert_eq!(super::get().map(|w| w.len()), Some(super::CAP - 1));
        super::set(None);
        assert_eq!(super::get(), None);
    }
}
