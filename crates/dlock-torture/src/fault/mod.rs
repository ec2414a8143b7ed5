//! The faults a scenario injects, one family per file: which servers each needs, which
//! clients, how one round of it is injected, and what it adds to the judge. Adding a fault
//! is adding a file here (an implementation of [`Fault`]) and a scenario in the catalogue.

mod clock;
mod cluster;
mod failover;
mod holders;
mod partition;
mod redlock;
mod sentinel;
mod server;

use std::path::Path;
use std::time::Duration;

use crate::check::Faults;
use crate::client::Primitive;
use crate::run::clients::{work_ms, Run};
use crate::servers::LockServers;
use crate::verdict::{Evidence, Expect};

#[cfg(test)]
pub(crate) use clock::CLOCK_OFFSETS;
pub use clock::{ClockJump, ClockOffset, ClockTools};
pub use cluster::ClusterFailover;
pub use failover::Failover;
pub use holders::{ClientPause, HolderCrash, PauseAndCrash};
pub use partition::Partition;
pub use redlock::{Amnesia, MinorityDown};
pub use server::{NetworkDelay, ServerPause, ServerRestart};

/// One kind of fault: everything about a scenario that varies with what it does to the
/// clients or the servers. The defaults are those of a fault on one lock server that runs
/// every kind of one deployment with the usual clients.
pub trait Fault: std::fmt::Debug + Sync {
    /// The lock kinds it can run: every kind of one deployment, or the Redlock mutex on
    /// independent masters.
    fn kinds(&self) -> &'static [Primitive] {
        &Primitive::SINGLE
    }

    /// It runs masters under libfaketime (on Valkey): [`ClockTools`] must be found.
    fn moves_clocks(&self) -> bool {
        false
    }

    /// The lease its locks take when `asked` for one: some faults need longer ones.
    fn ttl(&self, asked: Duration) -> Duration {
        asked
    }

    /// How long one round lasts: the fault, then calm for the lock to pass around.
    fn round(&self, ttl: Duration) -> Duration {
        ttl * 4
    }

    /// How long one step of a hold's work lasts at most (ms).
    fn work_ms(&self, ttl: Duration) -> u64 {
        work_ms(ttl)
    }

    /// The library clients raise Redlock fences (false: `--without-fence-raise`).
    fn raises_fences(&self) -> bool {
        true
    }

    /// The client processes of `primitive`: (kind, slot) each (see [`usual_clients`]).
    fn clients(&self, primitive: Primitive) -> Vec<(&'static str, usize)> {
        usual_clients(primitive)
    }

    /// Starts the servers the locks live on; `Err` says what is missing to start them.
    fn servers(&self, setup: &Setup) -> Result<LockServers, String> {
        Ok(LockServers::single(setup.durable, false))
    }

    /// Round `index` of the fault, recorded in `faults` for the checker.
    fn inject(&self, index: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults);

    /// Fences may go back in a scenario of this fault expecting `expect` (a split brain:
    /// two masters granting at once from counters and clocks of their own).
    fn fences_may_go_back(&self, expect: Expect) -> bool {
        let _ = expect;
        false
    }

    /// A negative control of this fault shows itself by a double grant (false: by fences
    /// going back, where the clients skip the Redlock fence raise).
    fn violation_is_a_double_grant(&self) -> bool {
        true
    }

    /// What else the run must show for this fault, in words (empty: nothing wrong).
    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        let _ = evidence;
        Vec::new()
    }
}

/// What a fault's servers are started with.
#[derive(Debug)]
pub struct Setup<'a> {
    /// They keep their data across a crash (AOF, appendfsync always).
    pub durable: bool,
    /// The scenario's directory (records, and files the servers read).
    pub dir: &'a Path,
}

/// The usual client processes of one primitive: two through the library (async and
/// blocking) and two through `dlock run`; the semaphore of three gets six, so that more
/// than three want it; the read-write lock's readers four; the reentrant mutex four
/// library clients. A fault with clients of its own (the Redlock restarts and clocks, the
/// writers among readers) says so in [`Fault::clients`].
pub fn usual_clients(primitive: Primitive) -> Vec<(&'static str, usize)> {
    if primitive == Primitive::Read {
        vec![
            ("lib-async", 0),
            ("lib-blocking", 0),
            ("cli", 0),
            ("cli", 1),
        ]
    } else if primitive == Primitive::Reentrant {
        // `dlock run` has no inside to re-enter: library clients only.
        vec![
            ("lib-async", 0),
            ("lib-async", 1),
            ("lib-blocking", 0),
            ("lib-blocking", 1),
        ]
    } else if primitive == Primitive::Sem3 {
        vec![
            ("lib-async", 0),
            ("lib-async", 1),
            ("lib-blocking", 0),
            ("cli", 0),
            ("cli", 1),
            ("cli", 2),
        ]
    } else {
        vec![
            ("lib-async", 0),
            ("lib-blocking", 0),
            ("cli", 0),
            ("cli", 1),
        ]
    }
}
