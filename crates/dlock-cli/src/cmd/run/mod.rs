//! `dlock run NAME -- CMD`: hold a lock while a command (and everything it starts) runs.

use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use clap::Args;
use dlock::LostReason;

mod signals;

pub use signals::Forwarded;

use crate::hold::{self, KindArgs, Locks};
use crate::lease::{LeaseArgs, Replication};
use crate::tree::{self, Group};
use crate::{duration, exit};

/// The longest grace `--kill-after` gets by default.
const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Lock name
    pub name: String,
    /// Also hold NAME2 (repeat for more): one hold over every name, all of them or none
    /// (a multi-lock), DLOCK_FENCES set to every name's fence
    #[arg(long = "also", value_name = "NAME2")]
    pub also: Vec<String>,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// How long the command gets after SIGTERM before SIGKILL when it must stop
    /// [default: a quarter of --ttl, at most 10s; must fit in about half of --ttl]
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    pub kill_after: Option<Duration>,
    #[command(flatten)]
    pub kind: KindArgs,
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What a job started on every replica (by cron, a timer) needs to run once.
#[derive(Args, Debug, Clone, Default)]
pub struct ScheduleArgs {
    /// Keep the lock until DUR after it was granted even when CMD ends sooner (the help
    /// says the library's limit)
    #[arg(long, value_parser = duration::parse, value_name = "DUR", help = format!(
        "Keep the lock until DUR after it was granted even when CMD ends sooner, so a replica whose timer fires later finds it held (cron: longer than the replicas' timers drift apart; 1ms to {})",
        dlock::humane(dlock::MAX_TTL)
    ))]
    pub hold_at_least: Option<Duration>,
    /// Do not run CMD if it succeeded under this lock within DUR (the help says the
    /// library's limit)
    #[arg(long, value_parser = duration::parse, value_name = "DUR", help = format!(
        "Do not run CMD if it succeeded under this lock within DUR (by Redis's clock): exit as when busy (75, or -E N); after CMD exits 0, record its success for DUR (1ms to {}; e.g. 1d)",
        dlock::humane(dlock::MAX_SUCCESS_MEMORY)
    ))]
    pub skip_if_ran_within: Option<Duration>,
    /// Set from the global --quiet: a skip says nothing either.
    #[arg(skip)]
    pub quiet: bool,
}

impl ScheduleArgs {
    /// `options` with --hold-at-least, checked.
    pub fn options(&self, options: dlock::LockOptions) -> dlock::Result<dlock::LockOptions> {
        let options = match self.hold_at_least {
            Some(least) => options.hold_at_least(least),
            None => options,
        };
        options.validate().map_err(|err| match err {
            dlock::Error::InvalidArgument(_) if options.hold_at_least.is_some() => {
                dlock::Error::InvalidArgument(format!(
                    "--hold-at-least {} is out of range; use 1ms to {}",
                    dlock::humane(options.hold_at_least.unwrap_or_default()),
                    dlock::humane(dlock::MAX_TTL)
                ))
            }
            err => err,
        })?;
        if let Some(within) = self.skip_if_ran_within {
            if within.is_zero() || within > dlock::MAX_SUCCESS_MEMORY {
                return Err(dlock::Error::InvalidArgument(format!(
                    "--skip-if-ran-within {} is out of range; use 1ms to {}",
                    dlock::humane(within),
                    dlock::humane(dlock::MAX_SUCCESS_MEMORY)
                )));
            }
        }
        Ok(options)
    }
}

/// `run --help`'s epilogue: how it works, then the exit codes.
pub fn help() -> String {
    // The lease limits are the library's, never restated here.
    let how = RUN_HELP.replace("{TTL_RANGE}", &duration::ttl_range());
    format!("{how}\n\n{}", exit::HELP)
}

