//! The judge's unit tests: what each lock kind and each fault must show, on made-up
//! records.

use std::path::PathBuf;

use super::*;
use crate::catalogue::SCENARIOS;
use crate::check::Outage;
use crate::fault::CLOCK_OFFSETS;

fn scenario(name: &str) -> &'static Scenario {
    SCENARIOS.iter().find(|s| s.name == name).unwrap()
}

fn redlock_config() -> Config {
    Config {
        rounds: 1,
        ttl: Duration::from_secs(1),
        dlock: PathBuf::new(),
        me: PathBuf::new(),
        primitives: vec![Primitive::Redlock],
        keep: false,
    }
}

/// The guarded counter's checks: an applied increment missing from the final value
/// is a problem in a safe scenario (and not when it is there), and client-pause must
/// see a late guarded write refused.
#[test]
fn guarded_increments_are_counted_against_the_final_value() {
    let config = Config {
        primitives: vec![Primitive::Mutex],
        ..redlock_config()
    };
    let client = "mutex/lib-async-0.1".to_string();
    let mut events = hold_of(&client, 1_000, 1);
    for value in [1, 2] {
        events.push(Event::GuardedIncrement {
            client: client.clone(),
            hold: 1,
            value,
        });
    }
    let problems = |name: &str, events: &[Event], counter: u64| {
        let guarded = HashMap::from([("mutex".to_string(), counter)]);
        judge(
            scenario(name),
            &config,
            events,
            &Faults::default(),
            &HashMap::new(),
            Some(&guarded),
        )
        .problems
    };
    let lost = |problems: Vec<String>| {
        problems
            .iter()
            .any(|p| p.contains("guarded increments were lost"))
    };
    assert!(lost(problems("server-pause", &events, 1)));
    assert!(!lost(problems("server-pause", &events, 2)));
    // A negative control may lose data: not its problem.
    assert!(!lost(problems("server-restart-nopersist", &events, 1)));
    // Two increments that wrote the same value lost one, whatever the final value.
    let mut repeated = events.clone();
    repeated.push(Event::GuardedIncrement {
        client: client.clone(),
        hold: 1,
        value: 2,
    });
    assert!(lost(problems("server-pause", &repeated, 3)));

    let refused =
        |problems: Vec<String>| problems.iter().any(|p| p.contains("no late guarded write"));
    assert!(refused(problems("client-pause", &events, 2)));
    events.push(Event::GuardedRefused { client, hold: 1 });
    assert!(!refused(problems("client-pause", &events, 2)));
}

fn one_hold(at: u64) -> Vec<Event> {
    hold_of("redlock/lib-async-0.1", at, 1)
}

fn hold_of(client: &str, at: u64, fence: u64) -> Vec<Event> {
    let client = client.to_string();
    vec![
        Event::Begin {
            client: client.clone(),
            hold: 1,
            at,
            fence,
            pid: 7,
        },
        Event::End {
            client,
            hold: 1,
            at: at + 100,
            lost: false,
        },
    ]
}

fn attempt(client: &str, from: u64, to: u64, granted: bool) -> Event {
    Event::Attempt {
        client: client.to_string(),
        from,
        to,
        granted,
    }
}

fn rwlock_config() -> Config {
    Config {
        primitives: vec![Primitive::Write, Primitive::Read],
        ..redlock_config()
    }
}

