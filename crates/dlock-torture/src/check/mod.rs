//! The checker: rebuilds every hold from the records and measures what the scenario's
//! expectation is judged on.

use std::collections::HashMap;

use serde::Serialize;

use crate::client::Primitive;
use crate::record::Event;

/// A client process frozen by the harness (SIGSTOP) from `from`.
#[derive(Debug, Clone)]
pub struct Pause {
    pub pids: Vec<u32>,
    pub from: u64,
    /// When renewals stopped succeeding, if that was before the freeze: a failover with
    /// replica acknowledgement pauses the replica first, and from then on no renewal is
    /// acknowledged.
    pub renewals_failing_from: Option<u64>,
}

/// A holder the harness killed (`kill -9`) at `at`: its process, or for `dlock run` the
/// wrapper and its command.
#[derive(Debug, Clone)]
pub struct Kill {
    pub primitive: Primitive,
    pub at: u64,
    pub pids: Vec<u32>,
}

/// A lock server out of its clients' reach from `from` to `to`: a Redlock master killed,
/// frozen, answering too late, or restarting.
#[derive(Debug, Clone)]
pub struct Outage {
    /// The server's port.
    pub port: u16,
    pub how: &'static str,
    pub from: u64,
    pub to: u64,
}

/// What the harness did, for the checker.
#[derive(Debug, Default)]
pub struct Faults {
    pub pauses: Vec<Pause>,
    pub kills: Vec<Kill>,
    pub outages: Vec<Outage>,
}

/// One hold as the client believed it: from the acquire's return to the end of belief.
#[derive(Debug, Clone)]
pub struct Hold {
    pub client: String,
    pub start: u64,
    pub end: u64,
    pub fence: u64,
    pub lost: bool,
    /// Writes to the fenced store: (when, accepted).
    pub writes: Vec<(u64, bool)>,
    /// A `dlock run` command that did not finish its work: `dlock run` stopped it when
    /// the lock was lost (or the harness killed its wrapper).
    pub command_stopped: bool,
    /// The last step this hold began (0: none).
    pub last_sign: u64,
}

