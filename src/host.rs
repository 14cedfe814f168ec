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
