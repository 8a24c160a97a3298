//! A view of a store under a key prefix, like torch's `PrefixStore`: key `k` becomes
//! `prefix + "/" + k` in the underlying store, so each group gets its own key space.

use super::{Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// Keys of `base` under `prefix/`.
pub struct PrefixStore {
    prefix: String,
    base: Arc<dyn Store>,
}

impl PrefixStore {
    pub fn new(prefix: &str, base: Arc<dyn Store>) -> PrefixStore {
        PrefixStore { prefix: prefix.to_string(), base }
    }

    /// The prefix (without the joining `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The store underneath.
    pub fn base(&self) -> &Arc<dyn Store> {
        &self.base
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }

    fn keys(&self, keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| self.key(k)).collect()
    }

    /// Take the base's missing keys back into this view's names.
    fn unprefix(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Timeout { keys, waited } => {
                let head = format!("{}/", self.prefix);
                let keys = keys.into_iter().map(|k| k.strip_prefix(&head).map_or(k.clone(), str::to_string)).collect();
                StoreError::Timeout { keys, waited }
            }
            other => other,
        }
    }
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

impl Store for PrefixStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.base.set(&self.key(key), value)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.base.get(&self.key(key)).map_err(|e| self.unprefix(e))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.base.add(&self.key(key), delta)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.base.compare_set(&self.key(key), expected, desired)
    }
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        self.base.check(&refs(&self.keys(keys)))
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        self.base.wait(&refs(&self.keys(keys)), timeout).map_err(|e| self.unprefix(e))
    }
    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.base.delete_key(&self.key(key))
    }
    fn num_keys(&self) -> Result<i64, StoreError> {
        self.base.num_keys()
    }
    fn timeout(&self) -> Duration {
        self.base.timeout()
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.base.multi_get(&refs(&self.keys(keys))).map_err(|e| self.unprefix(e))
    }
    fn multi_get_existing(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.base.multi_get_existing(&refs(&self.keys(keys))).map_err(|e| self.unprefix(e))
    }
    fn multi_set(&self, items: &[(&str, &[u8])]) -> Result<(), StoreError> {
        let keys: Vec<String> = items.iter().map(|(k, _)| self.key(k)).collect();
        let pairs: Vec<(&str, &[u8])> = keys.iter().zip(items).map(|(k, (_, v))| (k.as_str(), *v)).collect();
        self.base.multi_set(&pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn keys_are_joined_with_a_slash_and_nest() {
        let base: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_millis(30)));
        let pg = Arc::new(PrefixStore::new("default_pg", base.clone()));
        let dev = PrefixStore::new("cuda", pg.clone());
        dev.set("k", b"v").unwrap();
        assert_eq!(base.get("default_pg/cuda/k").unwrap(), b"v");
        assert_eq!(pg.get("cuda/k").unwrap(), b"v");
        assert_eq!(dev.add("n", 3).unwrap(), 3);
        assert!(dev.check(&["k", "n"]).unwrap());
        assert_eq!(dev.num_keys().unwrap(), 2);
        dev.multi_set(&[("a", b"1"), ("b", b"2")]).unwrap();
        assert_eq!(base.multi_get(&["default_pg/cuda/a", "default_pg/cuda/b"]).unwrap(), [b"1", b"2"]);
        assert_eq!(dev.compare_set("k", b"v", b"w").unwrap(), b"w");
        assert!(dev.delete_key("k").unwrap());
        match dev.wait(&["a", "gone"], Duration::from_millis(10)) {
            Err(StoreError::Timeout { keys, .. }) => assert_eq!(keys, ["gone"]),
            other => panic!("{other:?}"),
        }
        assert_eq!(dev.timeout(), Duration::from_millis(30));
    }
}
