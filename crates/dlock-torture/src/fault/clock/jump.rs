//! `redlock-clock-jump`: five Redlock masters, the wall clock of one jumps forward by more
//! than a lease.

use std::path::Path;
use std::thread;
use std::time::Duration;

use dlock_testkit::IndependentMasters;

use super::ClockTools;
use crate::check::{self, Faults, Outage};
use crate::client::Primitive;
use crate::fault::redlock::wait_for_a_fresh_hold;
use crate::fault::{usual_clients, Fault, Setup};
use crate::record::mono_ns;
use crate::run::clients::Run;
use crate::run::process::{interrupted, sleep};
use crate::servers::LockServers;
use crate::verdict::Evidence;

/// Five Redlock masters; the wall clock of one jumps forward by more than a lease.
#[derive(Debug)]
pub struct ClockJump;

impl Fault for ClockJump {
    fn kinds(&self) -> &'static [Primitive] {
        &[Primitive::Redlock]
    }

    fn moves_clocks(&self) -> bool {
        true
    }

    fn ttl(&self, asked: Duration) -> Duration {
        asked.max(CLOCK_JUMP_TTL)
    }

    // Up to three leases for a grant, three with the clock ahead, then calm.
    fn round(&self, ttl: Duration) -> Duration {
        ttl * 7
    }

    fn clients(&self, primitive: Primitive) -> Vec<(&'static str, usize)> {
        match primitive {
            // One holder; each round starts the contender (`lib-async`) itself. A waiter
            // already there would split C, D and E with it and the two would collide.
            Primitive::Redlock => vec![("lib-blocking", 0)],
            _ => usual_clients(primitive),
        }
    }

    fn servers(&self, setup: &Setup) -> Result<LockServers, String> {
        let tools = ClockTools::find()?;
        let offset_file = setup.dir.join(CLOCK_OFFSET_FILE);
        set_clock_offset(&offset_file, 0);
        Ok(LockServers::Redlock(IndependentMasters::start_each(
            tools.masters(&jumping_clocks(&offset_file)),
        )))
    }

    fn inject(&self, index: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
        if let LockServers::Redlock(masters) = servers {
            clock_jump_round(index, masters, run, faults);
        }
    }

    // What the jump does to fences: the contender's fence (C's jumped clock) is above the
    // holder's, so the fenced store refuses the holder's late writes (and grants without C
    // stay above it: no fence regression).
    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        judge_clock_jump(evidence.holds)
    }
}

/// The lease of `redlock-clock-jump`'s lock (at least): the contender must start, connect
/// to five masters and be granted between the jump and the holder's next renewal, a
/// third of a lease later.
const CLOCK_JUMP_TTL: Duration = Duration::from_secs(3);

/// The masters of `redlock-clock-jump`: A, B, C, D and E; C's clock jumps.
const CLOCK_JUMP_NODES: usize = 5;
const JUMPING_NODE: usize = 2;

/// How far C's clock jumps: three leases, in whole seconds (libfaketime's offsets).
fn clock_jump(ttl: Duration) -> u64 {
    (ttl * 3).as_secs_f64().ceil() as u64
}

/// `redlock-clock-jump`'s clocks: C's offset read from `offset_file` at every reading.
fn jumping_clocks(offset_file: &Path) -> Vec<Option<Vec<(String, String)>>> {
    (0..CLOCK_JUMP_NODES)
        .map(|node| {
            (node == JUMPING_NODE).then(|| {
                vec![
                    (
                        "FAKETIME_TIMESTAMP_FILE".into(),
                        offset_file.display().to_string(),
                    ),
                    ("FAKETIME_NO_CACHE".into(), "1".into()),
                ]
            })
        })
        .collect()
}

/// Sets C's clock offset (seconds) for libfaketime, atomically: a half-written file would
/// be read as some other time.
fn set_clock_offset(file: &Path, seconds: u64) {
    let next = file.with_extension("next");
    std::fs::write(&next, format!("+{seconds}\n")).expect("write the clock offset");
    std::fs::rename(&next, file).expect("set the clock offset");
}

