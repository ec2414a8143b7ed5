//! The faults on Redlock's independent masters: a minority out each round
//! (`redlock-minority-down`), and masters that forget a hold across a restart
//! (`redlock-restart-*`, `redlock-delayed-restart`).

use std::thread;
use std::time::{Duration, SystemTime};

use dlock_testkit::{IndependentMasters, ServerOptions};
use rand::seq::IndexedRandom;

use super::{usual_clients, Fault, Setup};
use crate::check::{Faults, Outage};
use crate::client::Primitive;
use crate::record::mono_ns;
use crate::run::clients::Run;
use crate::run::process::{interrupted, sleep};
use crate::servers::LockServers;
use crate::verdict::Evidence;

/// Five Redlock masters; each round two of them killed, frozen or answering too late for
/// a while.
#[derive(Debug)]
pub struct MinorityDown;

impl Fault for MinorityDown {
    fn kinds(&self) -> &'static [Primitive] {
        &[Primitive::Redlock]
    }

    fn servers(&self, setup: &Setup) -> Result<LockServers, String> {
        Ok(masters(MINORITY_DOWN_NODES, setup.durable))
    }

    fn inject(&self, index: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
        if let LockServers::Redlock(masters) = servers {
            minority_down(index, masters, run.ttl, faults);
        }
    }

    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        held_while_out(evidence)
    }
}

/// Three Redlock masters: right after a grant one is killed (the hold is left on the
/// other two), then one of those two is restarted and the killed one too; `delayed`: the
/// two are kept down for longer than a lease before they return.
#[derive(Debug)]
pub struct Amnesia {
    /// Kept down longer than a lease (the restart delay that makes it safe).
    pub delayed: bool,
}

impl Fault for Amnesia {
    fn kinds(&self) -> &'static [Primitive] {
        &[Primitive::Redlock]
    }

    fn clients(&self, primitive: Primitive) -> Vec<(&'static str, usize)> {
        restart_clients(primitive)
    }

    fn servers(&self, setup: &Setup) -> Result<LockServers, String> {
        Ok(masters(AMNESIA_NODES, setup.durable))
    }

    fn inject(&self, _: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
        let down_for = self.delayed.then(|| run.ttl * 3 / 2);
        if let LockServers::Redlock(masters) = servers {
            amnesia(masters, run, faults, down_for);
        }
    }

    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        match self.delayed {
            true => held_while_out(evidence),
            false => Vec::new(),
        }
    }
}

/// `count` independent masters, each behind its own proxy (durable: AOF, appendfsync
/// always).
fn masters(count: usize, durable: bool) -> LockServers {
    let options = match durable {
        true => ServerOptions::durable(),
        false => ServerOptions::default(),
    };
    LockServers::Redlock(IndependentMasters::start_with(count, options))
}

/// The restart scenarios' Redlock clients: two library ones (async and blocking), a holder
/// and a waiter. With more waiters, two of them can split the restarted masters between
/// them and keep colliding, so whether anyone gets both before the holder's belief ends
/// would be a race.
fn restart_clients(primitive: Primitive) -> Vec<(&'static str, usize)> {
    match primitive {
        Primitive::Redlock => vec![("lib-async", 0), ("lib-blocking", 0)],
        _ => usual_clients(primitive),
    }
}

/// The faults prove something only if the lock was in use while they lasted. (Not
/// "granted during them": waiters that split the healthy masters between them can go on
/// colliding for longer than an outage, which is liveness, not safety, and would make
/// this check fail now and then.)
fn held_while_out(evidence: &Evidence) -> Vec<String> {
    let (holds, faults) = (evidence.holds, evidence.faults);
    let mut problems = Vec::new();
    let during = holds.iter().any(|h| {
        faults
            .outages
            .iter()
            .any(|o| h.start < o.to && h.end > o.from)
    });
    if !during {
        problems.push(
            "the lock was never held while masters were out: the faults proved nothing".into(),
        );
    }
    problems
}

/// The masters of `redlock-minority-down`: five tolerate two out.
const MINORITY_DOWN_NODES: usize = 5;

/// The masters of the restart scenarios: with three, one down and one forgetful are
/// enough for a second majority.
const AMNESIA_NODES: usize = 3;

/// How a Redlock master is taken out of its clients' reach for a while.
#[derive(Debug, Clone, Copy)]
enum NodeFault {
    /// `kill -9`, then restarted on its data (AOF, appendfsync always).
    Crash,
    /// SIGSTOP, then SIGCONT: connections stay open, nothing is answered meanwhile, and
    /// what was sent in the meantime runs on resume.
    Freeze,
    /// A partition at its proxy: nothing passes either way and nothing is closed; healed,
    /// the connections caught in it are closed and clients reconnect.
    BlackHole,
    /// Every reply held back by its proxy for a lease (ten node timeouts): commands run
    /// on the master, their clients count them as failed.
    LateReplies,
}

impl NodeFault {
    const ALL: [NodeFault; 4] = [
        NodeFault::Crash,
        NodeFault::Freeze,
        NodeFault::BlackHole,
        NodeFault::LateReplies,
    ];

