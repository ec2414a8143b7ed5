//! `redlock-clock-offset` and its negative control: five Redlock masters whose wall
//! clocks are offset from one another, majorities varied by holding masters out.

use std::thread;
use std::time::Duration;

use dlock_testkit::IndependentMasters;
use rand::seq::IndexedRandom;

use super::ClockTools;
use crate::check::{self, Faults, Findings, Outage};
use crate::client::Primitive;
use crate::fault::{usual_clients, Fault, Setup};
use crate::record::mono_ns;
use crate::run::clients::Run;
use crate::run::process::{interrupted, sleep};
use crate::servers::LockServers;
use crate::verdict::Evidence;

/// Five Redlock masters whose wall clocks are offset from one another (by up to a second
/// each way, from the start: no clock moves); majorities vary as masters are held by
/// another token in turn. `raise`: the clients raise fences as the library does (false:
/// the negative control's skip the raise).
#[derive(Debug)]
pub struct ClockOffset {
    /// The clients raise Redlock fences.
    pub raise: bool,
}

impl Fault for ClockOffset {
    fn kinds(&self) -> &'static [Primitive] {
        &[Primitive::Redlock]
    }

    fn moves_clocks(&self) -> bool {
        true
    }

    // Holds of a few ms where clock offsets of 10 ms are to be seen between grants.
    fn work_ms(&self, _: Duration) -> u64 {
        OFFSET_WORK_MS
    }

    fn raises_fences(&self) -> bool {
        self.raise
    }

    // Two library clients, whose holds of a few ms follow one another within milliseconds
    // (a `dlock run` takes longer to start than a clock offset of 10 ms).
    fn clients(&self, primitive: Primitive) -> Vec<(&'static str, usize)> {
        match primitive {
            Primitive::Redlock => vec![("lib-async", 0), ("lib-blocking", 0)],
            _ => usual_clients(primitive),
        }
    }

    fn servers(&self, _: &Setup) -> Result<LockServers, String> {
        let tools = ClockTools::find()?;
        let clocks: Vec<_> = CLOCK_OFFSETS.iter().map(|o| o.faketime()).collect();
        Ok(LockServers::Redlock(IndependentMasters::start_each(
            tools.masters(&clocks),
        )))
    }

    fn inject(&self, index: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
        if let LockServers::Redlock(masters) = servers {
            clock_offset_round(index, masters, run, faults);
        }
    }

    // Without the raise, fences must go back (below), and that is the negative control's
    // proof rather than a double grant.
    fn fences_may_go_back(&self, _: crate::verdict::Expect) -> bool {
        !self.raise
    }

    fn violation_is_a_double_grant(&self) -> bool {
        self.raise
    }

    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        judge_clock_offset(self.raise, evidence.total, evidence.holds, evidence.faults)
    }
}

/// One master of `redlock-clock-offset`: its wall clock's offset (libfaketime's `FAKETIME`,
/// seconds, fractions allowed) and what an exclusion of it is called in the faults.
pub(crate) struct MasterClock {
    faketime: &'static str,
    pub(crate) excluded: &'static str,
}

impl MasterClock {
    fn faketime(&self) -> Option<Vec<(String, String)>> {
        (self.faketime != "0").then(|| vec![("FAKETIME".into(), self.faketime.into())])
    }
}

/// The masters of `redlock-clock-offset`, A to E: two ahead of C (a second and the 10 ms
/// NTP routinely leaves), two behind it by as much. Set from the start, never moved: a
/// lease there lasts as long as anywhere.
pub(crate) const CLOCK_OFFSETS: [MasterClock; 5] = [
    MasterClock {
        faketime: "+1",
        excluded: "held by another token (clock 1 s ahead)",
    },
    MasterClock {
        faketime: "+0.01",
        excluded: "held by another token (clock 10 ms ahead)",
    },
    MasterClock {
        faketime: "0",
        excluded: "held by another token (clock not offset)",
    },
    MasterClock {
        faketime: "-0.01",
        excluded: "held by another token (clock 10 ms behind)",
    },
    MasterClock {
        faketime: "-1",
        excluded: "held by another token (clock 1 s behind)",
    },
];