/// The read-write lock's judge: a reader beside a writer is an overlap, a reader that
/// asked a lease after a waiting writer and got in first is starvation, and a run in
/// which no writer ever waited for readers proved nothing about starvation.
#[test]
fn the_rwlock_judge_sees_readers_beside_a_writer_and_starved_writers() {
    let ttl_ns = 1_000_000_000;
    let judged = |events: &[Event]| {
        judge(
            scenario("rwlock-readers"),
            &rwlock_config(),
            events,
            &Faults::default(),
            &HashMap::new(),
            None,
        )
    };
    // Two readers together, then the writer that waited for them.
    let mut good = hold_of("read/lib-async-0.1", 1_000, 5);
    good.extend(hold_of("read/cli-0.1", 1_050, 6));
    good.push(attempt("write/lib-async-0.1", 1_010, 1_200, true));
    good.extend(hold_of("write/lib-async-0.1", 1_200, 7));
    good.extend(hold_of("write/cli-0.1", 1_400, 8));
    good.extend(hold_of("read/lib-blocking-0.1", 1_600, 9));
    let outcome = judged(&good);
    let findings = outcome.findings.as_ref().unwrap();
    assert_eq!(findings.overlaps, 0, "{:?}", findings.overlapping);
    assert!(
        !outcome.problems.iter().any(|p| p.contains("starv")),
        "{:?}",
        outcome.problems
    );
    // A reader inside the writer's hold.
    let mut beside = good.clone();
    beside.extend(hold_of("read/cli-1.1", 1_250, 10));
    assert_eq!(judged(&beside).findings.unwrap().overlaps, 1);
    // A reader that asked a lease after the writer began to wait, granted first.
    let mut starved = good.clone();
    starved.push(attempt(
        "write/lib-async-0.2",
        2_000,
        2_000 + 3 * ttl_ns,
        false,
    ));
    starved.push(attempt(
        "read/lib-async-0.2",
        2_000 + ttl_ns,
        2_000 + ttl_ns + 5,
        true,
    ));
    let outcome = judged(&starved);
    assert_eq!(outcome.findings.unwrap().readers_passing_a_writer, 1);
    assert!(outcome
        .problems
        .iter()
        .any(|p| p.contains("writers starved")));
    // No writer ever waited while readers held.
    let mut idle = hold_of("read/lib-async-0.1", 1_000, 5);
    idle.push(attempt("write/lib-async-0.1", 1_200, 1_210, true));
    idle.extend(hold_of("write/lib-async-0.1", 1_210, 7));
    assert!(judged(&idle)
        .problems
        .iter()
        .any(|p| p.contains("no writer ever waited for readers")));
}

/// The reentrant judge: inner holds must be there, share the outer fence and leave
/// the outer hold in place when given back.
#[test]
fn the_reentrant_judge_needs_nesting_that_keeps_the_outer_hold() {
    let config = Config {
        primitives: vec![Primitive::Reentrant],
        ..redlock_config()
    };
    let problems = |nested: &[(bool, Option<bool>)]| {
        let mut events = hold_of("reentrant/lib-async-0.1", 1_000, 5);
        events.extend(hold_of("reentrant/lib-blocking-0.1", 2_000, 6));
        for &(same_fence, outer_kept) in nested {
            events.push(Event::Nested {
                client: "reentrant/lib-async-0.1".into(),
                hold: 1,
                same_fence,
                outer_kept,
            });
        }
        let outcome = judge(
            scenario("reentrant"),
            &config,
            &events,
            &Faults::default(),
            &HashMap::new(),
            None,
        );
        outcome
            .problems
            .into_iter()
            .filter(|p| p.contains("inner") || p.contains("re-entered"))
            .count()
    };
    assert_eq!(problems(&[(true, Some(true)), (true, None)]), 0);
    assert_eq!(problems(&[]), 1);
    assert_eq!(problems(&[(false, Some(true))]), 1);
    assert_eq!(problems(&[(true, Some(false)), (true, Some(true))]), 1);
    // Nothing confirmed: the outer hold was never seen kept.
    assert_eq!(problems(&[(true, None)]), 1);
}

