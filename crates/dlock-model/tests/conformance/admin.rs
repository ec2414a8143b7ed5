//! The scripts that look at a lock from outside (inspect, describe, list holders) and an
//! operator's forced release, run for real beside the model's `admin.rs` over states the
//! kinds' own scripts build (`kinds.rs`: mutex, fair mutex with waiters, semaphore,
//! read-write lock, reentrant mutex). The read-only scripts' replies must be the model's
//! view (what kind holds, who holds, the last fence, the live entries); a forced release's
//! fence, and the keys after it, must be the model's; forced releases are resent (a lost
//! reply), also after another call and after a new grant, and must evict once per call.

use dlock::__scripts::{DescribeKey, ForceRelease, Inspect, LiveEntries};
use dlock_model::admin::{Entries, Forced};
use dlock_model::mutant::Mutant;
use rand::Rng;

use super::harness::{same, Bench};
use super::kinds::{Kind, KindScripts, Run};
use super::library::{send, try_send};

/// A test-local bug in the model's read-only scripts, for the negative control.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// inspect lists ended read holds and permits too.
    InspectListsEnded,
    /// list holders answers none for a string whatever it was told.
    ListIgnoresKind,
}

/// The kinds' keys: the scripts that look from outside name the lock's keys and line.
struct AdminScripts {
    kinds: KindScripts,
}

fn admin_scripts() -> AdminScripts {
    AdminScripts {
        kinds: KindScripts::new(),
    }
}

/// What the runs reached.
#[derive(Default, Debug)]
struct Reached {
    /// Forced releases that evicted a hold.
    evicted: usize,
    /// Resent forced releases answered from the record while Redis held a later grant.
    spared: usize,
    /// Resends of a call another call came after.
    resent_after_another: usize,
    /// inspect replies with a holder.
    inspected_held: usize,
}

/// The kind of the hash of entries in this run, and the one asked for otherwise.
fn entries_of(kind: Kind) -> Entries {
    match kind {
        Kind::RwLock => Entries::Read,
        _ => Entries::Semaphore,
    }
}

