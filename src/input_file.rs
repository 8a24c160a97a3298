//! Every file the library reads because a user named it (the store token file, a communicator
//! config, NCCL's key file) is read by [`read_bounded`]: a regular file, at most a cap given by
//! its use, read without ever blocking on what is not a file. A FIFO (which would block the
//! open or the read forever), a device (`/dev/zero`, `/dev/urandom`: endless), a socket or a
//! directory is refused before any byte is read; a file over the cap is refused after reading at
//! most one byte past it (a 200 MB file costs a few KiB of reading). Errors name what the file
//! is for (the variable or argument that named it), bounded ([`crate::quote`]).

use std::io::Read;
use std::path::Path;

/// What a path is when it is not a regular file, in words (`None` for a regular file).
fn not_regular(kind: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        None
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_dir() {
        Some("a directory")
    } else {
        Some("not a regular file")
    }
}

/// The bytes of the regular file at `path`, at most `max` of them. `what` names the file in
/// errors, e.g. `MCORE_STORE_TOKEN_FILE='/run/tok'` or `communicator config file cfg.yaml`.
///
/// The file is opened non-blocking (opening a FIFO without a writer would block; the flag does
/// not change reads of a regular file) and its type is checked on the open descriptor before
/// any read, so that neither a FIFO nor a device can hold the caller past its deadline.
pub fn read_bounded(path: &Path, what: &str, max: usize) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: std::io::Error| format!("{what}: {e}");
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(fail)?;
    if let Some(kind) = not_regular(file.metadata().map_err(fail)?.file_type()) {
        return Err(format!("{what} is {kind}, not a regular file: refusing to read it"));
    }
    // One byte past the cap: a file that is larger (or grows while read) is refused without
    // being read whole.
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes).map_err(fail)?;
    if bytes.len() > max {
        return Err(format!("{what}: larger than the {max} bytes it may have"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Reads `path` in a thread, so that a read that blocks fails the test instead of hanging.
    fn read_within(path: &Path, max: usize) -> Result<Vec<u8>, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(read_bounded(&p, "TEST_FILE_VAR", max));
        });
        rx.recv_timeout(Duration::from_secs(5)).expect("the read blocked")
    }

    #[test]
    fn fifos_devices_directories_and_large_files_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("mcore-input-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let big = dir.join("big");
        std::fs::File::create(&big).unwrap().set_len(200 << 20).unwrap();
        let small = dir.join("small");
        std::fs::write(&small, b"abc").unwrap();
        let start = Instant::now();
        let cases: [(&Path, &str); 5] = [
            (&fifo, "is a FIFO (named pipe), not a regular file"),
            (Path::new("/dev/zero"), "is a character device"),
            (Path::new("/dev/urandom"), "is a character device"),
            (&dir, "is a directory"),
            (&big, "larger than the 4096 bytes"),
        ];
        for (path, want) in cases {
            let e = read_within(path, 4096).unwrap_err();
            assert!(e.starts_with("TEST_FILE_VAR") && e.contains(want), "{}: {e}", path.display());
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(read_within(&small, 3).unwrap(), b"abc");
        assert!(read_within(&small, 2).unwrap_err().contains("larger than the 2 bytes"));
        let e = read_within(&dir.join("missing"), 10).unwrap_err();
        assert!(e.starts_with("TEST_FILE_VAR: ") && e.contains("No such file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