/// The clock jump must show the contender's fence above the holder's besides its
/// double grant, and no fence going back (the jumped clock's fence is raised on a
/// majority, which grants without that master meet); elsewhere too a fence going back
/// is a problem.
#[test]
fn the_clock_jump_needs_the_contenders_fence_above_and_none_going_back() {
    let config = Config {
        primitives: vec![Primitive::Redlock],
        ..redlock_config()
    };
    let judged = |name: &str, fences: [u64; 3]| {
        let mut events = hold_of("redlock/lib-blocking-0.1", 1_000, fences[0]);
        // The contender, inside the holder's belief.
        events.extend(hold_of("redlock/lib-async-1.1", 1_050, fences[1]));
        events.extend(hold_of("redlock/lib-blocking-0.2", 2_000, fences[2]));
        judge(
            scenario(name),
            &config,
            &events,
            &Faults::default(),
            &HashMap::new(),
            None,
        )
        .problems
    };
    assert_eq!(
        judged("redlock-clock-jump", [1, 9, 10]),
        Vec::<String>::new()
    );
    assert_eq!(
        judged("redlock-clock-jump", [1, 9, 5]),
        vec!["1 fences went backwards"]
    );
    // The contender's fence below the holder's: the floor did not order them.
    assert!(judged("redlock-clock-jump", [9, 5, 10])
        .iter()
        .any(|p| p.contains("with a fence not above its own")));
    assert!(judged("redlock-restart-nopersist", [1, 9, 5])
        .iter()
        .any(|p| p.contains("fences went backwards")));
}

/// The clock offset must show grants while the master a second ahead was held out;
/// its safe twin no fence going back, its negative control (no raise) some, and
/// neither a double grant.
#[test]
fn the_clock_offset_needs_varied_majorities_and_its_control_a_fence_going_back() {
    let fastest_out = Faults {
        outages: vec![Outage {
            port: 1,
            how: CLOCK_OFFSETS[0].excluded,
            from: 5_000,
            to: 9_000,
        }],
        ..Faults::default()
    };
    let judged = |name: &str, faults: &Faults, holds: [(u64, u64); 2]| {
        let mut events = hold_of("redlock/lib-async-0.1", holds[0].0, holds[0].1);
        events.extend(hold_of("redlock/lib-blocking-0.1", holds[1].0, holds[1].1));
        judge(
            scenario(name),
            &redlock_config(),
            &events,
            faults,
            &HashMap::new(),
            None,
        )
        .problems
    };
    let (safe, control) = ("redlock-clock-offset", "redlock-clock-offset-no-raise");
    let rising = [(6_000, 2), (10_000, 3)];
    let back = [(6_000, 3), (10_000, 2)];
    assert_eq!(judged(safe, &fastest_out, rising), Vec::<String>::new());
    assert_eq!(
        judged(safe, &fastest_out, back),
        vec!["1 fences went backwards"]
    );
    assert_eq!(judged(control, &fastest_out, back), Vec::<String>::new());
    assert_eq!(
        judged(control, &fastest_out, rising),
        vec!["no fence went back without the raise: the fence check would be blind"]
    );
    // Overlapping holds are a finding in the control too.
    assert_eq!(
        judged(control, &fastest_out, [(6_000, 3), (6_050, 2)]),
        vec!["1 overlapping holds"]
    );
    // No grant while A was out: the majorities did not leave it out.
    let late = [(10_000, 2), (12_000, 3)];
    for name in [safe, control] {
        assert!(judged(name, &fastest_out, late)[0].contains("majorities did not vary"));
    }
}

/// A Redlock restart run has async and blocking library clients, each of which must
/// hold the lock; it is not failed for `dlock run` clients it does not have. The
/// grants are counted per kind of client.
#[test]
fn a_redlock_run_asks_for_its_own_client_kinds() {
    let judged = |events: &[Event]| {
        judge(
            scenario("redlock-restart-durable"),
            &redlock_config(),
            events,
            &Faults::default(),
            &HashMap::new(),
            None,
        )
    };
    let mut both = one_hold(1_000);
    both.extend(hold_of("redlock/lib-blocking-0.1", 3_000, 2));
    let outcome = judged(&both);
    assert_eq!(outcome.problems, Vec::<String>::new());
    let counts: Vec<_> = outcome.acquisitions_by_client.into_iter().collect();
    assert_eq!(counts, vec![("async", 1), ("blocking", 1), ("cli", 0)]);
    assert_eq!(
        judged(&one_hold(1_000)).problems,
        vec!["no lib-blocking client ever held any lock".to_string()]
    );
}

