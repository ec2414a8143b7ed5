//! The judge: the records of one run checked against its scenario's expectation, what
//! every lock kind must show, and what its fault adds ([`crate::fault::Fault::judge`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::catalogue::Scenario;
use crate::check::{self, Faults, Findings};
use crate::client::Primitive;
use crate::config::Config;
use crate::record::Event;
use crate::verdict::{Evidence, Expect};

/// One scenario's result.
#[derive(Debug, Serialize)]
pub struct Outcome {
    pub scenario: &'static str,
    pub expect: Expect,
    /// `None` while pending.
    pub ok: Option<bool>,
    /// `None` while pending (nothing was measured).
    #[serde(flatten)]
    pub findings: Option<Findings>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub primitives: BTreeMap<&'static str, Findings>,
    /// Grants per kind of client (`async`, `blocking`: the library's APIs; `cli`:
    /// `dlock run`), every lock of the scenario together.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub acquisitions_by_client: BTreeMap<&'static str, u64>,
    pub rounds: u32,
    pub seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<&'static str>,
    /// Not run: none of the chosen lock kinds runs in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Why `ok` is false, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl Outcome {
    /// A scenario that was not judged: pending, or interrupted.
    pub(crate) fn unjudged(
        scenario: &Scenario,
        seconds: f64,
        pending: Option<&'static str>,
    ) -> Outcome {
        Outcome {
            scenario: scenario.name,
            expect: scenario.expect,
            ok: None,
            findings: None,
            primitives: BTreeMap::new(),
            acquisitions_by_client: BTreeMap::new(),
            rounds: 0,
            seconds,
            pending,
            skipped: None,
            problems: Vec::new(),
        }
    }
}