/// Per primitive (and summed per scenario): what the checker found.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Findings {
    pub acquisitions: u64,
    /// Holds that began while the oracle's number of others were believed held.
    pub overlaps: u64,
    /// Late writes the fenced store refused.
    pub stale_rejected: u64,
    /// Increments of the unfenced counter that a stale read-modify-write undid.
    pub lost_updates: u64,
    /// Late writes of the guarded counter (kept beside the lock, on a single lock server)
    /// that Redis refused because the hold was gone.
    pub guarded_refused: u64,
    /// Increments of the guarded counter that were lost: applied, yet missing from its
    /// final value (0 unless the lock server lost data).
    pub guarded_lost_updates: u64,
    /// Holds whose lost signal fired.
    pub lost_signals: u64,
    /// `dlock run` commands stopped before they finished (kill-on-loss, or their wrapper
    /// killed by the harness).
    pub commands_stopped: u64,
    /// Holds whose fence was not above every fence granted before them.
    pub fence_regressions: u64,
    /// The longest a process went on writing after its lock was handed to another (ms).
    pub late_write_ms: f64,
    /// The longest from killing a holder to the next grant of its lock (ms).
    pub max_free_ms: Option<f64>,
    /// The first overlapping holds, described (client, believed interval, fence).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overlapping: Vec<String>,
    /// Read-write lock: read holds granted to a reader that asked a lease or more after a
    /// writer began waiting, before that writer was granted or gave up (a writer passed
    /// by later readers: starvation).
    #[serde(skip_serializing_if = "is_zero")]
    pub readers_passing_a_writer: u64,
    /// Read-write lock: writer attempts that gave up (busy past their wait, or Redis
    /// unreachable or refusing).
    #[serde(skip_serializing_if = "is_zero")]
    pub writer_attempts_given_up: u64,
    /// Read-write lock: the longest a writer's granted attempt waited (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub longest_writer_wait_ms: Option<f64>,
    /// Reentrant mutex: inner holds taken inside an outer one.
    #[serde(skip_serializing_if = "is_zero")]
    pub nested_holds: u64,
    /// Inner holds refused, or granted with another fence than their outer hold's.
    #[serde(skip_serializing_if = "is_zero")]
    pub nested_fence_mismatches: u64,
    /// Inner holds whose release freed the lock while the outer hold was believed.
    #[serde(skip_serializing_if = "is_zero")]
    pub nested_releases_that_freed: u64,
    /// Inner holds whose release Redis was seen to keep the outer hold after (a guarded
    /// read under the outer hold succeeded).
    #[serde(skip_serializing_if = "is_zero")]
    pub nested_releases_that_kept: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Findings {
    pub fn add(&mut self, other: &Findings) {
        self.acquisitions += other.acquisitions;
        self.overlaps += other.overlaps;
        self.stale_rejected += other.stale_rejected;
        self.lost_updates += other.lost_updates;
        self.guarded_refused += other.guarded_refused;
        self.guarded_lost_updates += other.guarded_lost_updates;
        self.lost_signals += other.lost_signals;
        self.commands_stopped += other.commands_stopped;
        self.fence_regressions += other.fence_regressions;
        self.late_write_ms = self.late_write_ms.max(other.late_write_ms);
        self.max_free_ms = match (self.max_free_ms, other.max_free_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.overlapping
            .extend(other.overlapping.iter().take(8).cloned());
        self.readers_passing_a_writer += other.readers_passing_a_writer;
        self.writer_attempts_given_up += other.writer_attempts_given_up;
        self.longest_writer_wait_ms =
            match (self.longest_writer_wait_ms, other.longest_writer_wait_ms) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        self.nested_holds += other.nested_holds;
        self.nested_fence_mismatches += other.nested_fence_mismatches;
        self.nested_releases_that_freed += other.nested_releases_that_freed;
        self.nested_releases_that_kept += other.nested_releases_that_kept;
    }
}

/// The client name's primitive: clients are named `<primitive>/<who>`.
pub fn primitive_of(client: &str) -> &str {
    client.split('/').next().unwrap_or("")
}

/// Rebuilds the holds from the events. A hold without an end believed until the harness
/// killed its process, if it did; otherwise (a `dlock run` command stopped on loss) until
/// its last sign of life, a write or the start of a step.
///
/// A `dlock run` hold (client `.../cli-...`) frozen by a pause is cut at the pause's start
/// (or, when renewals were failing before it, at when they began to fail) plus half the
/// lease. Its command cannot know when `dlock run`'s deadline is, and
/// `dlock run` is frozen too and keeps no record. Renewing every third of a lease, its
/// deadline lay about two thirds of a lease to a lease after the pause's start. Half a
/// lease leaves a sixth for a renewal running late on a loaded machine; a renewal later
/// than that could make the cut report an overlap that was not there (then the report
/// names the holds, to be judged). It can miss an overlap in the rest of the window, which
/// the library clients check exactly with their own recorded deadlines.
pub fn holds(events: &[Event], faults: &Faults, ttl_ns: u64) -> Vec<Hold> {
    let mut holds: HashMap<(String, u64), (Hold, u32, bool)> = HashMap::new();
    for event in events {
        match event {
            Event::Begin {
                client,
                hold,
                at,
                fence,
                pid,
            } => {
                let entry = holds.entry((client.clone(), *hold)).or_insert_with(|| {
                    (
                        Hold {
                            client: client.clone(),
                            start: *at,
                            end: *at,
                            fence: *fence,
                            lost: false,
                            writes: Vec::new(),
                            command_stopped: false,
                            last_sign: 0,
                        },
                        *pid,
                        false,
                    )
                });
                entry.0.start = *at;
                entry.0.fence = *fence;
                entry.1 = *pid;
            }
            Event::Write {
                client,
                hold,
                at,
                accepted,
                ..
            } => {
                if let Some(entry) = holds.get_mut(&(client.clone(), *hold)) {
                    entry.0.writes.push((*at, *accepted));
                }
            }
            Event::End {
                client,
                hold,
                at,
                lost,
            } => {
                if let Some(entry) = holds.get_mut(&(client.clone(), *hold)) {
                    entry.0.end = *at;
                    entry.0.lost = *lost;
                    entry.2 = true;
                }
            }
            Event::Step {
                client, hold, at, ..
            } => {
                if let Some(entry) = holds.get_mut(&(client.clone(), *hold)) {
                    entry.0.last_sign = entry.0.last_sign.max(*at);
                }
            }
            Event::Increment { .. }
            | Event::GuardedIncrement { .. }
            | Event::GuardedRefused { .. }
            | Event::Attempt { .. }
            | Event::Nested { .. } => {}
        }
    }
    holds
        .into_values()
        .map(|(mut hold, pid, ended)| {
            if !ended {
                let last_write = hold.writes.iter().map(|w| w.0).max().unwrap_or(0);
                hold.end = hold.start.max(last_write).max(hold.last_sign);
                let killed = faults
                    .kills
                    .iter()
                    .find(|k| k.pids.contains(&pid) && k.at >= hold.start);
                match killed {
                    Some(kill) => hold.end = hold.end.max(kill.at),
                    None => hold.command_stopped = hold.client.contains("/cli-"),
                }
            }
            if hold.client.contains("/cli-") {
                for pause in &faults.pauses {
                    if pause.pids.contains(&pid)
                        && pause.from >= hold.start
                        && pause.from < hold.end
                    {
                        // Renewals that failed before the freeze moved the deadline up
                        // to the last one that succeeded: cut from there.
                        let renewed_until = pause
                            .renewals_failing_from
                            .map_or(pause.from, |failing| failing.min(pause.from))
                            .max(hold.start);
                        hold.end = hold.end.min(renewed_until + ttl_ns / 2);
                    }
                }
            }
            hold
        })
        .collect()
}

/// What one primitive's holds show against its oracle (`limit` holders at once).
/// `lock_holds` are the holds of every kind on the same lock (the read and the write side
/// of a read-write lock): a killed holder's lock is free again at the next of them.
pub fn check(
    primitive: Primitive,
    holds: &[Hold],
    lock_holds: &[Hold],
    increments: u64,
    final_counter: u64,
    kills: &[Kill],
) -> Findings {
    let mut findings = Findings {
        acquisitions: holds.len() as u64,
        lost_signals: holds.iter().filter(|h| h.lost).count() as u64,
        commands_stopped: holds.iter().filter(|h| h.command_stopped).count() as u64,
        ..Findings::default()
    };
    // Holds with an empty belief (granted, but the reply came after the deadline) made no
    // claim to the lock.
    let mut believed: Vec<&Hold> = holds.iter().filter(|h| h.end > h.start).collect();
    believed.sort_by_key(|h| h.start);

    // Overlaps: a sweep over starts and ends (an end at the very instant of a start
    // frees first).
    let mut edges: Vec<(u64, i32, usize)> = believed
        .iter()
        .enumerate()
        .flat_map(|(index, h)| [(h.start, 1, index), (h.end, -1, index)])
        .collect();
    edges.sort_by_key(|&(at, delta, _)| (at, delta));
    let mut holding: Vec<usize> = Vec::new();
    for (_, delta, index) in edges {
        if delta < 0 {
            holding.retain(|&i| i != index);
            continue;
        }
        holding.push(index);
        if holding.len() > primitive.limit() {
            findings.overlaps += 1;
            if findings.overlapping.len() < 8 {
                let describe =
                    |h: &Hold| format!("{} [{}, {}] fence {}", h.client, h.start, h.end, h.fence);
                let all: Vec<String> = holding.iter().map(|&i| describe(believed[i])).collect();
                findings.overlapping.push(all.join(" / "));
            }
        }
    }

    if primitive.exclusive() {
        let mut highest = None;
        for hold in &believed {
            if highest.is_some_and(|h| hold.fence <= h) {
                findings.fence_regressions += 1;
            }
            highest = highest.max(Some(hold.fence));
        }
        findings.stale_rejected = holds
            .iter()
            .flat_map(|h| &h.writes)
            .filter(|w| !w.1)
            .count() as u64;
        findings.lost_updates = increments.saturating_sub(final_counter);
        // The window fencing must cover: a write after another hold began.
        let starts: Vec<(u64, &str)> = believed
            .iter()
            .map(|h| (h.start, h.client.as_str()))
            .collect();
        for hold in holds {
            for &(at, _) in &hold.writes {
                let handed_over = starts
                    .iter()
                    .filter(|&&(start, client)| {
                        start > hold.start
                            && start < at
                            && (client != hold.client || start > hold.end)
                    })
                    .map(|&(start, _)| start)
                    .min();
                if let Some(start) = handed_over {
                    findings.late_write_ms = findings.late_write_ms.max((at - start) as f64 / 1e6);
                }
            }
        }
    }

    let mut starts: Vec<u64> = lock_holds.iter().map(|h| h.start).collect();
    starts.sort_unstable();
    for kill in kills.iter().filter(|k| k.primitive == primitive) {
        // No later grant at all counts as never freed.
        let gap = match starts.iter().find(|&&s| s > kill.at) {
            Some(next) => (next - kill.at) as f64 / 1e6,
            None => f64::INFINITY,
        };
        findings.max_free_ms = Some(findings.max_free_ms.unwrap_or(0.0).max(gap));
    }
    findings
}

/// Readers beside a writer, over the believed holds of both sides of one read-write lock:
/// any number of readers may hold together, a writer only alone. Returns how many holds
/// began beside a hold of the other side, and the first few (a second writer is the write
/// side's own overlap, which [`check`] counts).
pub fn rwlock_overlaps(reads: &[Hold], writes: &[Hold]) -> (u64, Vec<String>) {
    let sides = reads
        .iter()
        .map(|h| (h, false))
        .chain(writes.iter().map(|h| (h, true)))
        .filter(|(h, _)| h.end > h.start);
    // Starts and ends in time order (an end at the very instant of a start frees first).
    let mut edges: Vec<(u64, i32, &Hold, bool)> = sides
        .flat_map(|(h, writer)| [(h.start, 1, h, writer), (h.end, -1, h, writer)])
        .collect();
    edges.sort_by_key(|&(at, delta, _, _)| (at, delta));
    let (mut readers, mut writers) = (Vec::<&Hold>::new(), Vec::<&Hold>::new());
    let (mut count, mut described) = (0, Vec::new());
    for (_, delta, hold, writer) in edges {
        let side = if writer { &mut writers } else { &mut readers };
        if delta < 0 {
            side.retain(|h| !std::ptr::eq(*h, hold));
            continue;
        }
        side.push(hold);
        // Two writers alone are the write side's own overlap, counted by `check`.
        if !writers.is_empty() && !readers.is_empty() {
            count += 1;
            if described.len() < 8 {
                let describe = |h: &&Hold| format!("{} [{}, {}]", h.client, h.start, h.end);
                let all: Vec<String> = writers.iter().chain(&readers).map(describe).collect();
                described.push(all.join(" / "));
            }
        }
    }
    (count, described)
}

/// One library client's call to take the lock (from [`Event::Attempt`]).
#[derive(Debug, Clone)]
pub struct Attempt {
    pub client: String,
    pub from: u64,
    pub to: u64,
    pub granted: bool,
}

/// Every recorded attempt.
pub fn attempts(events: &[Event]) -> Vec<Attempt> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Attempt {
                client,
                from,
                to,
                granted,
            } => Some(Attempt {
                client: client.clone(),
                from: *from,
                to: *to,
                granted: *granted,
            }),
            _ => None,
        })
        .collect()
}

