//! The faults on the lock holders themselves: paused past their lease (`client-pause`),
//! killed (`holder-crash`), or both in turn (`rwlock-readers`, `reentrant`); and the
//! freeze of every holder that the failovers use.

use std::time::{Duration, SystemTime};

use rand::seq::IndexedRandom;

use super::{usual_clients, Fault};
use crate::check::{Faults, Findings, Kill, Pause};
use crate::client::Primitive;
use crate::record::mono_ns;
use crate::run::clients::{work_ms, Run};
use crate::run::process::{signal, sleep, stop_or_continue, wait_until};
use crate::servers::LockServers;
use crate::verdict::Evidence;

/// A holder SIGSTOPped past its lease, then resumed.
#[derive(Debug)]
pub struct ClientPause;

impl Fault for ClientPause {
    fn inject(&self, index: u32, run: &Run, _: &mut LockServers, faults: &mut Faults) {
        pause_holders(index, run, &run.config.primitives, faults, &[]);
    }

    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        judge_pause(evidence)
    }
}

/// Holders `kill -9`ed while holding.
#[derive(Debug)]
pub struct HolderCrash;

impl Fault for HolderCrash {
    fn inject(&self, _: u32, run: &Run, _: &mut LockServers, faults: &mut Faults) {
        crash_holders(run, &run.config.primitives, faults);
    }

    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        judge_crash(evidence.total, evidence.ttl)
    }
}

/// Each round one holder per lock killed, then one paused past its lease.
#[derive(Debug)]
pub struct PauseAndCrash;

impl Fault for PauseAndCrash {
    // A kill, up to two leases for a holder to pause, the pause's two, then calm.
    fn round(&self, ttl: Duration) -> Duration {
        ttl * 6
    }

    fn clients(&self, primitive: Primitive) -> Vec<(&'static str, usize)> {
        if primitive == Primitive::Write {
            // Two writers, resting between holds, beside four readers: a writer comes back
            // while readers hold, and must wait for them, not behind the readers who come
            // later.
            vec![("lib-async", 0), ("cli", 0)]
        } else {
            usual_clients(primitive)
        }
    }

    fn inject(&self, index: u32, run: &Run, _: &mut LockServers, faults: &mut Faults) {
        let ttl = run.ttl;
        // One kind to kill and one to pause per round, in turn (a reader and a writer
        // never hold at once): for the read-write lock, a reader killed and a writer
        // paused, then the other way round. The kill first: a holder killed right
        // after its pause would be counted as believing until the kill (the checker
        // cannot see its deadline), and its late write would not come.
        let kinds = &run.config.primitives;
        let (pausing, killing) = (
            kinds[index as usize % kinds.len()],
            kinds[(index as usize + 1) % kinds.len()],
        );
        wait_until(ttl * 2, || !killable(run, killing).is_empty());
        let before = faults.kills.len();
        crash_holders(run, &[killing], faults);
        // Not a killed one: until its slot reaps it, it still looks alive.
        let killed: Vec<u32> = faults.kills[before..]
            .iter()
            .flat_map(|k| k.pids.iter().copied())
            .collect();
        // A holder of the client kind whose turn it is, if one comes within two
        // leases (the killed holder's lock waits for its lease).
        wait_until(ttl * 2, || {
            !pause_candidates(index, run, pausing, &killed).0.is_empty()
        });
        // Into the first step's work, between its check and its write: a holder
        // paused as it begins finds its belief ended at the check and writes
        // nothing late.
        let work = work_ms(ttl);
        sleep(Duration::from_millis(rand::Rng::random_range(
            &mut rand::rng(),
            work / 4..work / 2,
        )));
        pause_holders(index, run, &[pausing], faults, &killed);
    }

    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        let mut problems = judge_pause(evidence);
        problems.extend(judge_crash(evidence.total, evidence.ttl));
        problems
    }
}

/// One holder of each of `kinds` SIGSTOPped for two leases, then resumed: library and
/// `dlock run` holders in turn (by `index`); none of the processes `killed`.
fn pause_holders(index: u32, run: &Run, kinds: &[Primitive], faults: &mut Faults, killed: &[u32]) {
    let ttl = run.ttl;
    // One holder per primitive at once; library and `dlock run` holders in turn.
    let mut paused = Vec::new();
    for &primitive in kinds {
        let (preferred, others) = pause_candidates(index, run, primitive, killed);
        let pool = if preferred.is_empty() {
            others
        } else {
            preferred
        };
        if let Some(pids) = pool.choose(&mut rand::rng()) {
            paused.push(pids.clone());
        }
    }
    let from = mono_ns();
    let wall = SystemTime::now();
    for pids in &paused {
        run.paused.lock().unwrap().push((pids.clone(), wall));
        stop_or_continue(pids, libc::SIGSTOP);
        faults.pauses.push(Pause {
            pids: pids.clone(),
            from,
            renewals_failing_from: None,
        });
    }
    sleep(ttl * 2);
    for pids in &paused {
        stop_or_continue(pids, libc::SIGCONT);
    }
}