/// Checks the records against the scenario's expectation.
pub fn judge(
    scenario: &Scenario,
    config: &Config,
    events: &[Event],
    faults: &Faults,
    counters: &HashMap<String, u64>,
    guarded: Option<&HashMap<String, u64>>,
) -> Outcome {
    let holds = check::holds(events, faults, config.ttl.as_nanos() as u64);
    let mut increments: HashMap<&str, u64> = HashMap::new();
    let mut guarded_written: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut guarded_refused = HashMap::<&str, u64>::new();
    for event in events {
        match event {
            Event::Increment { client, .. } => {
                *increments.entry(check::primitive_of(client)).or_default() += 1;
            }
            Event::GuardedIncrement { client, value, .. } => {
                guarded_written
                    .entry(check::primitive_of(client))
                    .or_default()
                    .push(*value);
            }
            Event::GuardedRefused { client, .. } => {
                *guarded_refused
                    .entry(check::primitive_of(client))
                    .or_default() += 1;
            }
            _ => {}
        }
    }
    let mut total = Findings::default();
    let mut primitives = BTreeMap::new();
    for &primitive in &config.primitives {
        let mine: Vec<_> = holds
            .iter()
            .filter(|h| check::primitive_of(&h.client) == primitive.name())
            .cloned()
            .collect();
        let on_its_lock: Vec<_> = holds
            .iter()
            .filter(|h| {
                config.primitives.iter().any(|other| {
                    other.lock_name() == primitive.lock_name()
                        && check::primitive_of(&h.client) == other.name()
                })
            })
            .cloned()
            .collect();
        let mut found = check::check(
            primitive,
            &mine,
            &on_its_lock,
            increments.get(primitive.name()).copied().unwrap_or(0),
            counters.get(primitive.name()).copied().unwrap_or(0),
            &faults.kills,
        );
        if let Some(guarded) = guarded {
            let name = primitive.name();
            let mut written = guarded_written.get(name).cloned().unwrap_or_default();
            let applied = written.len() as u64;
            written.sort_unstable();
            written.dedup();
            // Two increments that wrote the same value: one undid the other. (Counted
            // this way, an increment applied but not recorded, its process killed first,
            // cannot hide a lost one.) And the final value must hold every recorded one.
            let repeated = applied - written.len() as u64;
            let missing = applied.saturating_sub(guarded.get(name).copied().unwrap_or(0));
            found.guarded_lost_updates = repeated.max(missing);
            found.guarded_refused = guarded_refused.get(name).copied().unwrap_or(0);
        }
        if primitive == Primitive::Reentrant {
            (
                found.nested_holds,
                found.nested_fence_mismatches,
                found.nested_releases_that_freed,
                found.nested_releases_that_kept,
            ) = check::nested(events);
        }
        if primitive == Primitive::Read && config.primitives.contains(&Primitive::Write) {
            rwlock_findings(&mut found, config.ttl, events, &holds);
        }
        total.add(&found);
        primitives.insert(primitive.name(), found);
    }
    let mut problems = Vec::new();
    if total.acquisitions == 0 {
        problems.push("no acquisitions: nothing was tested".to_string());
    }
    // Every lock must have been held, and every kind of client that wanted one must have
    // held some lock: a client kind that never gets in (a `dlock run` that cannot start, a
    // writer without its fence) would make its part of the proof vacuous. Per lock *and*
    // kind is too strict: with a few holds per lock, an unfair lock may pass one client
    // by. (A Redlock has async library clients only.)
    for &primitive in &config.primitives {
        let prefix = format!("{}/", primitive.name());
        if !holds.iter().any(|h| h.client.starts_with(&prefix)) {
            problems.push(format!(
                "{}: no client ever held the lock",
                primitive.name()
            ));
        }
    }
    let mut kinds: Vec<&str> = config
        .primitives
        .iter()
        .flat_map(|&p| scenario.fault.clients(p))
        .map(|(kind, _)| kind)
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds {
        let infix = format!("/{kind}-");
        if !holds.iter().any(|h| h.client.contains(&infix)) {
            problems.push(format!("no {kind} client ever held any lock"));
        }
    }
    // Fences never go backwards, whatever the fault: where the lock itself is forgotten
    // (the negative controls below), the clock floor keeps them growing; where a Redlock
    // master's clock jumps ahead, the raise keeps its fence on a majority. The fence
    // check's own negative control is in check.rs's tests. The exceptions are the fault's
    // to name (a split brain; clients that skip the raise).
    let fences_may_go_back = scenario.fault.fences_may_go_back(scenario.expect);
    if total.fence_regressions > 0 && !fences_may_go_back {
        problems.push(format!("{} fences went backwards", total.fence_regressions));
    }
    if scenario.expect == Expect::Safe && total.overlaps > 0 {
        problems.push(format!("{} overlapping holds", total.overlaps));
    }
    // On one server a guarded read-modify-write cannot lose an update while the server
    // keeps its data: the hold is checked where the data is.
    if scenario.expect == Expect::Safe && total.guarded_lost_updates > 0 {
        problems.push(format!(
            "{} guarded increments were lost",
            total.guarded_lost_updates
        ));
    }
    // A negative control must show its double grant, or the overlap check could be blind
    // unnoticed.
    if scenario.expect == Expect::Violation
        && total.overlaps == 0
        && scenario.fault.violation_is_a_double_grant()
    {
        problems.push(
            "the expected double grant was not seen: the overlap check would be blind".into(),
        );
    }
    // What the fault must show besides (pauses refused late writes, crashes freed locks,
    // a clock jump's fences, a partition's cut-off clients, ...). Before the kinds' own
    // checks below: those concern only the scenarios about kinds of their own.
    problems.extend(scenario.fault.judge(&Evidence {
        expect: scenario.expect,
        ttl: config.ttl,
        primitives: &config.primitives,
        total: &total,
        holds: &holds,
        faults,
        guarded: guarded.is_some(),
    }));
    if config.primitives.contains(&Primitive::Reentrant) {
        if total.nested_holds == 0 {
            problems.push("no hold was re-entered: the nesting proved nothing".into());
        }
        if total.nested_fence_mismatches > 0 {
            problems.push(format!(
                "{} inner holds were refused or had another fence than their outer hold",
                total.nested_fence_mismatches
            ));
        }
        if total.nested_holds > 0 && total.nested_releases_that_kept == 0 {
            problems.push(
                "no inner release was seen to keep the outer hold: the nesting proved nothing"
                    .into(),
            );
        }
        if total.nested_releases_that_freed > 0 {
            problems.push(format!(
                "{} inner releases freed the lock while the outer hold was believed",
                total.nested_releases_that_freed
            ));
        }
    }
    if config.primitives.contains(&Primitive::Read) && config.primitives.contains(&Primitive::Write)
    {
        if total.readers_passing_a_writer > 0 {
            problems.push(format!(
                "{} read grants passed a writer that had waited a lease longer: writers starved",
                total.readers_passing_a_writer
            ));
        }
        if !a_writer_waited_for_readers(events, &holds) {
            problems.push(
                "no writer ever waited for readers: the starvation check proved nothing".into(),
            );
        }
    }
    Outcome {
        scenario: scenario.name,
        expect: scenario.expect,
        ok: Some(problems.is_empty()),
        findings: Some(total),
        primitives,
        acquisitions_by_client: by_client(&holds),
        rounds: config.rounds,
        seconds: 0.0,
        pending: None,
        skipped: None,
        problems,
    }
}