/// One random run: the kind's steps, and inspect, describe, list holders and forced
/// releases (new, or resent) between them; keys compared after every step.
fn run_admin(
    seed: u64,
    scripts: &AdminScripts,
    conn: &mut redis::Connection,
    mutants: &[Mutant],
    bug: Option<Bug>,
    reached: &mut Reached,
) -> Result<(), String> {
    let mut run = Run::new(seed, conn, mutants);
    let entries = entries_of(run.kind);
    let mut record: Vec<Forced> = Vec::new();
    let mut requests: u8 = 0;
    for step in 0..40 {
        let choice = run.rng.random_range(0..14);
        let context = format!("seed {seed} ({:?}), step {step}: choice {choice}", run.kind);
        let now = run.now;
        match choice {
            0..=5 => run.kind_step(&scripts.kinds, &context)?,
            6 | 7 => {
                let inspect = Inspect {
                    keys: scripts.kinds.keys(),
                    queue: scripts.kinds.queue(),
                };
                let reply: Vec<String> = send(&inspect, run.conn);
                let mut expected = run.model.inspect(now, entries);
                if bug == Some(Bug::InspectListsEnded) && !run.model.entries.is_empty() {
                    expected.holders = run.model.entries.keys().copied().collect();
                }
                same(
                    reply[0].as_str(),
                    expected.kind,
                    &format!("{context}: kind"),
                )?;
                let mut holders: Vec<String> = reply[4..].chunks(4).map(|h| h[0].clone()).collect();
                holders.sort();
                let mut modelled: Vec<String> =
                    expected.holders.iter().map(|&t| run.text(t)).collect();
                modelled.sort();
                same(holders, modelled, &format!("{context}: holders"))?;
                reached.inspected_held += usize::from(expected.kind != "free");
                let fence: u64 = reply[2].parse().unwrap();
                same(
                    fence > 0,
                    expected.last_fence > 0,
                    &format!("{context}: fence"),
                )?;
                if fence > 0 {
                    let context = format!("{context}: last fence");
                    run.fences.check(fence, expected.last_fence, &context)?;
                }
                // The line's length counts lapsed waiters not yet purged, which the model
                // forgets once no waiter is live: then every one counted must be lapsed.
                let queued: usize = reply[3].parse().unwrap();
                if run.model.live_waiters(now).next().is_some() {
                    same(queued, expected.queued, &format!("{context}: queued"))?;
                } else {
                    let live = super::kinds::live_waiters_at(run.conn, &run.names);
                    same(live.len(), 0, &format!("{context}: live waiters"))?;
                }
            }
            8 => {
                // describe, of the lock key (as the kind's scripts would ask) and of the
                // fencing counter.
                let wanted = entries.name();
                let describe = DescribeKey {
                    key: &scripts.kinds.keys().key,
                    wanted,
                };
                let found: String = send(&describe, run.conn);
                let modelled = run.model.describe_lock(now, entries);
                same(found.as_str(), modelled, &format!("{context}: lock"))?;
                let describe = DescribeKey {
                    key: &scripts.kinds.keys().fence,
                    wanted: "counter",
                };
                let found: String = send(&describe, run.conn);
                let modelled = run.model.describe_counter();
                same(found.as_str(), modelled, &format!("{context}: counter"))?;
            }
            9 | 10 => {
                // list holders, of this run's kind of entries mostly, else of the other.
                let wanted = if run.rng.random_bool(0.7) {
                    entries
                } else {
                    [Entries::Read, Entries::Semaphore][run.rng.random_range(0..2)]
                };
                let string_is_empty = run.rng.random_bool(0.5);
                let list = LiveEntries {
                    key: &scripts.kinds.keys().key,
                    kind: wanted.name(),
                    string_is_empty,
                };
                let reply: redis::RedisResult<Vec<String>> = try_send(&list, run.conn);
                let mut expected = run
                    .model
                    .list_holders(now, entries, wanted, string_is_empty);
                if bug == Some(Bug::ListIgnoresKind) && run.model.holder(now).is_some() {
                    expected = Ok(Vec::new());
                }
                let server = reply.map(|flat| {
                    let mut tokens: Vec<String> =
                        flat.chunks(2).map(|pair| pair[0].clone()).collect();
                    tokens.sort();
                    tokens
                });
                let modelled = expected.map(|t| t.iter().map(|&t| run.text(t)).collect::<Vec<_>>());
                match (&server, &modelled) {
                    (Ok(a), Ok(b)) if a == b => {}
                    (Err(err), Err(_)) if err.to_string().contains("DLOCKTYPE") => {}
                    _ => {
                        return Err(format!(
                            "{context}: list holders says {server:?}, the model {modelled:?}"
                        ))
                    }
                }
            }
            _ => {
                // A forced release: a new call, or (a lost reply) one sent before resent.
                let request = if requests > 0 && run.rng.random_bool(0.4) {
                    run.rng.random_range(0..requests)
                } else {
                    requests += 1;
                    requests - 1
                };
                let resend = record.iter().any(|r| r.request == request);
                let before = run.holds_in_model();
                let expected = run.model.force_release(&mut record, request, now, mutants);
                let force = ForceRelease {
                    keys: scripts.kinds.keys(),
                    queue: scripts.kinds.queue(),
                    request: &format!("req{request}"),
                };
                let fence: u64 = send(&force, run.conn);
                same(fence > 0, expected > 0, &format!("{context}: forced"))?;
                if fence > 0 {
                    run.fences
                        .check(fence, expected, &format!("{context}: forced"))?;
                }
                let after = run.holds_in_model();
                if resend {
                    reached.resent_after_another += usize::from(record[0].request != request);
                    reached.spared += usize::from(!before.is_empty() && before == after);
                } else {
                    reached.evicted += usize::from(!before.is_empty());
                }
                // The record: the calls it answers, newest first.
                let text: String = redis::cmd("GET")
                    .arg(&run.names.forced)
                    .query(run.conn)
                    .unwrap();
                let ids: Vec<String> = text
                    .lines()
                    .map(|line| line.rsplit_once('|').unwrap().0.to_string())
                    .collect();
                let modelled: Vec<String> =
                    record.iter().map(|r| format!("req{}", r.request)).collect();
                same(ids, modelled, &format!("{context}: record"))?;
            }
        }
        run.compare(&context)?;
    }
    Ok(())
}

/// The runs of this suite and of `tokens.rs` for `seed`, for the coverage test.
pub fn run_suites(seed: u64, conn: &mut redis::Connection) {
    let mut reached = Reached::default();
    let _ = run_admin(seed, &admin_scripts(), conn, &[], None, &mut reached);
    super::tokens::run_tokens_suite(seed, conn);
}

#[test]
fn the_inspecting_scripts_and_the_forced_release_do_what_the_model_says() {
    let mut bench = Bench::start();
    let scripts = admin_scripts();
    let mut reached = Reached::default();
    bench.conforms(250, |seed, conn| {
        run_admin(seed, &scripts, conn, &[], None, &mut reached)
    });
    // The runs reach what they are for.
    let Reached {
        evicted,
        spared,
        resent_after_another,
        inspected_held,
    } = reached;
    for (what, count, least) in [
        ("forced releases that evicted", evicted, 100),
        (
            "resent forced releases that spared a later holder",
            spared,
            30,
        ),
        ("resends after another call", resent_after_another, 50),
        ("inspections of a held lock", inspected_held, 200),
    ] {
        assert!(count >= least, "only {count} {what} in 250 runs");
    }
    // The negative control: bugs in the model are told apart within the same runs.
    let bugs = [
        (Some(Mutant::ForceEvictsTwice), None),
        (None, Some(Bug::InspectListsEnded)),
        (None, Some(Bug::ListIgnoresKind)),
    ];
    let mut ignored = Reached::default();
    bench.tells_apart(&bugs, 250, |seed, conn, (mutant, bug)| {
        let mutants: Vec<Mutant> = mutant.into_iter().collect();
        run_admin(seed, &scripts, conn, &mutants, bug, &mut ignored)
    });
}