/// Minority down proves something only if the lock was held while the minority was
/// out.
#[test]
fn minority_down_needs_a_hold_during_an_outage() {
    let faults = Faults {
        outages: vec![Outage {
            port: 1,
            how: "test",
            from: 5_000,
            to: 9_000,
        }],
        ..Faults::default()
    };
    // Both client kinds held the lock; the `dlock run` client away from the outage.
    let judged = |at| {
        let mut events = one_hold(at);
        events.extend(hold_of("redlock/cli-0.1", 20_000, 2));
        events.extend(hold_of("redlock/lib-blocking-0.1", 30_000, 3));
        judge(
            scenario("redlock-minority-down"),
            &redlock_config(),
            &events,
            &faults,
            &HashMap::new(),
            None,
        )
        .problems
    };
    assert_eq!(judged(6_000), Vec::<String>::new());
    // Begun before the outage, held into it.
    assert_eq!(judged(4_950), Vec::<String>::new());
    assert_eq!(judged(1_000).len(), 1);
}

/// A negative control must show its double grant, and no fence may go backwards in
/// it: the clock floor keeps fences growing where the lock itself was forgotten.
#[test]
fn a_negative_control_needs_its_overlap_and_no_fence_going_back() {
    let judged = |second_fence, second_at| {
        let mut events = one_hold(1_000);
        events.extend(hold_of("redlock/lib-blocking-0.1", second_at, second_fence));
        judge(
            scenario("redlock-restart-nopersist"),
            &redlock_config(),
            &events,
            &Faults::default(),
            &HashMap::new(),
            None,
        )
        .problems
    };
    // Overlapping, fences growing: what the scenario expects.
    assert_eq!(judged(2, 1_050), Vec::<String>::new());
    // Overlapping, a fence going back: flagged.
    assert_eq!(
        judged(0, 1_050),
        vec!["1 fences went backwards".to_string()]
    );
    // No overlap: the overlap check would be blind.
    assert!(judged(2, 5_000)[0].contains("double grant was not seen"));
}

const SECOND: u64 = 1_000_000_000;

/// A partition scenario's run on the plain mutex: one partition from 10 s to 18 s
/// (a 1 s lease), and `cut_off` (start, end, fence) holds of its cut-off client added
/// to `others` holds of the clients that reach the deployment through the sentinels.
fn partition_judged(
    name: &str,
    cut_off: &[(u64, u64, u64)],
    others: &[(&str, u64, u64, u64)],
) -> Vec<String> {
    let config = Config {
        primitives: vec![Primitive::Mutex],
        ..redlock_config()
    };
    let faults = Faults {
        outages: vec![Outage {
            port: 1,
            how: "test",
            from: 10 * SECOND,
            to: 18 * SECOND,
        }],
        ..Faults::default()
    };
    let mut events = Vec::new();
    let mut add = |client: &str, hold: u64, (start, end, fence): (u64, u64, u64)| {
        events.push(Event::Begin {
            client: client.to_string(),
            hold,
            at: start,
            fence,
            pid: 7,
        });
        events.push(Event::End {
            client: client.to_string(),
            hold,
            at: end,
            lost: false,
        });
    };
    // Every kind of client held the lock once before the partition.
    add("mutex/lib-async-0.1", 1, (SECOND, 2 * SECOND, 1));
    add("mutex/lib-blocking-0.1", 1, (3 * SECOND, 4 * SECOND, 2));
    add("mutex/cli-0.1", 1, (5 * SECOND, 6 * SECOND, 3));
    for (index, &hold) in cut_off.iter().enumerate() {
        add("mutex/partitioned-0.1", index as u64 + 1, hold);
    }
    for &(client, start, end, fence) in others {
        add(client, 2, (start, end, fence));
    }
    judge(
        scenario(name),
        &config,
        &events,
        &faults,
        &HashMap::new(),
        None,
    )
    .problems
}

