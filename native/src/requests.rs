//! The roles' per-request properties (`NativeHost::set_property`): a map per request on the
//! worker thread that runs it (a request's downstream and upstream filters all run on one
//! worker), opened by the downstream filter; each upstream filter that finds it holds it too,
//! and it goes when the last of them is destroyed (a caller that leaves destroys the downstream
//! filter before the attempt's, which still reports its outcome).

use crate::abi::FilterEnvoy;
use crate::metrics::MetricTable;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// One request's record.
struct Properties {
    /// The filters holding the record.
    holders: u32,
    values: Vec<(String, Vec<u8>)>,
    /// The downstream filter's configuration's metrics.
    metrics: Option<Arc<MetricTable>>,
    /// The downstream filter, until Envoy destroys it (null after): where an upstream filter
    /// that Envoy is destroying, and that can no longer write filter state itself, writes it
    /// ([`downstream_filter`]).
    downstream: FilterEnvoy,
    /// The upstream filters holding the record (the hooks' pointers), until Envoy destroys
    /// them ([`upstreams`]): the first [`UPSTREAMS`] of them, in place (no allocation).
    upstreams: [*const c_void; UPSTREAMS],
}

/// The most upstream filters a record lists: a plan's most attempts (`config::MAX_CHAIN_LEN`);
/// one past them (never, but for hedges over it) keeps its `on_done` for its destroy.
pub const UPSTREAMS: usize = llm_failover::config::MAX_CHAIN_LEN;

/// The records' ids hashed by one multiplication: they are this module's own (no caller
/// chooses them), and std's SipHash cost more than the map's other work on every lookup.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Records = HashMap<u64, Properties, BuildHasherDefault<IdHasher>>;

thread_local! {
    static NEXT: Cell<u64> = const { Cell::new(0) };
    static OPEN: RefCell<Records> = RefCell::new(Records::default());
}

/// Ids are unique per process: the thread's address-space slot is not, so take one from a
/// process counter once per thread and count within it.
fn next_id() -> u64 {
    static THREADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.with(|next| {
        let mut id = next.get();
        if id == 0 {
            id = THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 40;
        }
        id += 1;
        next.set(id);
        id
    })
}

/// Opens a request's record for its downstream filter `downstream`, whose configuration's
/// metrics are `metrics`; its id.
pub fn open(metrics: Option<Arc<MetricTable>>, downstream: FilterEnvoy) -> u64 {
    let id = next_id();
    let record = Properties {
        holders: 1,
        values: Vec::new(),
        metrics,
        downstream,
        upstreams: [std::ptr::null(); UPSTREAMS],
    };
    OPEN.with(|open| open.borrow_mut().insert(id, record));
    id
}

/// The metrics of the request's downstream filter's configuration.
pub fn downstream_metrics(id: u64) -> Option<Arc<MetricTable>> {
    OPEN.with(|open| open.borrow().get(&id)?.metrics.clone())
}

/// The request's downstream filter while Envoy has not destroyed it (null otherwise).
pub fn downstream_filter(id: u64) -> FilterEnvoy {
    OPEN.with(|open| {
        open.borrow()
            .get(&id)
            .map_or(std::ptr::null_mut(), |r| r.downstream)
    })
}

/// The request's upstream filters that Envoy has not destroyed yet (the hooks' pointers; null
/// for none).
pub fn upstreams(id: u64) -> [*const c_void; UPSTREAMS] {
    OPEN.with(|open| {
        open.borrow()
            .get(&id)
            .map_or([std::ptr::null(); UPSTREAMS], |r| r.upstreams)
    })
}

/// Upstream filter `module` holds the record too (false when it is gone).
pub fn hold(id: u64, module: *const c_void) -> bool {
    OPEN.with(|open| match open.borrow_mut().get_mut(&id) {
        Some(record) => {
            record.holders += 1;
            if let Some(free) = record.upstreams.iter_mut().find(|m| m.is_null()) {
                *free = module;
            }
            true
        }
        None => false,
    })
}

/// Filter `filter` (the hooks' `module`) lets the record go (Envoy is destroying it); the last
/// one forgets it.
pub fn close(id: u64, filter: FilterEnvoy, module: *const c_void) {
    if id == 0 {
        return;
    }
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if let Some(record) = open.get_mut(&id) {
            if record.downstream == filter {
                record.downstream = std::ptr::null_mut();
            }
            if let Some(gone) = record.upstreams.iter_mut().find(|m| **m == module) {
                *gone = std::ptr::null();
            }
            record.holders -= 1;
            if record.holders == 0 {
                open.remove(&id);
            }
        }
    });
}

pub fn get(id: u64, name: &str) -> Option<Vec<u8>> {
    with(id, name, <[u8]>::to_vec)
}

/// `f` of the property's value, read in place (no copy).
pub fn with<T>(id: u64, name: &str, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
    OPEN.with(|open| {
        let open = open.borrow();
        let values = &open.get(&id)?.values;
        values.iter().find(|(n, _)| n == name).map(|(_, v)| f(v))
    })
}

pub fn set(id: u64, name: &str, value: &[u8]) {
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        let Some(props) = open.get_mut(&id).map(|r| &mut r.values) else {
            return;
        };
        match props.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => {
                v.clear();
                v.extend_from_slice(value);
            }
            None => props.push((name.to_string(), value.to_vec())),
        }
    });
}