/// The holders of `primitive` to pause in round `index` (none of the processes `killed`):
/// those of the client kind whose turn it is (library clients in even rounds, `dlock run`
/// in odd ones, for a kind that has `dlock run` clients), and the others.
fn pause_candidates(
    index: u32,
    run: &Run,
    primitive: Primitive,
    killed: &[u32],
) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let (mut preferred, mut others) = (Vec::new(), Vec::new());
    for (name, pids) in run.holders(primitive) {
        if pids.iter().any(|pid| killed.contains(pid)) {
            continue;
        }
        let cli_turn = index % 2 == 1 && primitive.has_cli_clients();
        if name.contains("_cli-") == cli_turn {
            preferred.push(pids);
        } else {
            others.push(pids);
        }
    }
    (preferred, others)
}

/// One holder of each of `kinds` `kill -9`ed: a library client, or a `dlock run` wrapper
/// (its command dies with it); one of [`killable`].
fn crash_holders(run: &Run, kinds: &[Primitive], faults: &mut Faults) {
    for &primitive in kinds {
        if let Some(pids) = killable(run, primitive).choose(&mut rand::rng()) {
            // The library client, or the `dlock run` wrapper (its command must
            // die with it).
            if signal(pids[0] as i32, libc::SIGKILL) {
                faults.kills.push(Kill {
                    primitive,
                    at: mono_ns(),
                    pids: pids.clone(),
                });
            }
        }
    }
}

/// The holders of `primitive` that may be killed: not in a hold that was paused. Resumed,
/// such a process may still be winding down a hold whose belief ended at its deadline,
/// and the checker counts a killed library client as believing until the kill (it cannot
/// see the deadline). Its later holds may be killed (a holding file is written as each
/// hold begins).
fn killable(run: &Run, primitive: Primitive) -> Vec<Vec<u32>> {
    let paused = run.paused.lock().unwrap().clone();
    run.holders(primitive)
        .into_iter()
        .filter(|(name, pids)| {
            let begun = std::fs::metadata(run.holding_dir().join(name)).and_then(|m| m.modified());
            !paused.iter().any(|(paused_pids, at)| {
                pids.iter().any(|pid| paused_pids.contains(pid))
                    && begun.as_ref().map_or(true, |begun| begun <= at)
            })
        })
        .map(|(_, pids)| pids)
        .collect()
}

/// Freezes every holder of every lock (SIGSTOP; a `dlock run` wrapper with its command's
/// group), as holders in a long pause would be, and returns them to be thawed. The pauses
/// go to the checker with when renewals began to fail, if before.
pub(super) fn freeze_holders(
    run: &Run,
    faults: &mut Faults,
    renewals_failing_from: Option<u64>,
) -> Vec<Vec<u32>> {
    let holders: Vec<Vec<u32>> = run
        .config
        .primitives
        .iter()
        .flat_map(|&primitive| run.holders(primitive))
        .map(|(_, pids)| pids)
        .collect();
    let from = mono_ns();
    for pids in &holders {
        stop_or_continue(pids, libc::SIGSTOP);
        faults.pauses.push(Pause {
            pids: pids.clone(),
            from,
            renewals_failing_from,
        });
    }
    holders
}

/// What a pause of holders must show, where holders write: only exclusive kinds do
/// (three permit holders legitimately interleave).
fn judge_pause(evidence: &Evidence) -> Vec<String> {
    match evidence.primitives.iter().any(|p| p.exclusive()) {
        true => pause_problems(evidence.total, evidence.guarded),
        false => Vec::new(),
    }
}

/// What a pause of holders must show: the late writes it made were refused (by the fenced
/// store, and by Redis for guarded writes), and the unfenced counter lost an update (the
/// negative control that shows the pause really produced a stale writer).
fn pause_problems(total: &Findings, guarded: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if total.stale_rejected == 0 {
        problems.push("no late write was refused by the fenced store".into());
    }
    if total.lost_updates == 0 {
        problems
            .push("the unfenced counter lost no update (the negative control saw nothing)".into());
    }
    if guarded && total.guarded_refused == 0 {
        problems.push("no late guarded write was refused by Redis".into());
    }
    problems
}

/// What a crash of holders must show: each killed holder's lock granted again within the
/// lease, plus the waiter's wake-up and, for `dlock run`, its command's start (debug
/// builds on 2 busy cores: a few hundred ms at worst).
fn judge_crash(total: &Findings, ttl: Duration) -> Vec<String> {
    let bound_ms = (ttl.as_millis() + 500) as f64;
    match total.max_free_ms {
        None => vec!["no holder was killed".into()],
        Some(ms) if ms.is_infinite() => {
            vec!["a killed holder's lock was never granted again".into()]
        }
        Some(ms) if ms > bound_ms => vec![format!(
            "a killed holder's lock took {ms:.0} ms to free (bound: the lease plus 500 ms)"
        )],
        Some(_) => Vec::new(),
    }
}