const RUN_HELP: &str = "\
HOW IT WORKS:
    dlock takes the lock (waiting forever unless --wait or --no-wait), then runs
    CMD in a process group of its own with these variables set:
        DLOCK_NAME    the lock name
        DLOCK_TOKEN   the hold's token
        DLOCK_FENCE   the fencing token of this grant: pass it to storage that
                      refuses writes with a smaller one than it has seen
        DLOCK_WEIGHT  with --permits N --take K: K, the permits this one hold
                      takes (granted in queue order when K are free, given back
                      together)
        DLOCK_FENCES  with --also: every name's fence, NAME=FENCE pairs
                      separated by spaces, in the order given (NAME first;
                      DLOCK_FENCE is its fence)
    While CMD runs, the lease (--ttl, {TTL_RANGE}, default 30s) is renewed every
    third of --ttl, so CMD may run far longer than --ttl. SIGINT, SIGTERM,
    SIGHUP and SIGQUIT sent to dlock are passed on to CMD's whole process group,
    once. When CMD exits, anything it left running in its group is killed (it
    would run without the lock), the lock is released, and dlock exits with
    CMD's exit code.

    If the lock is lost (a renewal finds it gone), or renewals keep failing,
    CMD's group gets SIGTERM and, --kill-after later, SIGKILL, and dlock exits
    70. When renewals fail, the SIGTERM is sent early enough that the SIGKILL
    lands before the lease could pass to another holder, but only once a renewal
    is overdue: so --kill-after must fit in about half of --ttl (dlock says how
    much when it does not), and a Redis that stalls for longer than about 2/3 of
    --ttl minus --kill-after stops the command. If dlock itself dies (even kill
    -9), CMD's whole group is killed. A signal while waiting for the lock gives
    back anything the wait may hold (a queue place, a grant racing the signal)
    and exits 128+N.

    Stops. A stop of CMD from outside (kill -STOP, a debugger, a freezer of CMD
    alone) keeps the lock: dlock goes on renewing, and exits with CMD's code
    when CMD is continued and ends. Ctrl-Z in a terminal suspends dlock with CMD
    (job control); on fg CMD goes on if the lease is still valid, and is killed
    (exit 70) if it ended. If dlock itself is stopped or frozen past the lease
    (by pid, by its group, or by name: killall -STOP dlock, pkill -STOP -f
    dlock), its watchdog kills CMD's group before the lease can pass on, so CMD
    never runs a step without the lock, whoever continues it; dlock exits 70
    when it is continued. The watchdog is a process in a group of its own named
    lock-watchdog: neither its name nor its command line says dlock. A stop of
    dlock and its watchdog together cannot be caught: both pids, by executable
    path (killall -STOP /usr/bin/dlock), or a freeze of everything at once. CMD
    then runs on without the lock while they are stopped (or, frozen with them,
    for a moment after the thaw): only fences (DLOCK_FENCE) and guarded writes
    protect data then.

    --lock-delay DUR: when dlock dies or is stopped past the lease (the cases
    above), the lock stays ungrantable DUR after the lease ends, so writes CMD
    had on their way land before the next holder starts; a clean end frees it at
    once. For storage that cannot check DLOCK_FENCE; it narrows the window a
    fence closes, no more.

    Several names at once: --also NAME2 (repeated for more, 2 to 64 names in
    all, each distinct) holds NAME and every NAME2 together, all or none, with
    one lease renewed at every name; the lock is lost when any name is. Two runs
    naming overlapping names in any order never wait for each other: on one
    server (or names in one Cluster slot) all names are taken by one script,
    across Cluster slots one slot at a time in one order, a busy slot giving
    back those taken before it. The waiter does not queue: a --fair waiter of
    one of the names may be served first. Each name is held the way a mutex,
    fair mutex or write lock holds it, so it excludes them all. Not with --read
    or --permits, with several --redis URLs (Redlock), or with
    --skip-if-ran-within.
    Transfers between two accounts:
        dlock run account-17 --also account-42 -- ./transfer.sh 17 42

    Jobs that cron starts on every replica: --hold-at-least DUR keeps the lock
    until DUR after the grant even when CMD ends sooner, whatever its exit code,
    also after a signal or a CMD that could not start (dlock exits at once; the
    lease is set to end then and the lock frees by itself; `dlock release NAME
    $DLOCK_TOKEN` ends it early), so a replica whose timer fires later finds it
    held and the job runs once. Use it with -n (or --skip-if-ran-within): a
    replica that waits for the lock runs the job again once the hold ends. If
    dlock dies, the lock frees when its lease (--ttl) ends. --skip-if-ran-within
    DUR does not run CMD when it succeeded under this lock within DUR by Redis's
    clock (exit 75, or -E N, as when busy; one line on stderr unless -q); when
    CMD exits 0 its success is recorded for DUR, only while the lock is still
    held; a skipped run also keeps the lock until --hold-at-least ends. Not with
    several --redis URLs.
    The recipe:
        dlock -q run nightly-report -n -E 0 --hold-at-least 10m -- ./report.sh

    With several --redis URLs (Redlock), the lock is granted when a majority of
    the masters grant it within its lease, and every renewal needs a majority
    too: a renewal that finds the lock gone from a majority is a lost lock, one
    that cannot reach a majority counts as a failed renewal. Fewer than a
    majority reachable when dlock starts (or still, when --wait or --no-wait
    ends the wait) is exit 69, and the message names the masters that failed.
    DLOCK_FENCE is the grant's fence, kept on a majority so that it grows from
    grant to grant.

    With --replicas N, the grant and every renewal wait until N replicas have
    them: a grant they do not acknowledge within --replica-timeout is given back
    (exit 69, CMD never starts), a renewal they do not acknowledge counts as a
    failed renewal.

    Exit codes of run: CMD's own code; 128+N when signal N ended it; 126 when
    CMD could not be executed, 127 when it was not found; 70 when the lock was
    lost; 75 (or -E N) when busy; the other codes below.";