/// With acknowledgement, a cut-off client that held the lock as it was cut off and
/// stopped believing within a lease passes.
#[test]
fn a_cut_off_belief_that_ends_within_a_lease_is_safe() {
    let problems = partition_judged(
        "sentinel-partition-ack",
        &[(9 * SECOND, 10 * SECOND + 900_000_000, 4)],
        &[("mutex/lib-async-0.1", 11 * SECOND, 12 * SECOND, 5)],
    );
    assert_eq!(problems, Vec::<String>::new());
}

/// The judge of a safe scenario fails it when two holds overlapped: the cut-off
/// client's and one granted by the promoted replica.
#[test]
fn an_overlap_fails_the_safe_partition_scenario() {
    let problems = partition_judged(
        "sentinel-partition-ack",
        &[(9 * SECOND, 10 * SECOND + 900_000_000, 4)],
        &[(
            "mutex/lib-async-0.1",
            10 * SECOND + 500_000_000,
            12 * SECOND,
            5,
        )],
    );
    assert_eq!(problems, vec!["1 overlapping holds".to_string()]);
}

/// A cut-off client that believed more than a lease past the cut fails the safe
/// scenario even when nobody else held the lock meanwhile (with one replica, cut off
/// too, the promoted replica grants nothing acknowledged until the old master rejoins).
#[test]
fn a_cut_off_belief_longer_than_a_lease_fails_the_safe_partition_scenario() {
    let problems = partition_judged(
        "sentinel-partition-ack",
        &[(9 * SECOND, 11 * SECOND + 200_000_000, 4)],
        &[],
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .contains("mutex/partitioned-0.1 believed its hold 1200 ms after it was cut off"),
        "{problems:?}"
    );
}

/// A safe run in which no cut-off client held a lock when the partition began proved
/// nothing about them.
#[test]
fn a_safe_partition_scenario_needs_a_cut_off_holder() {
    let problems = partition_judged(
        "sentinel-partition-ack",
        &[(7 * SECOND, 8 * SECOND, 4)],
        &[],
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("no cut-off client held a lock when it was cut off"),
        "{problems:?}"
    );
}

/// The negative control passes only when the old master granted the cut-off client
/// the lock after the cut, and the checker saw the double grant (fences from two
/// masters at once may go either way).
#[test]
fn the_negative_control_needs_a_grant_by_the_cut_off_master() {
    // Granted by the old master at 11 s (fence 4 from its counter) while the promoted
    // replica grants the lock with fence 4 from its own.
    let shown = partition_judged(
        "sentinel-partition",
        &[(11 * SECOND, 12 * SECOND, 4)],
        &[(
            "mutex/lib-async-0.1",
            11 * SECOND + 500_000_000,
            13 * SECOND,
            4,
        )],
    );
    assert_eq!(shown, Vec::<String>::new());
    // The cut-off client held only before the cut: whatever else happened, the hole
    // was not shown.
    let not_shown = partition_judged(
        "sentinel-partition",
        &[(8 * SECOND, 9 * SECOND, 4)],
        &[(
            "mutex/lib-async-0.1",
            8 * SECOND + 500_000_000,
            13 * SECOND,
            4,
        )],
    );
    assert_eq!(not_shown.len(), 1, "{not_shown:?}");
    assert!(
        not_shown[0].starts_with("the old master granted the cut-off clients nothing"),
        "{not_shown:?}"
    );
    // No overlap: the overlap check would be blind.
    let blind = partition_judged("sentinel-partition", &[(11 * SECOND, 12 * SECOND, 4)], &[]);
    assert_eq!(blind.len(), 1, "{blind:?}");
    assert!(blind[0].contains("double grant was not seen"), "{blind:?}");
}