/// The read-write lock's oracle, over both sides (added to the read side's findings):
/// readers beside a writer count as overlaps, and writers must not be passed by readers
/// that came a lease after them.
fn rwlock_findings(found: &mut Findings, ttl: Duration, events: &[Event], holds: &[check::Hold]) {
    let side = |primitive: Primitive| -> Vec<check::Hold> {
        holds
            .iter()
            .filter(|h| check::primitive_of(&h.client) == primitive.name())
            .cloned()
            .collect()
    };
    let (overlaps, described) =
        check::rwlock_overlaps(&side(Primitive::Read), &side(Primitive::Write));
    found.overlaps += overlaps;
    found.overlapping.extend(described);
    let attempts = check::attempts(events);
    let of = |primitive: Primitive| -> Vec<check::Attempt> {
        attempts
            .iter()
            .filter(|a| check::primitive_of(&a.client) == primitive.name())
            .cloned()
            .collect()
    };
    (
        found.readers_passing_a_writer,
        found.writer_attempts_given_up,
        found.longest_writer_wait_ms,
    ) = check::writer_starvation(
        &of(Primitive::Write),
        &of(Primitive::Read),
        ttl.as_nanos() as u64,
    );
}

/// Whether a writer ever waited while readers held: otherwise the starvation check had
/// nothing to see.
fn a_writer_waited_for_readers(events: &[Event], holds: &[check::Hold]) -> bool {
    let reads: Vec<&check::Hold> = holds
        .iter()
        .filter(|h| check::primitive_of(&h.client) == Primitive::Read.name())
        .collect();
    check::attempts(events)
        .iter()
        .filter(|a| check::primitive_of(&a.client) == Primitive::Write.name() && a.granted)
        .any(|write| {
            reads
                .iter()
                .any(|read| read.start < write.from && read.end > write.from)
        })
}

/// How many holds each kind of client had (client names are `lock/kind-n.round`).
fn by_client(holds: &[check::Hold]) -> BTreeMap<&'static str, u64> {
    let mut counts = BTreeMap::new();
    for (infix, kind) in [
        ("/lib-async-", "async"),
        ("/lib-blocking-", "blocking"),
        ("/cli-", "cli"),
    ] {
        let count = holds.iter().filter(|h| h.client.contains(infix)).count() as u64;
        counts.insert(kind, count);
    }
    counts
}

#[cfg(test)]
mod tests;
