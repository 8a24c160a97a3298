//! An in-process store (like torch's `HashStore`): for a world of one process, and for
//! threads of one process that rendezvous with each other.

use super::{Store, StoreError, DEFAULT_TIMEOUT};
use crate::lock::{Unpoisoned, UnpoisonedWait};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A thread-safe in-memory key-value store with blocking waits.
pub struct MemoryStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    timeout: Duration,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(DEFAULT_TIMEOUT)
    }
}

fn parse_counter(key: &str, bytes: &[u8]) -> Result<i64, StoreError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| StoreError::InvalidArgument(format!("value of key '{key}' is not an integer counter")))
}

impl MemoryStore {
    pub fn new(timeout: Duration) -> Self {
        MemoryStore { map: Mutex::new(HashMap::new()), changed: Condvar::new(), timeout }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<u8>>> {
        // A panic while holding the lock leaves the map consistent (single inserts): keep going.
        self.map.locked()
    }

    fn write(&self, f: impl FnOnce(&mut HashMap<String, Vec<u8>>)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }
}

impl Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.write(|m| {
            m.insert(key.to_string(), value.to_vec());
        });
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.wait(&[key], self.timeout)?;
        Ok(self.lock().get(key).cloned().unwrap_or_default())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let mut m = self.lock();
        let now = match m.get(key) {
            Some(v) => parse_counter(key, v)?,
            None => 0,
        }
        .checked_add(delta)
        .ok_or_else(|| StoreError::InvalidArgument(format!("counter '{key}' overflows adding {delta}")))?;
        m.insert(key.to_string(), now.to_string().into_bytes());
        drop(m);
        self.changed.notify_all();
        Ok(now)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        let mut m = self.lock();
        let result = match m.get(key) {
            None if expected.is_empty() => {
                m.insert(key.to_string(), desired.to_vec());
                desired.to_vec()
            }
            None => expected.to_vec(),
            Some(cur) if cur.as_slice() == expected => {
                m.insert(key.to_string(), desired.to_vec());
                desired.to_vec()
            }
            Some(cur) => cur.clone(),
        };
        drop(m);
        self.changed.notify_all();
        Ok(result)
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        let m = self.lock();
        Ok(keys.iter().all(|k| m.contains_key(*k)))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let start = Instant::now();
        let mut m = self.lock();
        loop {
            let missing: Vec<String> = keys.iter().filter(|k| !m.contains_key(**k)).map(|k| k.to_string()).collect();
            if missing.is_empty() {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(StoreError::Timeout { keys: missing, waited });
            }
            m = self.changed.wait_up_to(m, timeout - waited);
        }
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.lock().remove(key).is_some())
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        Ok(self.lock().len() as i64)
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counters_compare_set_and_waits() {
        let s = MemoryStore::new(Duration::from_millis(50));
        assert_eq!(s.add("c", 2).unwrap(), 2);
        assert_eq!(s.add("c", -5).unwrap(), -3);
        assert_eq!(s.get("c").unwrap(), b"-3");
        assert_eq!(s.compare_set("k", b"x", b"y").unwrap(), b"x"); // missing + non-empty expected
        assert!(!s.check(&["k"]).unwrap());
        assert_eq!(s.compare_set("k", b"", b"y").unwrap(), b"y");
        assert_eq!(s.compare_set("k", b"z", b"w").unwrap(), b"y");
        assert_eq!(s.compare_set("k", b"y", b"w").unwrap(), b"w");
        s.set("s", b"text").unwrap();
        assert!(matches!(s.add("s", 1), Err(StoreError::InvalidArgument(m)) if m.contains("'s'")));
        assert!(s.delete_key("k").unwrap() && !s.delete_key("k").unwrap());
        match s.wait(&["c", "nope", "nada"], Duration::from_millis(20)) {
            Err(StoreError::Timeout { keys, .. }) => assert_eq!(keys, vec!["nope", "nada"]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(s.get("nope"), Err(StoreError::Timeout { .. })));
    }

    #[test]
    fn a_waiter_wakes_when_another_thread_sets() {
        let s = Arc::new(MemoryStore::new(Duration::from_secs(30)));
        let t = {
            let s = s.clone();
            std::thread::spawn(move || s.get("late").unwrap())
        };
        std::thread::sleep(Duration::from_millis(20));
        s.set("late", b"v").unwrap();
        assert_eq!(t.join().unwrap(), b"v");
    }
}
