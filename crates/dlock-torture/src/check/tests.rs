//! The checker's unit tests: holds, overlaps, fences, kills and the read-write oracle.

use super::*;

fn hold(client: &str, start: u64, end: u64, fence: u64) -> Hold {
    Hold {
        client: client.into(),
        start,
        end,
        fence,
        lost: false,
        writes: Vec::new(),
        command_stopped: false,
        last_sign: 0,
    }
}

#[test]
fn back_to_back_holds_are_no_overlap() {
    let holds = [
        hold("a", 0, 10, 1),
        hold("b", 10, 20, 2),
        hold("a", 25, 30, 3),
    ];
    let found = check(Primitive::Mutex, &holds, &holds, 0, 0, &[]);
    assert_eq!(found.overlaps, 0);
    assert_eq!(found.fence_regressions, 0);
}

/// The negative control of the checker itself: a double grant is seen.
#[test]
fn a_double_grant_is_an_overlap() {
    let holds = [hold("a", 0, 10, 1), hold("b", 5, 20, 2)];
    let found = check(Primitive::Mutex, &holds, &holds, 0, 0, &[]);
    assert_eq!(found.overlaps, 1);
}

#[test]
fn three_permits_allow_three_but_not_four() {
    let three = [
        hold("a", 0, 10, 1),
        hold("b", 1, 10, 2),
        hold("c", 2, 10, 3),
    ];
    assert_eq!(
        check(Primitive::Sem3, &three, &three, 0, 0, &[]).overlaps,
        0
    );
    let four = [
        hold("a", 0, 10, 1),
        hold("b", 1, 10, 2),
        hold("c", 2, 10, 3),
        hold("d", 3, 4, 4),
    ];
    assert_eq!(check(Primitive::Sem3, &four, &four, 0, 0, &[]).overlaps, 1);
}

#[test]
fn a_fence_that_goes_back_is_a_regression() {
    let holds = [hold("a", 0, 10, 5), hold("b", 11, 20, 1)];
    let found = check(Primitive::Mutex, &holds, &holds, 0, 0, &[]);
    assert_eq!(found.fence_regressions, 1);
    assert_eq!(found.overlaps, 0);
}

#[test]
fn a_write_after_the_hand_over_is_measured_and_lost_updates_counted() {
    let mut stale = hold("a", 0, 10, 1);
    stale.writes.push((50_000_000, false));
    let holds = [stale, hold("b", 20_000_000, 60_000_000, 2)];
    let found = check(Primitive::Mutex, &holds, &holds, 5, 4, &[]);
    assert_eq!(found.overlaps, 0);
    assert_eq!(found.stale_rejected, 1);
    assert_eq!(found.lost_updates, 1);
    assert!((found.late_write_ms - 30.0).abs() < 1e-9);
}

#[test]
fn a_paused_cli_hold_believes_no_longer_than_its_lease() {
    let events = vec![
        Event::Begin {
            client: "mutex/cli-0".into(),
            hold: 1,
            at: 100,
            fence: 1,
            pid: 7,
        },
        Event::Write {
            client: "mutex/cli-0".into(),
            hold: 1,
            at: 5_000,
            fence: 1,
            accepted: false,
        },
    ];
    let faults = Faults {
        pauses: vec![Pause {
            pids: vec![6, 7],
            from: 200,
            renewals_failing_from: None,
        }],
        kills: vec![],
        outages: vec![],
    };
    let rebuilt = holds(&events, &faults, 1_000);
    assert_eq!(rebuilt[0].end, 700);
    // Unpaused, the same hold would have lasted until its last write.
    let unpaused = holds(&events, &Faults::default(), 1_000);
    assert_eq!(unpaused[0].end, 5_000);
    // Renewals that failed from 100 on (a failover's paused replica acknowledged none
    // of them) leave a deadline from the last one before: cut from there.
    let unrenewed = Faults {
        pauses: vec![Pause {
            renewals_failing_from: Some(100),
            ..faults.pauses[0].clone()
        }],
        ..Faults::default()
    };
    assert_eq!(holds(&events, &unrenewed, 1_000)[0].end, 600);
}