/// One round of `redlock-clock-jump`, on five masters A to E. D and E are down; once a
/// hold is granted (by A, B and C: a bare majority), they return (empty, having never
/// had it) and, right after a renewal of the hold, C's wall clock jumps forward by three
/// more leases, so the hold's key expires there at once, and D and E come back: a
/// new client, started then, gets C, D and E while the holder still believes. Its fence is C's jumped
/// clock, the largest yet, raised on D and E. Then C is black-holed for 1.5 leases while
/// grants go on on A, B, D and E, whose clocks are three leases behind C's: every such
/// majority meets D or E, whose counters the raise put at C's clock, so their fences stay
/// above the waiter's. C's clock stays ahead; the next round moves it further.
fn clock_jump_round(index: u32, masters: &mut IndependentMasters, run: &Run, faults: &mut Faults) {
    let ttl = run.ttl;
    let offset_file = run.dir.join(CLOCK_OFFSET_FILE);
    let (d, e) = (JUMPING_NODE + 1, JUMPING_NODE + 2);
    // Killed, not black-holed: a request held up in the network would reach them later
    // and grant the holder there too.
    let cut = mono_ns();
    masters.server_mut(d).kill9();
    masters.server_mut(e).kill9();
    wait_for_a_fresh_hold(run);
    // The grant's own requests to D and E end within the node timeout (a tenth of the
    // lease): back sooner, they would find one still retrying, and grant it.
    sleep(ttl / 4);
    if interrupted().is_some() {
        return;
    }
    masters.server_mut(d).restart();
    masters.server_mut(e).restart();
    // Right after one of the holder's renewals: its next one, which the jump makes fail
    // (A and B alone are no majority) and which ends its belief, is then a third of a
    // lease away (a sixth at the least), time for the contender to start and be granted.
    // Seen on C, and given a moment to finish on the others: a renewal still running as
    // C's clock jumps finds the hold gone there, and ends the holder's belief at once.
    let renewed = |last: &mut i64| {
        let pttl: i64 = masters.cmd_on(JUMPING_NODE, &["PTTL", &Primitive::Redlock.lock_name()]);
        let grew = pttl > *last;
        *last = pttl;
        grew
    };
    let mut last = i64::MAX;
    renewed(&mut last);
    let until = mono_ns() + ttl.as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() && !renewed(&mut last) {
        thread::sleep(Duration::from_millis(2));
    }
    sleep(ttl / 30);
    let jumped = mono_ns();
    // Each round further ahead: the clock never goes back (a jump back is not tried).
    set_clock_offset(&offset_file, clock_jump(ttl) * (u64::from(index) + 1));
    for node in [d, e] {
        faults.outages.push(Outage {
            port: masters.server(node).port(),
            how: "kill -9, restarted empty (it never had the hold)",
            from: cut,
            to: jumped,
        });
    }
    // The contender, whose first attempt comes now: C, D and E are free for it.
    run.spawn_one(
        Primitive::Redlock,
        ("lib-async", 1 + index as usize),
        run.topology.clone(),
        jumped + (ttl * 3).as_nanos() as u64,
    );
    sleep(ttl * 3 / 2);
    let excluded = mono_ns();
    masters.proxy(JUMPING_NODE).black_hole(true);
    sleep(ttl * 3 / 2);
    masters.proxy(JUMPING_NODE).black_hole(false);
    let port = masters.server(JUMPING_NODE).port();
    faults.outages.push(Outage {
        port,
        how: "wall clock jumped three leases ahead (and stays)",
        from: jumped,
        to: mono_ns(),
    });
    faults.outages.push(Outage {
        port,
        how: "black-holed by its proxy",
        from: excluded,
        to: mono_ns(),
    });
}

/// C's libfaketime offset, in the scenario's directory.
const CLOCK_OFFSET_FILE: &str = "clock-offset";

/// What the clock jump must show besides its double grant: each grant that overlapped an
/// earlier hold (the contender's, granted by the jumped master) has the larger fence, so
/// fenced storage refuses the stale holder (the clock floor at work).
fn judge_clock_jump(holds: &[check::Hold]) -> Vec<String> {
    let mut problems = Vec::new();
    let believed: Vec<&check::Hold> = holds.iter().filter(|h| h.end > h.start).collect();
    for late in &believed {
        for early in &believed {
            let overlaps = early.start < late.start && late.start < early.end;
            if overlaps && late.fence <= early.fence {
                problems.push(format!(
                    "{} was granted beside {} with a fence not above its own ({} <= {}): fenced storage would take the stale holder's writes",
                    late.client, early.client, late.fence, early.fence
                ));
            }
        }
    }
    problems
}
