//! What this process is waiting for, said on stderr when SIGINT or SIGTERM stops it during the
//! wait (a launcher's timeout, Ctrl-C): a rank killed while it waits names what it waited for
//! instead of dying silently. A leaf: the runtime's long waits set the words ([`set`]) and clear
//! them; [`install`] takes the two signals where the program left them at their default.
//!
//! The handler only writes the words (one `write(2)`) and then dies of the signal as it would
//! have: the default action is put back and the signal raised again. The words live in leaked
//! buffers, so a handler reading them never races a free: they are set only for waits that
//! already lasted a second, a few hundred bytes each.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

static WORDS: AtomicPtr<Vec<u8>> = AtomicPtr::new(std::ptr::null_mut());

/// The words said if the process is stopped now (`None`: no wait worth naming).
pub fn set(words: Option<String>) {
    let new = match words {
        Some(w) => Box::into_raw(Box::new(format!("{w}\n").into_bytes())),
        None => std::ptr::null_mut(),
    };
    // The old words are left to the process (see the module docs): a handler may be reading them.
    WORDS.swap(new, Ordering::SeqCst);
}

/// The words set now, if any.
pub fn get() -> Option<String> {
    let p = WORDS.load(Ordering::SeqCst);
    // SAFETY: a non-null pointer came from `Box::into_raw` in `set` and is never freed.
    (!p.is_null()).then(|| String::from_utf8_lossy(unsafe { &*p }).trim_end().to_string())
}

extern "C" fn say_and_die(sig: libc::c_int) {
    let p = WORDS.load(Ordering::SeqCst);
    if !p.is_null() {
        // SAFETY: see `get`; write(2), signal(2) and raise(3) are async-signal-safe.
        let words = unsafe { &*p };
        unsafe { libc::write(2, words.as_ptr().cast(), words.len()) };
    }
    unsafe {
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
