//! A [`Store`] in a directory, shared by processes on one machine (or on a shared file system
//! with atomic rename). One file per key, written to a temporary name and renamed into place, so
//! a reader sees either the old or the new value, never half of one. `add` and `compare_set`
//! serialize on a per-key lock file created with `create_new` (no `flock`); a lock left by a
//! process that died (its pid no longer exists) is removed. Waits poll with a short sleep.

use super::{Store, StoreError};
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest encoded key (file names are limited to 255 bytes on common file systems).
const MAX_ENCODED_KEY: usize = 240;
/// Longest sleep between two polls of a wait.
const MAX_POLL: Duration = Duration::from_millis(20);

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A directory-backed store. Cheap to create; several instances (in one or many processes) on
/// the same directory see the same keys.
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    timeout: Duration,
}

impl FileStore {
    /// A store in `dir` (created if missing) whose `get` waits up to `timeout`.
    pub fn new(dir: impl Into<PathBuf>, timeout: Duration) -> Result<Self, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(&dir)
            .map_err(|e| StoreError::Io(format!("create store directory {}: {e}", dir.display())))?;
        Ok(FileStore { dir, timeout })
    }

    /// The directory holding the keys.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key`: `k_` + the key with bytes outside `[A-Za-z0-9_-]` as `%XX` (so a key
    /// file never contains a `.`, and `<file>.lock` can never be another key's file).
    fn key_path(&self, key: &str) -> Result<PathBuf, StoreError> {
        if key.is_empty() {
            return Err(StoreError::InvalidArgument("empty store key".into()));
        }
        let mut name = String::with_capacity(key.len() + 2);
        name.push_str("k_");
        for b in key.bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                name.push(b as char);
            } else {
                name.push_str(&format!("%{b:02X}"));
            }
        }
        if name.len() > MAX_ENCODED_KEY {
            return Err(StoreError::InvalidArgument(format!(
                "store key '{key}' is too long for a file store ({} bytes encoded, at most {MAX_ENCODED_KEY})",
                name.len()
            )));
        }
        Ok(self.dir.join(name))
    }

    fn io_err(&self, what: &str, path: &Path, e: std::io::Error) -> StoreError {
        StoreError::Io(format!("{what} {}: {e}", path.display()))
    }

    /// Read a key's file; `None` when it does not exist.
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
        match fs::read(path) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io_err("read", path, e)),
        }
    }

    /// Write `value` to `path` atomically (temporary file + rename).
    fn write(&self, path: &Path, value: &[u8]) -> Result<(), StoreError> {
        let tmp =
            self.dir.join(format!(".tmp.{}.{}", std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
        let result = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(value)?;
            drop(f);
            fs::rename(&tmp, path)
        })();
        result.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            self.io_err("write", path, e)
        })
    }

    /// Run `body` holding the lock file of `path`, waiting up to the store timeout for it.
    fn locked<T>(&self, key: &str, path: &Path, body: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut lock = path.as_os_str().to_owned();
        lock.push(".lock");
        let lock = PathBuf::from(lock);
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        loop {
            match OpenOptions::new().write(true).create_new(true).open(&lock) {
                Ok(mut f) => {
                    let _ = write!(f, "{}", std::process::id());
                    break;
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    remove_if_stale(&lock);
                    if start.elapsed() >= self.timeout {
                        return Err(StoreError::Timeout {
                            keys: vec![format!("{key} (lock {})", lock.display())],
                            waited: start.elapsed(),
                        });
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_POLL);
                }
                Err(e) => return Err(self.io_err("create lock", &lock, e)),
            }
        }
        let result = body();
        let _ = fs::remove_file(&lock);
        result
    }
}

