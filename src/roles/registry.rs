//! The configurations alive in this VM, by fingerprint, so that an attempt is resolved under the
//! configuration its plan was made under (docs/behaviour.md section 7: the two roles never act on different
//! configurations).
//!
//! Both roles run in one VM per worker (one `vm_id`). When a configuration changes under traffic
//! (extension config discovery delivers each role's update on its own), a request planned under
//! the old configuration can have its next attempt created by an upstream filter already running
//! the new one, and for a moment a request planned under the new downstream configuration can
//! reach an upstream filter still running the old one. Every root context registers its
//! configuration here; the upstream role looks up the plan's fingerprint and resolves the attempt
//! under exactly that configuration (its keys, models and chain), as long as any context still
//! holds it (a request in flight holds its own). An attempt whose configuration is nowhere in the
//! VM any more is refused, fail closed, as before.

use super::Metrics;
use crate::config::Config;
use std::cell::RefCell;
use std::rc::{Rc, Weak};

type Entry = (u64, Weak<Config>, Weak<Metrics>);

thread_local! {
    static LIVE: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// Records a configuration a root context now serves (and forgets those nothing holds).
pub fn register(config: &Rc<Config>, metrics: &Rc<Metrics>) {
    LIVE.with(|live| {
        let mut live = live.borrow_mut();
        live.retain(|(_, c, _)| c.strong_count() > 0);
        live.push((
            config.fingerprint,
            Rc::downgrade(config),
            Rc::downgrade(metrics),
        ));
    });
}

/// A live configuration with this fingerprint, with its metric ids.
pub fn lookup(fingerprint: u64) -> Option<(Rc<Config>, Rc<Metrics>)> {
    LIVE.with(|live| {
        live.borrow().iter().rev().find_map(|(f, c, m)| {
            if *f != fingerprint {
                return None;
            }
            Some((c.upgrade()?, m.upgrade()?))
        })
    })
}