/// What `dlock elect` adds to a run: the election whose lock it holds, and the value it
/// proclaims while the command runs.
pub struct Leading<'a> {
    pub election: &'a dlock::Election,
    pub value: &'a str,
}

/// Runs the command under the lock; `redis_at` says where Redis is, for the message of a
/// renewal that kept failing.
pub async fn run(
    locks: &Locks,
    args: RunArgs,
    replication: Option<Replication>,
    leading: Option<Leading<'_>>,
    redis_at: &str,
) -> dlock::Result<i32> {
    let kill_after = kill_after(&args)?;
    let mut signals = Forwarded::install().map_err(|e| {
        dlock::Error::InvalidArgument(format!("cannot install signal handlers: {e}"))
    })?;
    // The client's watchdog renews the lease every third of --ttl while the command runs.
    // With --replicas, every renewal waits for the replicas too.
    let options = args.lease.options(replication)?.renewed(args.lease.ttl);
    let options = args.schedule.options(options)?;
    let names: Vec<&str> = std::iter::once(args.name.as_str())
        .chain(args.also.iter().map(String::as_str))
        .collect();
    let guard = tokio::select! {
        hold = hold::take_all(locks, &args.kind, &names, options) => hold?,
        signal = signals.next() => {
            // Dropping the wait gives back what it may hold; the client's shutdown
            // (before exit) waits for that, unless a second stop says not to wait.
            // One line: the interruption was asked for, so there is nothing to fix.
            eprintln!("dlock: interrupted while waiting for {:?}; nothing is held", args.name);
            signals.exit_on_next(signal);
            exit::die_by(signal, false);
            return Ok(128 + signal);
        }
    };
    let (guard, fence) = hold::fenced(guard).await?;
    if let Some(within) = args.schedule.skip_if_ran_within {
        let last = match guard.last_success().await {
            Ok(last) => last,
            Err(err) => {
                let _ = guard.unlock().await;
                return Err(err);
            }
        };
        if let Some(success) = last.filter(|success| success.ago < within) {
            // Given back as any hold is (kept until --hold-at-least ends).
            let _ = guard.unlock().await;
            if !args.schedule.quiet {
                eprintln!(
                    "dlock: skipped: the command under {:?} succeeded {} ago, within --skip-if-ran-within {}",
                    args.name,
                    dlock::humane(success.ago),
                    dlock::humane(within)
                );
            }
            return Ok(args.lease.conflict_exit_code.map_or(exit::BUSY, i32::from));
        }
    }
    let mut env = vec![
        ("DLOCK_NAME", args.name.clone()),
        ("DLOCK_TOKEN", guard.token().to_string()),
        ("DLOCK_FENCE", fence.to_string()),
    ];
    if let Some(k) = args.kind.weight.take {
        env.push(("DLOCK_WEIGHT", k.to_string()));
    }
    if !args.also.is_empty() {
        // Drawn with the grant: no request.
        let fences = guard.fences().await?;
        let pairs: Vec<String> = (fences.iter())
            .map(|(name, fence)| format!("{name}={fence}"))
            .collect();
        env.push(("DLOCK_FENCES", pairs.join(" ")));
    }
    if let Some(leading) = &leading {
        // The term is the grant's fence; the record names this hold, so it counts only
        // while the hold does.
        match (leading.election)
            .proclaim_token(guard.token(), fence, leading.value)
            .await
        {
            Ok(()) => {}
            Err(dlock::Error::Lost { .. }) => {
                eprintln!("dlock: the leadership of {:?} was lost before the command started; it did not run\n  hint: check Redis availability, or use a longer --ttl", args.name);
                return Ok(exit::LOST);
            }
            Err(err) => {
                let _ = guard.unlock().await;
                return Err(err);
            }
        }
        env.push(("DLOCK_TERM", fence.to_string()));
    }
    // dlock stopped or starved since the grant (a SIGSTOP, a freeze) may wake past the
    // lease: the command must not start then; the watchdog and the command's own last
    // look before exec close the rest of the way (tree::spawn).
    let deadline = watchdog_deadline(guard.lost_signal().valid_until(), args.lease.ttl);
    let spawned = if Instant::now() >= deadline {
        Err(std::io::ErrorKind::TimedOut.into())
    } else {
        tree::spawn(&args.command, &env, deadline)
    };
    let (mut child, mut group) = match spawned {
        Ok(spawned) => spawned,
        Err(err) => {
            if let Some(leading) = &leading {
                let _ = leading.election.resign_token(guard.token()).await;
            }
            let _ = guard.unlock().await;
            if err.kind() == std::io::ErrorKind::TimedOut {
                eprintln!("dlock: the lock on {:?} may have passed to another holder before the command could start (dlock was stopped or starved past its lease); the command did not run\n  hint: run it again; if this repeats, use a longer --ttl", args.name);
                return Ok(exit::LOST);
            }
            let code = if err.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("dlock: cannot start {:?}: {err}\n  hint: check the command name and that it is executable", args.command[0]);
            return Ok(code);
        }
    };
    let outcome = supervise(&mut child, &group, &guard, &mut signals, &args, kill_after).await;
    if let Some(least) = args.schedule.hold_at_least {
        tracing::info!(
            lock = %args.name,
            "the lock stays held until {} after its grant (--hold-at-least); `dlock release` with DLOCK_TOKEN ends it early",
            dlock::humane(least)
        );
    }
    // Steps down (clears the record, tells observers) before the lock is released, or,
    // when the lock was lost, after the command was stopped: stopping it must not wait
    // for Redis. (A lost leadership's record names a hold that is gone: nobody reads it
    // as leading meanwhile.)
    let token = guard.token().to_string();
    let step_down = || async {
        if let Some(leading) = &leading {
            let _ = leading.election.resign_token(&token).await;
        }
    };
    match outcome {
        Supervised::Exited(status)
            if status.signal() == Some(libc::SIGKILL) && guard.lost_signal().lost().is_some() =>
        {
            // The watchdog killed it: dlock itself was stopped or frozen past the lease
            // (or the command was killed as the lease ended).
            group.finish();
            step_down().await;
            drop(guard);
            eprintln!(
                "dlock: the lock {:?} was lost while dlock could not renew it (stopped or frozen past --ttl); the command was killed so it could not run without the lock\n  hint: do not stop dlock itself (stopping the command alone keeps the lock), or use a longer --ttl",
                args.name
            );
            Ok(exit::LOST)
        }
        Supervised::Exited(status) => {
            let had_terminal = group.had_terminal();
            group.finish();
            if let Some(signal @ (libc::SIGINT | libc::SIGQUIT)) = status.signal() {
                // Die the same way, so a calling script stops too (as it would had it run
                // the command itself). When the command had the terminal, the terminal's
                // Ctrl-C reached only its group: replay it to ours (a script without job
                // control shares it), as the terminal would have.
                exit::die_by(signal, had_terminal);
            }
            step_down().await;
            if let (Some(within), true) = (args.schedule.skip_if_ran_within, status.success()) {
                // Recorded only while the hold holds: a success after the lock was lost
                // does not count (the unlock below says it was lost).
                if let Err(err) = guard.record_success(within).await {
                    if !matches!(err, dlock::Error::Lost { .. }) {
                        eprintln!("dlock: warning: could not record the success of the command under {:?}: {err}; the next run will not skip", args.name);
                    }
                }
            }
            match guard.unlock().await {
                Ok(()) => Ok(exit::of_status(status)),
                Err(dlock::Error::Lost { .. }) => {
                    eprintln!(
                        "dlock: the command finished, but the lock {:?} had been lost before it was released\n  hint: use a longer --ttl",
                        args.name
                    );
                    Ok(exit::LOST)
                }
                Err(err) => {
                    // The command is done; its lock will expire by itself.
                    eprintln!("dlock: warning: could not release {:?}: {err}; it frees when its lease ends", args.name);
                    Ok(exit::of_status(status))
                }
            }
        }
        Supervised::Stop { why, kill_at } => {
            stop(&mut child, &mut group, kill_at).await;
            step_down().await;
            drop(guard);
            match why {
                Why::Lost(reason) => eprintln!(
                    "dlock: lost the lock {:?} ({reason}); the command was stopped\n  hint: check Redis availability, use a longer --ttl, or see whether an operator released it (dlock release --force)",
                    args.name
                ),
                Why::SuspendedPastLease => eprintln!(
                    "dlock: the lock {:?} was lost while the job was suspended (Ctrl-Z) past its lease; the command was killed instead of continued\n  hint: resume (fg) within --ttl, or use a longer --ttl",
                    args.name
                ),
                Why::RenewalFailing => eprintln!(
                    "dlock: renewing the lock {:?}{redis_at} kept failing; the command was stopped before its lease could pass to another holder\n  hint: check Redis availability, or use a longer --ttl{}",
                    args.name,
                    if replication.is_some() {
                        "; with --replicas, a renewal fails too when too few replicas acknowledge it: check the replicas, or raise --replica-timeout"
                    } else {
                        ""
                    }
                ),
            }
            Ok(exit::LOST)
        }
    }
}