/// Remove a lock file whose owner process no longer exists (best effort, Linux `/proc`).
fn remove_if_stale(lock: &Path) {
    let Ok(text) = fs::read_to_string(lock) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return;
    };
    if !Path::new("/proc/self").exists() || Path::new(&format!("/proc/{pid}")).exists() {
        return;
    }
    // Rename away first so that only one process removes it.
    let Some(dir) = lock.parent() else { return };
    let aside = dir.join(format!(".stale.{}.{}", std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
    if fs::rename(lock, &aside).is_ok() {
        let _ = fs::remove_file(aside);
    }
}

fn parse_counter(key: &str, bytes: &[u8]) -> Result<i64, StoreError> {
    std::str::from_utf8(bytes).ok().and_then(|s| s.trim().parse::<i64>().ok()).ok_or_else(|| {
        StoreError::InvalidArgument(format!(
            "store key '{key}' holds {:?}, not an integer counter",
            String::from_utf8_lossy(bytes)
        ))
    })
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let path = self.key_path(key)?;
        self.write(&path, value)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.wait(&[key], self.timeout)?;
        let path = self.key_path(key)?;
        // A concurrent delete between the wait and the read reads as a timeout-free miss.
        self.read(&path)?.ok_or_else(|| StoreError::Timeout { keys: vec![key.to_string()], waited: self.timeout })
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let path = self.key_path(key)?;
        self.locked(key, &path, || {
            let current = match self.read(&path)? {
                Some(v) => parse_counter(key, &v)?,
                None => 0,
            };
            let next = current.checked_add(delta).ok_or_else(|| {
                StoreError::InvalidArgument(format!("store counter '{key}' overflows: {current} + {delta}"))
            })?;
            self.write(&path, next.to_string().as_bytes())?;
            Ok(next)
        })
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        let path = self.key_path(key)?;
        self.locked(key, &path, || match self.read(&path)? {
            None if expected.is_empty() => {
                self.write(&path, desired)?;
                Ok(desired.to_vec())
            }
            None => Ok(expected.to_vec()),
            Some(current) if current == expected => {
                self.write(&path, desired)?;
                Ok(desired.to_vec())
            }
            Some(current) => Ok(current),
        })
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        for key in keys {
            if !self.key_path(key)?.exists() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let paths = keys.iter().map(|k| self.key_path(k)).collect::<Result<Vec<_>, _>>()?;
        let start = Instant::now();
        let mut pause = Duration::from_micros(500);
        loop {
            let missing: Vec<String> =
                keys.iter().zip(&paths).filter(|(_, p)| !p.exists()).map(|(k, _)| k.to_string()).collect();
            if missing.is_empty() {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(StoreError::Timeout { keys: missing, waited });
            }
            std::thread::sleep(pause.min(timeout - waited));
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        let path = self.key_path(key)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io_err("delete", &path, e)),
        }
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        let entries = fs::read_dir(&self.dir).map_err(|e| self.io_err("list", &self.dir, e))?;
        let mut n = 0;
        for entry in entries {
            let entry = entry.map_err(|e| self.io_err("list", &self.dir, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("k_") && !name.ends_with(".lock") {
                n += 1;
            }
        }
        Ok(n)
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn temp_dir(tag: &str) -> PathBuf {
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "mcore-filestore-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn set_get_overwrite_delete_and_count() {
        let dir = temp_dir("basic");
        let s = FileStore::new(&dir, Duration::from_secs(5)).unwrap();
        s.set("a/b c", b"one").unwrap();
        assert_eq!(s.get("a/b c").unwrap(), b"one");
        s.set("a/b c", b"").unwrap();
        assert_eq!(s.get("a/b c").unwrap(), b"");
        s.set("x", b"\0\xff").unwrap();
        assert_eq!(s.num_keys().unwrap(), 2);
        assert!(s.check(&["x", "a/b c"]).unwrap());
        assert!(!s.check(&["x", "y"]).unwrap());
        assert!(s.delete_key("x").unwrap());
        assert!(!s.delete_key("x").unwrap());
        assert_eq!(s.num_keys().unwrap(), 1);
        // A second instance on the same directory sees the same keys.
        let t = FileStore::new(&dir, Duration::from_secs(5)).unwrap();
        assert_eq!(t.get("a/b c").unwrap(), b"");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn add_and_compare_set_follow_torch_semantics() {
        let dir = temp_dir("cas");
        let s = FileStore::new(&dir, Duration::from_secs(5)).unwrap();
        assert_eq!(s.add("n", 5).unwrap(), 5);
        assert_eq!(s.add("n", -7).unwrap(), -2);
        assert_eq!(s.get("n").unwrap(), b"-2");
        s.set("text", b"abc").unwrap();
        let err = s.add("text", 1).unwrap_err();
        assert!(err.to_string().contains("'text'"), "{err}");
        // Missing key: empty expected sets, non-empty expected returns expected.
        assert_eq!(s.compare_set("c", b"", b"v1").unwrap(), b"v1");
        assert_eq!(s.compare_set("d", b"zz", b"v1").unwrap(), b"zz");
        assert!(!s.check(&["d"]).unwrap());
        assert_eq!(s.compare_set("c", b"v1", b"v2").unwrap(), b"v2");
        assert_eq!(s.compare_set("c", b"nope", b"v3").unwrap(), b"v2");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn waits_time_out_naming_the_missing_keys() {
        let dir = temp_dir("wait");
        let s = FileStore::new(&dir, Duration::from_millis(50)).unwrap();
        s.set("here", b"1").unwrap();
        match s.wait(&["here", "rank/3", "rank/4"], Duration::from_millis(30)) {
            Err(StoreError::Timeout { keys, .. }) => assert_eq!(keys, ["rank/3", "rank/4"]),
            other => panic!("expected a timeout, got {other:?}"),
        }
        let err = s.get("absent").unwrap_err();
        assert!(err.to_string().contains("'absent'"), "{err}");
        assert!(matches!(s.set("", b"x"), Err(StoreError::InvalidArgument(_))));
        assert!(matches!(s.set(&"k".repeat(300), b"x"), Err(StoreError::InvalidArgument(_))));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn get_waits_for_a_later_set() {
        let dir = temp_dir("later");
        let s = std::sync::Arc::new(FileStore::new(&dir, Duration::from_secs(10)).unwrap());
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.get("late").unwrap());
        std::thread::sleep(Duration::from_millis(30));
        s.set("late", b"value").unwrap();
        assert_eq!(t.join().unwrap(), b"value");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn stale_lock_of_a_dead_process_is_removed() {
        let dir = temp_dir("stale");
        let s = FileStore::new(&dir, Duration::from_secs(5)).unwrap();
        let mut child = Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let lock = {
            let mut p = s.key_path("ctr").unwrap().into_os_string();
            p.push(".lock");
            PathBuf::from(p)
        };
        fs::write(&lock, dead_pid.to_string()).unwrap();
        assert_eq!(s.add("ctr", 1).unwrap(), 1);
        assert!(!lock.exists());
        fs::remove_dir_all(dir).unwrap();
    }

    const CHILD_ENV: &str = "MCORE_FILESTORE_TEST_CHILD_DIR";
    const ADDS_PER_CHILD: i64 = 200;

    /// Entry point of the child processes of the test below (a no-op in a normal test run).
    #[test]
    fn multi_process_child_entry() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let s = FileStore::new(PathBuf::from(dir), Duration::from_secs(30)).unwrap();
        for _ in 0..ADDS_PER_CHILD {
            s.add("counter", 1).unwrap();
        }
        let id = std::process::id().to_string();
        let won = s.compare_set("winner", b"", id.as_bytes()).unwrap();
        s.set(&format!("done/{id}"), &won).unwrap();
    }

    #[test]
    fn concurrent_processes_add_atomically_and_agree_on_one_compare_set_winner() {
        const CHILDREN: usize = 4;
        let dir = temp_dir("procs");
        let s = FileStore::new(&dir, Duration::from_secs(60)).unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut kids: Vec<_> = (0..CHILDREN)
            .map(|_| {
                Command::new(&exe)
                    .args(["--exact", "store::file::tests::multi_process_child_entry", "--test-threads=1", "--quiet"])
                    .env(CHILD_ENV, &dir)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        for kid in &mut kids {
            loop {
                if let Some(status) = kid.try_wait().unwrap() {
                    assert!(status.success(), "child failed: {status}");
                    break;
                }
                if Instant::now() > deadline {
                    kids.iter_mut().for_each(|k| {
                        let _ = k.kill();
                    });
                    panic!("child processes did not finish in time");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert_eq!(s.get("counter").unwrap(), (CHILDREN as i64 * ADDS_PER_CHILD).to_string().as_bytes());
        let winner = s.get("winner").unwrap();
        for kid in &kids {
            assert_eq!(s.get(&format!("done/{}", kid.id())).unwrap(), winner, "every child saw the same winner");
        }
        let winner: u32 = String::from_utf8(winner).unwrap().parse().unwrap();
        assert!(kids.iter().any(|k| k.id() == winner));
        fs::remove_dir_all(dir).unwrap();
    }
}