/// Whether writers were starved by readers: the read grants that passed a waiting writer
/// (asked `margin_ns` or more after the writer began to wait, granted before the writer
/// was granted or gave up: by then the writer's place in the queue was surely there, and
/// a reader must wait behind it), the writer attempts that gave up, and the longest wait
/// of a granted writer (ms).
pub fn writer_starvation(
    writes: &[Attempt],
    reads: &[Attempt],
    margin_ns: u64,
) -> (u64, u64, Option<f64>) {
    let passing = reads
        .iter()
        .filter(|read| read.granted)
        .filter(|read| {
            writes
                .iter()
                .any(|write| read.from >= write.from + margin_ns && read.to < write.to)
        })
        .count() as u64;
    let given_up = writes.iter().filter(|w| !w.granted).count() as u64;
    let longest = writes
        .iter()
        .filter(|w| w.granted)
        .map(|w| (w.to - w.from) as f64 / 1e6)
        .reduce(f64::max);
    (passing, given_up, longest)
}

/// A reentrant mutex's inner holds: how many, how many had another fence than their outer
/// hold (or were refused), how many releases freed the outer hold, and how many were
/// confirmed to have kept it.
pub fn nested(events: &[Event]) -> (u64, u64, u64, u64) {
    let (mut count, mut mismatched, mut freed, mut kept) = (0, 0, 0, 0);
    for event in events {
        if let Event::Nested {
            same_fence,
            outer_kept,
            ..
        } = event
        {
            count += 1;
            mismatched += u64::from(!same_fence);
            freed += u64::from(*outer_kept == Some(false));
            kept += u64::from(*outer_kept == Some(true));
        }
    }
    (count, mismatched, freed, kept)
}

#[cfg(test)]
mod tests;