/// Scheduling slack between deciding to stop the command and the signals landing.
/// By when the watchdog kills the command unless dlock renews: a little after dlock's own
/// SIGKILL would have landed, before the lease (ending at `valid_until`) can pass on.
fn watchdog_deadline(valid_until: Instant, ttl: Duration) -> Instant {
    let slack = slack(ttl);
    valid_until.checked_sub(slack / 2).unwrap_or(valid_until)
}

fn slack(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// How long a stop (SIGTERM, the --kill-after grace, SIGKILL) may take: it starts only
/// once a renewal is overdue (a third of the ttl after the last one, plus a margin for a
/// slow reply) and must end before the deadline (the ttl minus the drift allowance, minus
/// slack). `None` when the ttl leaves no room at all.
fn stop_room(ttl: Duration) -> Option<Duration> {
    let margin = (ttl / 10).max(Duration::from_millis(10));
    ttl.checked_sub(dlock::drift_allowance(ttl))?
        .checked_sub(slack(ttl))?
        .checked_sub(ttl / 3)?
        .checked_sub(margin)
        .filter(|room| !room.is_zero())
}

/// `d` rounded down to what `dlock::humane` shows, so a suggested value is accepted.
fn shown_floor(d: Duration) -> Duration {
    let ms = d.as_millis() as u64;
    let step = if ms >= 60_000 {
        1_000
    } else if ms >= 1_000 {
        100
    } else {
        1
    };
    Duration::from_millis(ms / step * step)
}

/// `--kill-after`, checked against `--ttl`.
fn kill_after(args: &RunArgs) -> dlock::Result<Duration> {
    let ttl = args.lease.ttl;
    let Some(room) = stop_room(ttl).map(shown_floor) else {
        return Err(dlock::Error::InvalidArgument(format!(
            "--ttl {} is too short for run: the command could not be stopped between an overdue renewal and the end of the lease; use a longer --ttl (100ms is enough)",
            dlock::humane(ttl)
        )));
    };
    match args.kill_after {
        None => Ok((ttl / 4).min(DEFAULT_KILL_AFTER).min(room)),
        Some(grace) if grace <= stop_room(ttl).unwrap_or_default() => Ok(grace),
        Some(grace) => Err(dlock::Error::InvalidArgument(format!(
            "--kill-after {} does not fit in --ttl {}: when renewals fail the command gets SIGTERM and, --kill-after later, SIGKILL, after a renewal is overdue and before the lease can pass on; use --kill-after {} or less, or a longer --ttl",
            dlock::humane(grace),
            dlock::humane(ttl),
            dlock::humane(room)
        ))),
    }
}

/// Checks a run's arguments before connecting.
impl RunArgs {
    /// Everything that can be checked without Redis: the names (with the client's
    /// `prefix`), the kind flags, the lease with `replication`, the run's own flags.
    pub fn check(&self, prefix: &str, replication: Option<Replication>) -> dlock::Result<()> {
        dlock::check_name(prefix, &self.name)?;
        for also in &self.also {
            dlock::check_name(prefix, also)?;
        }
        self.kind.check()?;
        self.lease.options(replication)?;
        check(self)
    }
}

/// The run's own flags: `--kill-after`, what `--also` cannot combine with, the schedule.
pub fn check(args: &RunArgs) -> dlock::Result<()> {
    kill_after(args)?;
    if !args.also.is_empty() {
        if args.kind.read || args.kind.permits.is_some() {
            return Err(dlock::Error::InvalidArgument(format!(
                "--also cannot be used with {}: a multi-lock holds each name exclusively (as a mutex, fair mutex or write lock does); hold shared names one by one",
                if args.kind.read { "--read" } else { "--permits" }
            )));
        }
        if args.schedule.skip_if_ran_within.is_some() {
            return Err(dlock::Error::InvalidArgument(
                "--skip-if-ran-within cannot be used with --also: its record is a guarded write beside one lock, and a multi-lock spans several names (perhaps on several Cluster shards)".into(),
            ));
        }
    }
    args.schedule
        .options(dlock::LockOptions::default())
        .map(drop)
}

enum Why {
    Lost(LostReason),
    RenewalFailing,
    /// dlock was suspended with the command (Ctrl-Z) past the lease.
    SuspendedPastLease,
}

enum Supervised {
    Exited(ExitStatus),
    /// Stop the command: SIGTERM now, SIGKILL at `kill_at`.
    Stop {
        why: Why,
        kill_at: Instant,
    },
}

/// Waits for the command while the watchdog keeps the lease alive, forwarding signals,
/// and decides when it must stop.
async fn supervise(
    child: &mut tokio::process::Child,
    group: &Group,
    guard: &dlock::AnyGuard,
    signals: &mut Forwarded,
    args: &RunArgs,
    kill_after: Duration,
) -> Supervised {
    let mut lost = guard.lost_signal();
    let slack = slack(args.lease.ttl);
    let (stops_tx, mut stops) = tokio::sync::mpsc::unbounded_channel();
    if let Some(pid) = child.id() {
        tree::watch_stops(pid as libc::pid_t, stops_tx);
    }
    let mut reported = None;
    loop {
        let valid_until = lost.valid_until();
        if reported != Some(valid_until) {
            // The watchdog kills the command if dlock itself cannot act by then (stopped,
            // frozen): a little after dlock's own SIGKILL would have landed.
            group.must_end_by(watchdog_deadline(valid_until, args.lease.ttl));
            reported = Some(valid_until);
        }
        let stop_at = valid_until
            .checked_sub(kill_after + slack)
            .unwrap_or_else(Instant::now);
        tokio::select! {
            status = child.wait() => {
                return Supervised::Exited(status.unwrap_or_else(|_| ExitStatus::from_raw(1 << 8)));
            }
            reason = lost.wait() => {
                return Supervised::Stop { why: Why::Lost(reason), kill_at: Instant::now() + kill_after };
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(stop_at)) => {
                if lost.valid_until() <= valid_until {
                    // No renewal succeeded in time: stop now, so the SIGKILL lands before
                    // another holder can be granted.
                    return Supervised::Stop { why: Why::RenewalFailing, kill_at: stop_at + kill_after };
                }
            }
            signal = signals.next() => group.signal(signal),
            Some(stop) = stops.recv() => {
                if !group.is_job_control(stop) {
                    // Stopped from outside (SIGSTOP by an operator, a debugger, a
                    // freezer): the paused command is still the holder; keep renewing.
                    tracing::info!(signal = stop, "the command was stopped; the lock stays held while it is");
                    continue;
                }
                // Ctrl-Z: the shell gets control until `fg` or `bg`.
                group.suspended();
                if lost.lost().is_some() {
                    // Suspended past the lease: the command must not run another step.
                    return Supervised::Stop { why: Why::SuspendedPastLease, kill_at: Instant::now() };
                }
                group.resume();
            }
        }
    }
}

/// SIGTERM to the command's group, SIGKILL at `kill_at` if the command is still running,
/// then SIGKILL to whatever is left of the group.
async fn stop(child: &mut tokio::process::Child, group: &mut Group, kill_at: Instant) {
    group.signal(libc::SIGTERM);
    let deadline = tokio::time::Instant::from_std(kill_at);
    if tokio::time::timeout_at(deadline, child.wait())
        .await
        .is_err()
    {
        group.signal(libc::SIGKILL);
        let _ = child.wait().await;
    }
    group.finish();
}
