//! The roles' per-request properties (`NativeHost::set_property`): a map per request on the
//! worker thread that runs it (a request's downstream and upstream filters all run on one
//! worker), opened by the downstream filter; each upstream filter that finds it holds it too,
//! and it goes when the last of them is destroyed (a caller that leaves destroys the downstream
//! filter before the attempt's, which still reports its outcome).

use crate::metrics::MetricTable;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

/// The filters holding the record, its properties, and the downstream filter's metrics.
type Properties = (u32, Vec<(String, Vec<u8>)>, Option<Arc<MetricTable>>);

thread_local! {
    static NEXT: Cell<u64> = const { Cell::new(0) };
    static OPEN: RefCell<HashMap<u64, Properties>> = RefCell::new(HashMap::new());
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

/// Opens a request's record for its downstream filter, whose configuration's metrics are
/// `metrics`; its id.
pub fn open(metrics: Option<Arc<MetricTable>>) -> u64 {
    let id = next_id();
    OPEN.with(|open| open.borrow_mut().insert(id, (1, Vec::new(), metrics)));
    id
}

/// The metrics of the request's downstream filter's configuration.
pub fn downstream_metrics(id: u64) -> Option<Arc<MetricTable>> {
    OPEN.with(|open| open.borrow().get(&id)?.2.clone())
}

/// Another filter holds the record (false when it is gone).
pub fn hold(id: u64) -> bool {
    OPEN.with(|open| match open.borrow_mut().get_mut(&id) {
        Some((holders, _, _)) => {
            *holders += 1;
            true
        }
        None => false,
    })
}

/// A filter lets the record go; the last one forgets it.
pub fn close(id: u64) {
    if id == 0 {
        return;
    }
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if let Some((holders, _, _)) = open.get_mut(&id) {
            *holders -= 1;
            if *holders == 0 {
                open.remove(&id);
            }
        }
    });
}

pub fn get(id: u64, name: &str) -> Option<Vec<u8>> {
    OPEN.with(|open| {
        let open = open.borrow();
        let (_, props, _) = open.get(&id)?;
        props
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    })
}

pub fn set(id: u64, name: &str, value: &[u8]) {
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        let Some((_, props, _)) = open.get_mut(&id) else {
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