    fn name(self) -> &'static str {
        match self {
            NodeFault::Crash => "kill -9, restarted on its AOF",
            NodeFault::Freeze => "SIGSTOP, then SIGCONT",
            NodeFault::BlackHole => "black-holed by its proxy",
            NodeFault::LateReplies => "replies held back a lease by its proxy",
        }
    }
}

/// One round of `redlock-minority-down`: a minority of the masters (two of five, chosen
/// at random) out for 1.5 leases, each in its own way; the ways turn with the round so
/// that two rounds (`--quick`) see all four.
fn minority_down(index: u32, masters: &mut IndependentMasters, ttl: Duration, faults: &mut Faults) {
    let minority = masters.len() - (masters.len() / 2 + 1);
    let all: Vec<usize> = (0..masters.len()).collect();
    let chosen: Vec<usize> = all
        .choose_multiple(&mut rand::rng(), minority)
        .copied()
        .collect();
    let out: Vec<(usize, NodeFault)> = chosen
        .into_iter()
        .enumerate()
        .map(|(k, node)| {
            let way = (index as usize * minority + k) % NodeFault::ALL.len();
            (node, NodeFault::ALL[way])
        })
        .collect();
    let from = mono_ns();
    for &(node, how) in &out {
        match how {
            NodeFault::Crash => masters.server_mut(node).kill9(),
            NodeFault::Freeze => masters.server(node).pause(),
            NodeFault::BlackHole => masters.proxy(node).black_hole(true),
            NodeFault::LateReplies => masters.proxy(node).delay_replies(ttl),
        }
    }
    sleep(ttl * 3 / 2);
    for &(node, how) in &out {
        let to = match how {
            NodeFault::Crash => {
                masters.server_mut(node).restart();
                mono_ns()
            }
            NodeFault::Freeze => {
                masters.server(node).resume();
                mono_ns()
            }
            NodeFault::BlackHole => {
                masters.proxy(node).black_hole(false);
                mono_ns()
            }
            NodeFault::LateReplies => {
                masters.proxy(node).delay_replies(Duration::ZERO);
                // What was held back still arrives a lease after it was sent.
                mono_ns() + ttl.as_nanos() as u64
            }
        };
        faults.outages.push(Outage {
            port: masters.server(node).port(),
            how: how.name(),
            from,
            to,
        });
    }
}

/// One round of the restart scenarios, on three masters A, B and C (roles drawn at
/// random). Right after a grant, C is killed: the hold now lives on A and B only, as if C
/// had been unreachable when it was granted. Then B is `kill -9`ed and restarted, and C
/// restarted. Without persistence both come back empty: the holder is left on A alone
/// while it still believes, B and C make a majority for the waiter (the documented hole),
/// and their fence counters start again at 1. With AOF and appendfsync always, B still
/// has the hold, and C alone cannot outvote A and B.
///
/// The hold is taken with all three up because two contenders on two masters (A and B
/// with C down) can split them, and a split can repeat for seconds (each give-back wakes
/// the other at once).
///
/// With `kept_down` (`redlock-delayed-restart`), B is `kill -9`ed too and both stay down
/// that long (more than a lease) before they return empty: A alone is no majority, so the
/// holder's renewals fail and its belief ends at its deadline, before B and C are back.
fn amnesia(
    masters: &mut IndependentMasters,
    run: &Run,
    faults: &mut Faults,
    kept_down: Option<Duration>,
) {
    let mut roles: Vec<usize> = (0..masters.len()).collect();
    rand::seq::SliceRandom::shuffle(roles.as_mut_slice(), &mut rand::rng());
    let (b, c) = (roles[1], roles[2]);
    let how = match (run.durable, kept_down) {
        (true, _) => "kill -9, restarted on its AOF",
        (false, None) => "kill -9, restarted empty",
        (false, Some(_)) => "kill -9, kept down 1.5 leases, restarted empty",
    };
    wait_for_a_fresh_hold(run);
    if interrupted().is_some() {
        return;
    }
    let down = mono_ns();
    masters.server_mut(c).kill9();
    let restart = mono_ns();
    if let Some(kept_down) = kept_down {
        masters.server_mut(b).kill9();
        sleep(kept_down);
        if interrupted().is_some() {
            return;
        }
    }
    masters.server_mut(b).restart();
    faults.outages.push(Outage {
        port: masters.server(b).port(),
        how,
        from: restart,
        to: mono_ns(),
    });
    masters.server_mut(c).restart();
    faults.outages.push(Outage {
        port: masters.server(c).port(),
        how,
        from: down,
        to: mono_ns(),
    });
}

/// Waits (at most three leases) for a Redlock hold granted from now on: its holding file
/// is written after the grant. A fresh one has at least three quarters of a lease of work
/// ahead.
pub(super) fn wait_for_a_fresh_hold(run: &Run) {
    let since = SystemTime::now();
    let until = mono_ns() + (run.ttl * 3).as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let fresh = run.holders(Primitive::Redlock).iter().any(|(name, _)| {
            std::fs::metadata(run.holding_dir().join(name))
                .and_then(|m| m.modified())
                .is_ok_and(|at| at > since)
        });
        if fresh {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}