/// `redlock-clock-offset`'s work steps, at most (ms): no pause in them (half of 1 ms,
/// rounded down), a hold of a few ms of the store's round trips, so that grants follow one
/// another within the 10 ms offsets.
const OFFSET_WORK_MS: u64 = 1;

/// The token that holds a master out of the majorities in `redlock-clock-offset`: no
/// client's.
const FOREIGN_TOKEN: &str = "dlock-torture-another-owner";

/// One round of `redlock-clock-offset`, for three leases: phases of 20 to 100 ms, in each
/// of which up to two masters, drawn at random (every such set alike), are held by another
/// token, so that the clients' majorities leave them out: a grant whose fence is the clock
/// of a master ahead is followed, within milliseconds, by grants without that master. In
/// even rounds (the first) A, a second ahead, is held out throughout, and the phases hold
/// out at most one more: B's 10 ms decide the fences there, rather than A's second.
fn clock_offset_round(index: u32, masters: &IndependentMasters, run: &Run, faults: &mut Faults) {
    let until = mono_ns() + (run.ttl * 3).as_nanos() as u64;
    let held: Vec<usize> = match index % 2 {
        0 => vec![0],
        _ => Vec::new(),
    };
    hold_out(masters, &held, until, faults);
    let free: Vec<usize> = (0..masters.len()).filter(|n| !held.contains(n)).collect();
    let at_most = 2 - held.len();
    let mut sets: Vec<Vec<usize>> = vec![Vec::new()];
    for (i, &a) in free.iter().enumerate() {
        sets.push(vec![a]);
        if at_most == 2 {
            sets.extend(free[i + 1..].iter().map(|&b| vec![a, b]));
        }
    }
    while mono_ns() < until && interrupted().is_none() {
        let out = sets.choose(&mut rand::rng()).cloned().unwrap_or_default();
        let length = rand::Rng::random_range(&mut rand::rng(), 20..100u64);
        let end = (mono_ns() + length * 1_000_000).min(until);
        hold_out(masters, &out, end, faults);
        sleep(Duration::from_nanos(end.saturating_sub(mono_ns())));
    }
}

/// Holds each of `nodes` out of the majorities until `end`: once the clients' hold there is
/// given back, another token takes the lock (`SET NX`, tried every 2 ms), with a lease
/// that ends at `end`. Returns once every one is taken, or at `end`.
fn hold_out(masters: &IndependentMasters, nodes: &[usize], end: u64, faults: &mut Faults) {
    let lock = Primitive::Redlock.lock_name();
    let mut left: Vec<usize> = nodes.to_vec();
    while !left.is_empty() && interrupted().is_none() {
        let ms = end.saturating_sub(mono_ns()) / 1_000_000;
        if ms == 0 {
            return;
        }
        left.retain(|&node| {
            let set: Option<String> = masters.cmd_on(
                node,
                &["SET", &lock, FOREIGN_TOKEN, "NX", "PX", &ms.to_string()],
            );
            if set.is_some() {
                faults.outages.push(Outage {
                    port: masters.server(node).port(),
                    how: CLOCK_OFFSETS[node].excluded,
                    from: mono_ns(),
                    to: end,
                });
            }
            set.is_none()
        });
        thread::sleep(Duration::from_millis(2));
    }
}

/// What the clock offset must show: grants while the master a second ahead was held out
/// (and so by majorities without it), or the schedule proved nothing; and, in the negative
/// control without the raise, fences going back (or the fence check would be blind) and
/// still no double grant (skipping the raise changes fences, not who holds).
fn judge_clock_offset(
    raise: bool,
    total: &Findings,
    holds: &[check::Hold],
    faults: &Faults,
) -> Vec<String> {
    let mut problems = Vec::new();
    let without_fastest = holds.iter().any(|h| {
        faults
            .outages
            .iter()
            .any(|o| o.how == CLOCK_OFFSETS[0].excluded && o.from <= h.start && h.start < o.to)
    });
    if !without_fastest {
        problems.push(
            "no grant while the master a second ahead was held out: the majorities did not vary"
                .into(),
        );
    }
    if !raise {
        if total.fence_regressions == 0 {
            problems.push(
                "no fence went back without the raise: the fence check would be blind".into(),
            );
        }
        if total.overlaps > 0 {
            problems.push(format!("{} overlapping holds", total.overlaps));
        }
    }
    problems
}
