//! The two things the decision core needs from its host, kept tiny so the core runs and is
//! tested anywhere: a clock and a shared key-value store with compare-and-swap.
//! In Envoy these are proxy-wasm's `get_current_time` and shared data; in tests, in-memory
//! (`MemoryStore`, `ManualClock`: compiled into test builds only).

/// Version token returned with a shared value; a write succeeds only while it still matches.
pub type Cas = u32;

/// Why a write did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetError {
    /// Lost a compare-and-swap race: re-read and try again.
    CasMismatch,
    /// Refused for another reason (in Envoy: a bad argument, or no shared data here): trying
    /// again cannot help, so callers stop at once instead of spinning through their retries.
    Refused,
}

/// Shared state visible to every worker (proxy-wasm shared data keyed by `vm_id`).
pub trait SharedStore {
    /// The value under `key` and its CAS token, or `None` when nothing was ever stored.
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)>;
    /// Stores `value` if `key` still has version `cas` (`None`: only if it has never been set).
    fn set(&self, key: &str, value: &[u8], cas: Option<Cas>) -> Result<(), SetError>;
}

/// Wall-clock milliseconds since the Unix epoch (shared by every worker, so comparable).
pub trait Clock {
    fn now_ms(&self) -> u64;
}

/// One reading of the clock, reused for everything a callback decides: each reading is a
/// hostcall in Envoy.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub u64);

impl Clock for FixedClock {
    fn now_ms(&self) -> u64 {
        self.0
    }
}

/// Shared data for a host that is one process (the native Envoy module, `native/`): every
/// worker thread sees the same map, with proxy-wasm's shared-data semantics exactly as Envoy
/// implements them: each write takes a fresh non-zero CAS token from one counter; a write with
/// a token succeeds only while the key still has it (a missing key takes any write); a write
/// without one (`None`, Envoy's 0) always succeeds. One mutex: every operation is a short
/// map access, and it is never held across a call into Envoy.
#[cfg(not(target_arch = "wasm32"))]
pub struct ProcessStore {
    inner: std::sync::Mutex<ProcessEntries>,
}

#[cfg(not(target_arch = "wasm32"))]
struct ProcessEntries {
    next_cas: Cas,
    map: Option<std::collections::HashMap<String, (Vec<u8>, Cas)>>,
}

#[cfg(not(target_arch = "wasm32"))]
impl ProcessStore {
    /// An empty store (`const`, so it can be a `static`).
    pub const fn new() -> ProcessStore {
        ProcessStore {
            inner: std::sync::Mutex::new(ProcessEntries {
                next_cas: 0,
                map: None,
            }),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Default for ProcessStore {
    fn default() -> Self {
        ProcessStore::new()
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl SharedStore for ProcessStore {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        let entries = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        entries.map.as_ref()?.get(key).cloned()
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<Cas>) -> Result<(), SetError> {
        let mut entries = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let ProcessEntries { next_cas, map } = &mut *entries;
        let map = map.get_or_insert_with(Default::default);
        let fresh = next_cas.wrapping_add(1).max(1);
        *next_cas = fresh;
        match map.get_mut(key) {
            Some((_, current)) if cas.is_some_and(|c| c != 0 && c != *current) => {
                Err(SetError::CasMismatch)
            }
            Some(entry) => {
                entry.0.clear();
                entry.0.extend_from_slice(value);
                entry.1 = fresh;
                Ok(())
            }
            None => {
                map.insert(key.to_string(), (value.to_vec(), fresh));
                Ok(())
            }
        }
    }
}

/// In-memory store with the same CAS semantics as Envoy's shared data, for host tests
/// (thread-safe, so tests can hammer it from many threads). Test builds only.
#[cfg(test)]
#[derive(Default)]
pub struct MemoryStore {
    entries: std::sync::Mutex<std::collections::HashMap<String, (Vec<u8>, Cas)>>,
}

#[cfg(test)]
impl SharedStore for MemoryStore {
    fn get(&self, key: &str) -> Option<(Vec<u8>, Cas)> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(key).cloned()
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<Cas>) -> Result<(), SetError> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let current = entries.get(key).map(|(_, c)| *c);
        // Envoy treats cas 0 as "no check"; the core never relies on that, it always passes
        // the token it read (or None for a first write), which is what we model here.
        if current != cas {
            return Err(SetError::CasMismatch);
        }
        let next = current.map_or(1, |c| c.wrapping_add(1).max(1));
        entries.insert(key.to_string(), (value.to_vec(), next));
        Ok(())
    }
}

/// A clock tests can move by hand. Test builds only.
#[cfg(test)]
#[derive(Default)]
pub struct ManualClock {
    now: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
impl ManualClock {
    pub fn at(ms: u64) -> Self {
        ManualClock {
            now: std::sync::atomic::AtomicU64::new(ms),
        }
    }
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod process_store_tests {
    use super::*;

    #[test]
    fn cas_semantics_are_envoys() {
        let store = ProcessStore::new();
        assert_eq!(store.get("k"), None);
        // A missing key takes any write, with or without a token.
        store.set("k", b"a", Some(7)).unwrap();
        let (value, cas) = store.get("k").unwrap();
        assert_eq!(value, b"a");
        assert_ne!(cas, 0);
        // A stale token loses; the current one wins and moves the token on.
        assert_eq!(
            store.set("k", b"b", Some(cas + 1)),
            Err(SetError::CasMismatch)
        );
        store.set("k", b"b", Some(cas)).unwrap();
        let (value, next) = store.get("k").unwrap();
        assert_eq!(value, b"b");
        assert_ne!(next, cas);
        assert_eq!(store.set("k", b"c", Some(cas)), Err(SetError::CasMismatch));
        // No token: always written.
        store.set("k", b"d", None).unwrap();
        assert_eq!(store.get("k").unwrap().0, b"d");
    }

    #[test]
    fn counts_stay_exact_across_threads() {
        static STORE: ProcessStore = ProcessStore::new();
        STORE.set("n", &0u64.to_le_bytes(), None).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..1000 {
                        loop {
                            let (bytes, cas) = STORE.get("n").unwrap();
                            let n = u64::from_le_bytes(bytes.try_into().unwrap()) + 1;
                            if STORE.set("n", &n.to_le_bytes(), Some(cas)).is_ok() {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (bytes, _) = STORE.get("n").unwrap();
        assert_eq!(u64::from_le_bytes(bytes.try_into().unwrap()), 4000);
    }
}
