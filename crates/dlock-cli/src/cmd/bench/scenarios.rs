//! The scenarios of one deployment, in their order: everything but redlock.

use super::*;

/// Every scenario but redlock, against one deployment: (throughput duration, renewed
/// locks, herd waiters, the capacity scenario's size).
pub(super) async fn one_deployment(
    client: &Client,
    target: &Target,
    (duration, renew_locks, herd_waiters, capacity): (Duration, usize, usize, Capacity),
    progress: &indicatif::ProgressBar,
) -> dlock::Result<Vec<Row>> {
    let raw = Raw::connect(target).await?;
    // Keys of the raw baseline carry the client's prefix too, so the bench runs as a user
    // limited to that prefix (the client adds it to dlock's own keys).
    let raw_prefix = format!("{}dlock-bench:{}:", client.prefix(), std::process::id());
    let prefix = format!("dlock-bench:{}:", std::process::id());
    let fixed = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::NoWait);
    let mut rows = Vec::new();
    let step = |what: &str| progress.set_message(what.to_string());

    // Raw and dlock run in alternating slices of the same run (see `interleaved`); the
    // server's time per cycle says where a throughput gap comes from: Redis runs on one
    // thread, so par is bound by it.
    step("seq");
    let seq = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(raw_cycles(&raw, &raw_prefix, 1, slice))),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(dlock_cycles(client, &prefix, 1, slice, fixed, false))),
            ),
        ],
    )
    .await?;
    rows.push(throughput_row("seq", &seq[1], &seq[0]));
    progress.inc(2);

    // What a scheduled job's options cost a hold: --hold-at-least gives it back by the
    // linger script instead of the release; --skip-if-ran-within adds a guarded read and
    // a guarded write; --lock-delay only lengthens what Redis keeps. Fresh names each cycle (a lingering hold keeps its name), against
    // the plain path on fresh names, interleaved.
    step("scheduled");
    let lingering = fixed.hold_at_least(Duration::from_secs(10));
    let delayed = fixed.lock_delay(Duration::from_secs(5));
    let sched = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "plain", slice, fixed, false,
                    ))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "least", slice, lingering, false,
                    ))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "skip", slice, fixed, true,
                    ))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "delay", slice, delayed, false,
                    ))
                }),
            ),
        ],
    )
    .await?;
    for (scenario, rate) in [
        ("hold_at_least", &sched[1]),
        ("skip_if_ran", &sched[2]),
        ("lock_delay", &sched[3]),
    ] {
        let mut row = Row::new(scenario, rate.per_second, "cycles/s").baseline(sched[0].per_second);
        row.baseline_name = "plain";
        rows.push(row.with("server_us_per_cycle", rate.server_us_per_cycle.into()));
    }
    // The lingering holds end by themselves; their names' keys go with the run's.
    remove_keys(&raw, &own_keys(client.prefix())).await?;
    progress.inc(1);

    // multi: one multi-lock over two names (one script takes both with their fences, one
    // gives both back) against the same two names taken one by one as plain mutexes (two
    // SET NX, two releases), interleaved.
    step("multi");
    let pairs = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(pair_cycles(client, &prefix, slice, fixed, false))),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(pair_cycles(client, &prefix, slice, fixed, true))),
            ),
        ],
    )
    .await?;
    let mut row = Row::new("multi", pairs[1].per_second, "cycles/s").baseline(pairs[0].per_second);
    row.baseline_name = "two_mutexes";
    rows.push(row.with("server_us_per_cycle", pairs[1].server_us_per_cycle.into()));
    progress.inc(1);

    // par_fenced: what a caller that reads every grant's fence pays, configured as the
    // docs advise (the fence drawn with the grant); the raw pair has no fence. Each beside
    // its floor (floors.rs), in the same slices: the raw pair for par, the fenced-grant
    // floor for par_fenced, the read-hold floor (one lock, a hold per task) for
    // rwlock_read.
    step("par, par_fenced, rwlock_read and their floors");
    // A cluster's releases announce by SPUBLISH (dlock's and the notifying floors').
    let sharded = matches!(target, Target::Cluster(_));
    // The notifying floors: par's (`SET NX PX`) and par_fenced's (the fenced-grant floor).
    let (raw_ref, raw_prefix_ref) = (&raw, raw_prefix.as_str());
    let notifying = |fenced| -> Contender<'_> {
        Box::new(move |slice| {
            Box::pin(notifying_cycles(
                raw_ref,
                raw_prefix_ref,
                64,
                slice,
                fenced,
                sharded,
            ))
        })
    };
    let rw_name = format!("{prefix}rw-read");
    let read_floor_key = format!("{raw_prefix}rw-read-floor");
    let par = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(raw_cycles(&raw, &raw_prefix, 64, slice))),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(dlock_cycles(client, &prefix, 64, slice, fixed, false))),
            ),
            (
                // With the fence drawn at grant, the acquire is the grant script.
                SCRIPT_ONLY,
                Box::new(|slice| {
                    Box::pin(dlock_cycles(
                        client,
                        &prefix,
                        64,
                        slice,
                        fixed.fence_at_grant(),
                        true,
                    ))
                }),
            ),
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(rwlock_reads(client, &rw_name, 64, slice))),
            ),
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(fenced_grant_cycles(&raw, &raw_prefix, 64, slice))),
            ),
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(read_hold_cycles(&raw, &read_floor_key, 64, slice))),
            ),
            (SET_AND_SCRIPT, notifying(false)),
            (SCRIPT_ONLY, notifying(true)),
        ],
    )
    .await?;
    let rate_floor = |kind, rate: &Rate| {
        Some(Floor {
            kind,
            value: rate.per_second,
            of: None,
        })
    };
    // Beside each floor, the same floor with a release that wakes waiters (one message
    // on the lock's channel), as dlock's releases do: what is left between the two rows
    // is the notification.
    let notifying = |row: Row, dlock: &Rate, floor: &Rate| {
        row.with("notifying_floor", floor.per_second.into())
            .with(
                "ratio_to_notifying_floor",
                (dlock.per_second / floor.per_second.max(f64::MIN_POSITIVE)).into(),
            )
            .with(
                "notifying_floor_server_us_per_cycle",
                floor.server_us_per_cycle.into(),
            )
    };
    rows.push(notifying(
        throughput_row("par", &par[1], &par[0]).floor(rate_floor("raw_pair", &par[0])),
        &par[1],
        &par[6],
    ));
    rows.push(notifying(
        Row::new("par_fenced", par[2].per_second, "cycles/s")
            .baseline(par[0].per_second)
            .floor(rate_floor("fenced_grant", &par[4]))
            .with("server_us_per_cycle", par[2].server_us_per_cycle.into())
            .with("raw_server_us_per_cycle", par[0].server_us_per_cycle.into())
            .with(
                "floor_server_us_per_cycle",
                par[4].server_us_per_cycle.into(),
            ),
        &par[2],
        &par[7],
    ));
    let rwlock_read = Row::new("rwlock_read", par[3].per_second, "cycles/s")
        .baseline(par[0].per_second)
        .floor(rate_floor("read_hold", &par[5]))
        .with("server_us_per_cycle", par[3].server_us_per_cycle.into())
        .with(
            "floor_server_us_per_cycle",
            par[5].server_us_per_cycle.into(),
        );
    progress.inc(2);

    // The hand-off gaps' floor: how soon a raw subscriber hears a raw release's message;
    // and beside it, how soon the least script that hands a fenced lock on reaches the
    // next holder. Only on one server, whose URL a raw subscriber can open directly.
    step("notification and direct hand-off floors");
    let (notified, handed) = match target {
        Target::SingleNode(url) => {
            let note = |floor: &str, err: dlock::Error| {
                progress.suspend(|| eprintln!("dlock: note: the {floor} floor was left out: it could not be measured ({err})"));
            };
            let notified = notification(&raw, url, &format!("{raw_prefix}notify-floor"), duration)
                .await
                .map_err(|err| note("notification", err))
                .ok();
            let key = format!("{raw_prefix}{{handoff-floor}}");
            let handed = direct_handoff(&raw, url, &key, duration)
                .await
                .map_err(|err| note("direct hand-off", err))
                .ok();
            (notified, handed)
        }
        _ => (None, None),
    };
    progress.inc(1);
    let gap_floor = notified.as_ref().map(|floor| Floor {
        kind: "notification",
        value: floor.p50_ms,
        of: Some("gap_p50_ms"),
    });

    for (scenario, kind, workers) in [
        ("handoff", Queued::Plain, 4),
        ("handoff_fair", Queued::Fair, 4),
        ("handoff_semaphore", Queued::Semaphore(4), 16),
        ("handoff_write", Queued::Write, 4),
    ] {
        step(scenario);
        let name = format!("{prefix}{scenario}");
        let h = handoff(client, &name, kind, workers, duration).await?;
        let mut row = Row::new(scenario, h.rate, "acquisitions/s")
            .with("busy_fraction", h.busy_fraction.into());
        if kind.permits() > 1 {
            row = row
                .with("workers", workers.into())
                .with("permits", kind.permits().into());
        }
        if let Some((p50, p99)) = h.gap_ms {
            row = row
                .with("gap_p50_ms", p50.into())
                .with("gap_p99_ms", p99.into())
                .floor(gap_floor)
                // Null where not measured (a Cluster, Sentinel, an ACL refusing them), as
                // `floor` is. On the plain mutex's row the direct hand-off floor is only
                // for comparison: it hands nothing on.
                .with(
                    "floor_ping_p50_ms",
                    notified.as_ref().map(|f| f.ping_p50_ms).into(),
                )
                .with("floor_direct_handoff_p50_ms", handed.into())
                .with(
                    "gap_to_direct_handoff",
                    handed.map(|floor| p50 / floor).into(),
                );
        }
        rows.push(row.with("per_worker", h.per_worker.into()));
        progress.inc(1);
    }

    for (scenario, kind) in [
        ("herd", Queued::Plain),
        ("herd_fair", Queued::Fair),
        ("herd_semaphore", Queued::Semaphore(1)),
        ("herd_write", Queued::Write),
    ] {
        step(scenario);
        let per = herd(
            client,
            &raw,
            &format!("{prefix}{scenario}"),
            kind,
            herd_waiters,
        )
        .await?;
        rows.push(
            Row::new(scenario, per, "commands/hand-off").with("waiters", herd_waiters.into()),
        );
        progress.inc(1);
    }

    rows.push(rwlock_read);

    step("rwlock_writer");
    let w = rwlock_writer(client, &format!("{prefix}rw-write"), duration).await?;
    rows.push(
        Row::new("rwlock_writer", w.rate, "writes/s")
            .with("writer_wait_p50_ms", w.wait_p50_ms.into())
            .with("writer_wait_p99_ms", w.wait_p99_ms.into())
            .with("reads", w.reads.into()),
    );
    progress.inc(1);

    for kind in [Scale::Read, Scale::Permit] {
        step(kind.scenario());
        rows.push(scale(client, &raw, &format!("{prefix}scale:"), kind).await?);
        progress.inc(1);
    }

    step("semaphore_weighted");
    let sem = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(semaphore_cycles(client, &prefix, 1, slice))),
            ),
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(semaphore_cycles(client, &prefix, 4, slice))),
            ),
        ],
    )
    .await?;
    let mut weighted = Row::new("semaphore_weighted", sem[1].per_second, "cycles/s");
    weighted.baseline_name = "plain";
    rows.push(
        weighted
            .baseline(sem[0].per_second)
            .with("take", 4.into())
            .with("server_us_per_cycle", sem[1].server_us_per_cycle.into())
            .with(
                "plain_server_us_per_cycle",
                sem[0].server_us_per_cycle.into(),
            ),
    );
    progress.inc(1);

    step("renew");
    let (per_s, naive) = renew(client, &raw, &prefix, renew_locks).await?;
    rows.push(
        Row::new("renew", per_s, "script calls/s")
            .baseline(naive)
            .with("locks", renew_locks.into()),
    );
    progress.inc(1);

    // On a client with the library's defaults, as the capacity scenario's: no holder
    // label (the CLI's would lengthen every token).
    step("memory per held lock");
    let plain = target.connect(client.prefix()).await?;
    let memory = memory_rows(&plain, &raw, &format!("{prefix}memory:")).await;
    plain.shutdown().await;
    rows.extend(memory?);
    progress.inc(1);

    step(&format!("capacity: {} auto-renewed locks", capacity.locks));
    rows.push(
        held_many(
            target,
            client.prefix(),
            &raw,
            &format!("{prefix}capacity:"),
            capacity,
        )
        .await?,
    );
    progress.inc(1);
    // Fence counters never expire: leave nothing of the run behind on a shared server.
    remove_keys(&raw, &own_keys(client.prefix())).await?;
    Ok(rows)
}