#[test]
fn a_killed_holder_frees_its_lock_by_the_next_grant() {
    let holds = [
        hold("a", 0, 10, 1),
        hold("b", 1_500_000_000, 1_600_000_000, 2),
    ];
    let kills = [Kill {
        primitive: Primitive::Mutex,
        at: 500_000_000,
        pids: vec![9],
    }];
    let found = check(Primitive::Mutex, &holds, &holds, 0, 0, &kills);
    assert_eq!(found.max_free_ms, Some(1_000.0));
}

mod more_tests {
    use super::super::*;
    use super::hold;

    /// A killed holder believed until its process died, not just until its last record.
    #[test]
    fn a_killed_hold_believes_until_the_kill() {
        let events = vec![
            Event::Begin {
                client: "sem3/lib-async-0.1".into(),
                hold: 1,
                at: 100,
                fence: 1,
                pid: 7,
            },
            Event::Step {
                client: "sem3/lib-async-0.1".into(),
                hold: 1,
                at: 150,
            },
        ];
        let killed = Faults {
            pauses: vec![],
            kills: vec![Kill {
                primitive: Primitive::Sem3,
                at: 900,
                pids: vec![7],
            }],
            outages: vec![],
        };
        assert_eq!(holds(&events, &killed, 1_000)[0].end, 900);
        // Not killed (a command stopped on loss): its last sign of life.
        assert_eq!(holds(&events, &Faults::default(), 1_000)[0].end, 150);
    }

    /// Readers share, a writer is alone: the read-write oracle over both sides.
    #[test]
    fn readers_share_but_none_beside_a_writer() {
        let reads = [hold("read/a", 0, 10, 1), hold("read/b", 5, 15, 2)];
        let writes = [hold("write/a", 15, 20, 3), hold("write/b", 20, 30, 4)];
        assert_eq!(rwlock_overlaps(&reads, &writes).0, 0);
        let late_reader = [hold("read/c", 25, 35, 5)];
        let (count, described) = rwlock_overlaps(&late_reader, &writes);
        assert_eq!(count, 1);
        assert!(described[0].contains("write/b") && described[0].contains("read/c"));
        // Counted once, by the write side's own check.
        let two_writers = [hold("write/a", 0, 10, 1), hold("write/b", 5, 15, 2)];
        assert_eq!(rwlock_overlaps(&[], &two_writers).0, 0);
        assert_eq!(
            check(Primitive::Write, &two_writers, &two_writers, 0, 0, &[]).overlaps,
            1
        );
    }

    /// A reader that came a lease after a waiting writer must not get in before it.
    #[test]
    fn a_reader_passing_a_waiting_writer_is_starvation() {
        let attempt = |client: &str, from, to, granted| Attempt {
            client: client.into(),
            from,
            to,
            granted,
        };
        let writer = [attempt("write/a", 100, 5_000, true)];
        // Asked before the margin: it may have come first.
        let early = [attempt("read/a", 500, 600, true)];
        assert_eq!(
            writer_starvation(&writer, &early, 1_000),
            (0, 0, Some(0.0049))
        );
        let late = [attempt("read/b", 1_200, 1_300, true)];
        assert_eq!(writer_starvation(&writer, &late, 1_000).0, 1);
        // Granted after the writer: fine; a refused reader passed nobody.
        let after = [
            attempt("read/c", 1_200, 5_100, true),
            attempt("read/d", 1_200, 1_300, false),
        ];
        assert_eq!(writer_starvation(&writer, &after, 1_000).0, 0);
        let gave_up = [attempt("write/b", 100, 200, false)];
        assert_eq!(writer_starvation(&gave_up, &[], 1_000), (0, 1, None));
    }
}
