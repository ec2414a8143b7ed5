//! `dlock bench`: every scenario with its baseline, and `--spawn`'s private server.

use std::process::{Command, Stdio};

use dlock_testkit::RedisServer;

use crate::common::{dlock, output};

#[test]
fn bench_reports_every_scenario_with_its_baseline() {
    let server = RedisServer::start();
    let out = output(dlock(&server).args([
        "bench",
        "--duration",
        "300ms",
        "--renew-locks",
        "300",
        // A small capacity run (its full run holds 100,000 locks at a 30s lease).
        "--capacity-locks",
        "1000",
        "--capacity-ttl",
        "3s",
        "--json",
    ]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One JSON object per scenario: scenario, value, unit, baseline, ratio, own fields.
    let report: std::collections::HashMap<String, serde_json::Value> =
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let row: serde_json::Value = serde_json::from_str(line).unwrap();
                (row["scenario"].as_str().unwrap().to_string(), row)
            })
            .collect();
    for scenario in ["seq", "par", "rwlock_read"] {
        assert!(report[scenario]["value"].as_f64().unwrap() > 0.0);
        assert!(report[scenario]["baseline"].as_f64().unwrap() > 0.0);
        assert!(report[scenario]["ratio"].as_f64().unwrap() > 0.0);
        assert_eq!(report[scenario]["unit"], "cycles/s");
    }
    // Every floored scenario carries its floor, measured in the same run on the same server.
    for (scenario, kind, of) in [
        ("par", "raw_pair", "value"),
        ("par_fenced", "fenced_grant", "value"),
        ("rwlock_read", "read_hold", "value"),
        ("handoff", "notification", "gap_p50_ms"),
        ("handoff_fair", "notification", "gap_p50_ms"),
        ("handoff_write", "notification", "gap_p50_ms"),
    ] {
        let row = &report[scenario];
        assert_eq!(row["floor_kind"], kind, "{row}");
        assert_eq!(row["floor_of"], of, "{row}");
        assert!(row["floor"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
        assert!(row["ratio_to_floor"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
    }
    // par's floor is its raw baseline itself; the hand-offs carry the raw PING and the
    // direct hand-off floor beside.
    assert_eq!(report["par"]["floor"], report["par"]["baseline"]);
    // par and par_fenced carry their floor with a release that wakes waiters too.
    for scenario in ["par", "par_fenced"] {
        let row = &report[scenario];
        for field in [
            "notifying_floor",
            "ratio_to_notifying_floor",
            "notifying_floor_server_us_per_cycle",
        ] {
            assert!(row[field].as_f64().unwrap_or(0.0) > 0.0, "{field}: {row}");
        }
    }
    for field in [
        "floor_ping_p50_ms",
        "floor_direct_handoff_p50_ms",
        "gap_to_direct_handoff",
    ] {
        for scenario in ["handoff", "handoff_fair", "handoff_write"] {
            let row = &report[scenario];
            assert!(row[field].as_f64().unwrap_or(0.0) > 0.0, "{field}: {row}");
        }
    }
    // A scenario without a floor says so rather than leaving the field out.
    assert!(report["seq"]["floor"].is_null() && report["seq"]["ratio_to_floor"].is_null());
    // The queued kinds' hand-offs and herds beside the mutex's.
    let semaphore = &report["handoff_semaphore"];
    assert_eq!(semaphore["permits"], 4, "{semaphore}");
    let busy = semaphore["busy_fraction"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 1.0, "semaphore busy fraction {busy}");
    assert_eq!(semaphore["per_worker"].as_array().unwrap().len(), 16);
    let busy = report["handoff_write"]["busy_fraction"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 1.0, "write lock busy fraction {busy}");
    for herd in ["herd_semaphore", "herd_write"] {
        assert_eq!(
            report[herd]["unit"], "commands/hand-off",
            "{}",
            report[herd]
        );
        assert!(
            report[herd]["value"].as_f64().unwrap() > 0.0,
            "{}",
            report[herd]
        );
    }
    let per_worker: Vec<u64> =
        serde_json::from_value(report["handoff_fair"]["per_worker"].clone()).unwrap();
    assert_eq!(per_worker.len(), 4);
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "every worker got the fair lock"
    );
    let busy = report["handoff"]["busy_fraction"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 1.0, "busy fraction {busy}");
    assert!(report["rwlock_writer"]["value"].as_f64().unwrap() > 0.0);
    let herd = report["herd"]["value"].as_f64().unwrap();
    let herd_fair = report["herd_fair"]["value"].as_f64().unwrap();
    // A release wakes one waiter of the client: a few commands per hand-off, not one
    // attempt per waiter.
    assert!(herd <= 10.0, "plain mutex: {herd} commands per hand-off");
    assert!(
        herd_fair <= 40.0,
        "fair mutex: {herd_fair} commands per hand-off"
    );
    assert!(
        report["renew"]["ratio"].as_f64().unwrap() < 0.5,
        "renewal is batched"
    );
    capacity_rows_measure_what_they_say(&report);
    // One server: no masters for redlock, and the run says so.
    assert!(!report.contains_key("redlock"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("redlock scenario") && stderr.contains("--spawn"),
        "{stderr}"
    );
}

/// The capacity scenario's rows in `report` (by scenario): bytes per held lock of each
/// kind, found over the lock's keys, and one process holding 1000 renewed locks.
fn capacity_rows_measure_what_they_say(
    report: &std::collections::HashMap<String, serde_json::Value>,
) {
    // Each kind held: its keys found and measured; a waiter that queues adds its queue's
    // keys; once all is given back, the fencing counter stays (but for a plain mutex,
    // which drew no fence).
    for (kind, queues) in [
        ("mutex", false),
        ("fair_mutex", true),
        ("reentrant", false),
        ("read", true),
        ("read_8", true),
        ("write", true),
        ("semaphore", true),
        ("weighted", true),
        ("multi", false),
    ] {
        let row = &report[&format!("memory_{kind}")];
        assert_eq!(row["unit"], "bytes/lock", "{row}");
        let bytes = row["value"].as_f64().unwrap();
        let keys = row["keys"].as_u64().unwrap();
        assert!(bytes > 0.0 && keys >= 1, "{row}");
        let (waiter_bytes, waiter_keys) = (
            row["waiter_bytes"].as_f64().unwrap(),
            row["waiter_keys"].as_u64().unwrap(),
        );
        if queues {
            assert_eq!(row["queued"], 1, "{row}");
            assert!(waiter_keys > keys && waiter_bytes > bytes, "{row}");
        } else {
            assert_eq!(row["queued"], 0, "{row}");
            assert_eq!(waiter_keys, keys, "{row}");
        }
        let left = row["left_keys"].as_u64().unwrap();
        assert_eq!(
            left,
            u64::from(kind != "mutex") * (1 + u64::from(kind == "multi")),
            "{row}"
        );
    }
    // More readers, more bytes in the same keys.
    let (one, eight) = (&report["memory_read"], &report["memory_read_8"]);
    assert_eq!(one["keys"], eight["keys"]);
    assert!(
        eight["value"].as_f64() > one["value"].as_f64(),
        "{one} {eight}"
    );
    // The multi-lock's two names each have their key and fence.
    assert_eq!(report["memory_multi"]["keys"], 4);

    let held = &report["capacity"];
    assert_eq!(held["locks"], 1000, "{held}");
    assert_eq!(held["ttl_ms"], 3000, "{held}");
    for positive in [
        "value",
        "acquire_s",
        "renewal_requests_per_s",
        "renewal_commands_per_lock",
        "renewal_server_us_per_lock",
        "redis_bytes_per_lock",
        "rss_before_mb",
        "rss_held_mb",
        "shutdown_s",
    ] {
        assert!(
            held[positive].as_f64().unwrap_or(0.0) > 0.0,
            "{positive}: {held}"
        );
    }
    // Client::shutdown gave every lock back: none of their keys is left.
    assert_eq!(held["keys_left"], 0, "{held}");
}

#[test]
fn bench_refuses_a_capacity_run_it_cannot_make() {
    let server = RedisServer::start();
    for (flag, value, says) in [
        (
            "--capacity-locks",
            "0",
            "--capacity-locks 0 is out of range",
        ),
        ("--capacity-locks", "1000001", "use 1 to 1000000"),
        ("--capacity-ttl", "500ms", "use 1s to 5m"),
        ("--capacity-ttl", "10m", "use 1s to 5m"),
    ] {
        let out = output(dlock(&server).args(["bench", "--quick", flag, value]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
    }
    // Refused before any work: nothing was written.
    assert_eq!(server.cmd::<i64>(&["DBSIZE"]), 0);
}

#[test]
#[cfg_attr(
    not(feature = "spawn"),
    ignore = "bench --spawn needs the `spawn` feature (scripts/test.sh turns it on)"
)]
fn bench_spawn_measures_a_private_server_of_its_own() {
    // --redis points nowhere: with --spawn the bench must not need it.
    let out = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .env("DLOCK_REDIS", "redis://127.0.0.1:1")
        .args([
            "bench",
            "--spawn",
            "--quick",
            "--renew-locks",
            "100",
            "--capacity-locks",
            "200",
            "--json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let scenarios: Vec<&str> = rows
        .iter()
        .map(|row| row["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        scenarios,
        [
            "seq",
            "hold_at_least",
            "skip_if_ran",
            "lock_delay",
            "multi",
            "par",
            "par_fenced",
            "handoff",
            "handoff_fair",
            "handoff_semaphore",
            "handoff_write",
            "herd",
            "herd_fair",
            "herd_semaphore",
            "herd_write",
            "rwlock_read",
            "rwlock_writer",
            "rwlock_read_scale",
            "semaphore_scale",
            "semaphore_weighted",
            "renew",
            "memory_mutex",
            "memory_fair_mutex",
            "memory_reentrant",
            "memory_read",
            "memory_read_8",
            "memory_write",
            "memory_semaphore",
            "memory_weighted",
            "memory_multi",
            "capacity",
            "redlock",
            "redlock_herd"
        ]
    );
    // The scale scenarios: the server's time per cycle at each number of holders.
    let scales = rows.iter().filter(|row| {
        (row["scenario"].as_str()).is_some_and(|scenario| scenario.ends_with("_scale"))
    });
    for scale in scales {
        for holders in ["8", "64", "1024"] {
            let us = scale["server_us_at"][holders].as_f64().unwrap_or(0.0);
            assert!(us > 0.0, "{holders} holders: {scale}");
        }
    }
    // multi: a two-name multi-lock against the two names taken as plain mutexes.
    let multi = rows.iter().find(|row| row["scenario"] == "multi").unwrap();
    assert!(multi["value"].as_f64().unwrap() > 0.0, "{multi}");
    assert!(multi["baseline"].as_f64().unwrap() > 0.0, "{multi}");
    // redlock: five private masters against the first alone, both measured.
    let redlock = &rows[rows.len() - 2];
    assert_eq!(redlock["masters"], 5, "{redlock}");
    assert!(redlock["value"].as_f64().unwrap() > 0.0, "{redlock}");
    assert!(redlock["baseline"].as_f64().unwrap() > 0.0, "{redlock}");
    // redlock_herd: hand-offs among 8 waiters over the same five masters.
    let herd = rows.last().unwrap();
    assert_eq!(herd["masters"], 5, "{herd}");
    assert!(
        herd["rounds_per_handoff"].as_f64().unwrap() >= 1.0,
        "{herd}"
    );
}

/// The floors' scripts, as the bench sends them: they must do what their floor claims, or
/// a ratio to them means nothing.
mod floor_scripts {
    use dlock_testkit::RedisServer;

    const FENCED_GRANT: &str = include_str!("../../src/cmd/bench/floor_fenced_grant.lua");
    const READ_HOLD: &str = include_str!("../../src/cmd/bench/floor_read_hold.lua");
    const READ_RELEASE: &str = include_str!("../../src/cmd/bench/floor_read_release.lua");
    const DIRECT_HANDOFF: &str = include_str!("../../src/cmd/bench/floor_direct_handoff.lua");
    const NOTIFYING_RELEASE: &str = include_str!("../../src/cmd/bench/floor_notifying_release.lua");

    /// A connection to listen on, that gives up after 5 s of silence.
    fn listener(server: &RedisServer) -> redis::Connection {
        let listener = server.connection();
        listener
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        listener
    }

    /// The server's clock in microseconds.
    fn server_clock_us(server: &RedisServer) -> i64 {
        let time: Vec<String> = server.cmd(&["TIME"]);
        time[0].parse::<i64>().unwrap() * 1_000_000 + time[1].parse::<i64>().unwrap()
    }

    #[test]
    fn the_fenced_grant_floor_grants_and_draws_a_clock_floor_fence() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let grant = redis::Script::new(FENCED_GRANT);
        let take = |conn: &mut redis::Connection, token: &str| -> i64 {
            grant
                .key("job")
                .key("{job}:fence")
                .arg(token)
                .arg(10_000)
                .invoke(conn)
                .unwrap()
        };

        // A grant holds the key for its lease and draws the server's clock as the fence.
        let before = server_clock_us(&server);
        let fence = take(&mut conn, "first");
        let after = server_clock_us(&server);
        assert!(
            (before..=after).contains(&fence),
            "{before} <= {fence} <= {after}"
        );
        assert_eq!(server.cmd::<String>(&["GET", "job"]), "first");
        let pttl: i64 = server.cmd(&["PTTL", "job"]);
        assert!(pttl > 0 && pttl <= 10_000, "pttl {pttl}");
        assert_eq!(server.cmd::<i64>(&["GET", "{job}:fence"]), fence);

        // Held: refused, and no fence drawn.
        assert_eq!(take(&mut conn, "second"), 0);
        assert_eq!(server.cmd::<String>(&["GET", "job"]), "first");
        assert_eq!(server.cmd::<i64>(&["GET", "{job}:fence"]), fence);

        // The next grant's fence is larger.
        let _: i64 = server.cmd(&["DEL", "job"]);
        let next = take(&mut conn, "second");
        assert!(next > fence, "{next} after {fence}");
        assert_eq!(server.cmd::<i64>(&["GET", "{job}:fence"]), next);

        // A counter ahead of the clock counts on (the clock is only a floor).
        let ahead = 8_000_000_000_000_000_i64;
        let _: () = server.cmd(&["SET", "{job}:fence", &ahead.to_string()]);
        let _: i64 = server.cmd(&["DEL", "job"]);
        assert_eq!(take(&mut conn, "third"), ahead + 1);
        assert_eq!(server.cmd::<i64>(&["GET", "{job}:fence"]), ahead + 1);
    }

    #[test]
    fn the_notifying_release_floor_deletes_only_its_own_hold_and_tells_the_channel() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let mut listener = listener(&server);
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe("{job}:released").unwrap();
        let script = redis::Script::new(NOTIFYING_RELEASE);
        let release = |conn: &mut redis::Connection, token: &str| -> i64 {
            script.key("{job}").arg(token).invoke(conn).unwrap()
        };
        let _: () = server.cmd(&["SET", "{job}", "mine", "PX", "10000"]);
        // Another token's release touches nothing and tells nobody.
        assert_eq!(release(&mut conn, "theirs"), 0);
        assert_eq!(server.cmd::<String>(&["GET", "{job}"]), "mine");
        // The holder's deletes the key, and its message is the next one heard.
        assert_eq!(release(&mut conn, "mine"), 1);
        assert_eq!(server.cmd::<i64>(&["EXISTS", "{job}"]), 0);
        let _: i64 = server.cmd(&["PUBLISH", "{job}:released", "control"]);
        let heard: Vec<String> = (0..2)
            .map(|_| pubsub.get_message().unwrap().get_payload().unwrap())
            .collect();
        assert_eq!(heard, ["one", "control"], "one message, from the release");
    }

    #[test]
    fn the_read_hold_floor_records_a_leased_hold_and_refuses_while_a_writer_holds() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let (hold, release) = (
            redis::Script::new(READ_HOLD),
            redis::Script::new(READ_RELEASE),
        );
        let read = |conn: &mut redis::Connection, token: &str| -> i64 {
            hold.key("doc").arg(token).arg(10_000).invoke(conn).unwrap()
        };
        let give_back = |conn: &mut redis::Connection, token: &str| -> i64 {
            release.key("doc").arg(token).invoke(conn).unwrap()
        };

        // Two readers at once, each hold recorded with the end of its lease.
        let before = server_clock_us(&server) / 1000;
        assert_eq!(read(&mut conn, "a"), 1);
        assert_eq!(read(&mut conn, "b"), 1);
        let after = server_clock_us(&server) / 1000;
        for token in ["a", "b"] {
            let ends: i64 = server.cmd(&["HGET", "doc", token]);
            assert!(
                (before + 10_000..=after + 10_000).contains(&ends),
                "{token} ends at {ends}, granted between {before} and {after}"
            );
        }
        let pttl: i64 = server.cmd(&["PTTL", "doc"]);
        assert!(
            pttl > 0 && pttl <= 10_000,
            "the holds' hash expires: pttl {pttl}"
        );

        // A release removes its own hold only; the last one takes the key with it.
        assert_eq!(give_back(&mut conn, "a"), 1);
        assert_eq!(give_back(&mut conn, "a"), 0);
        assert_eq!(server.cmd::<i64>(&["HEXISTS", "doc", "b"]), 1);
        assert_eq!(give_back(&mut conn, "b"), 1);
        assert_eq!(server.cmd::<i64>(&["EXISTS", "doc"]), 0);

        // A writer holds (a string at the key): refused, and the writer's hold untouched
        // by a read or a release.
        let _: () = server.cmd(&["SET", "doc", "writer", "PX", "10000"]);
        assert_eq!(read(&mut conn, "c"), 0);
        assert_eq!(give_back(&mut conn, "c"), 0);
        assert_eq!(server.cmd::<String>(&["GET", "doc"]), "writer");
    }

    #[test]
    fn the_direct_hand_off_floor_hands_a_fenced_lock_to_the_next_in_line_and_tells_it() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        let mut listener = listener(&server);
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe("waiters").unwrap();
        let script = redis::Script::new(DIRECT_HANDOFF);
        let hand_off = |conn: &mut redis::Connection, holder: &str| -> i64 {
            script
                .key("job")
                .key("{job}:fence")
                .key("{job}:queue")
                .arg(holder)
                .arg(10_000)
                .arg("waiters")
                .invoke(conn)
                .unwrap()
        };
        let _: () = server.cmd(&["SET", "job", "a", "PX", "10000"]);
        let _: i64 = server.cmd(&["RPUSH", "{job}:queue", "b"]);

        // The holder hands the lock on: the next in line holds it for its lease, with a
        // clock-floor fence, and is told so in one message.
        let before = server_clock_us(&server);
        let fence = hand_off(&mut conn, "a");
        let after = server_clock_us(&server);
        assert!(
            (before..=after).contains(&fence),
            "{before} <= {fence} <= {after}"
        );
        assert_eq!(server.cmd::<String>(&["GET", "job"]), "b");
        let pttl: i64 = server.cmd(&["PTTL", "job"]);
        assert!(pttl > 0 && pttl <= 10_000, "pttl {pttl}");
        assert_eq!(server.cmd::<i64>(&["LLEN", "{job}:queue"]), 0);
        let told: String = pubsub.get_message().unwrap().get_payload().unwrap();
        assert_eq!(told, format!("granted {fence} b"));

        // A release by someone who does not hold it changes nothing and tells nobody.
        assert_eq!(hand_off(&mut conn, "a"), 0);
        assert_eq!(server.cmd::<String>(&["GET", "job"]), "b");

        // The next hand-off's fence is larger; with nobody in line the lock is freed.
        let _: i64 = server.cmd(&["RPUSH", "{job}:queue", "a"]);
        let next = hand_off(&mut conn, "b");
        assert!(next > fence, "{next} after {fence}");
        let told: String = pubsub.get_message().unwrap().get_payload().unwrap();
        assert_eq!(told, format!("granted {next} a"));
        assert_eq!(hand_off(&mut conn, "a"), -1);
        assert_eq!(server.cmd::<i64>(&["EXISTS", "job"]), 0);
    }
}
