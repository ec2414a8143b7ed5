//! `dlock elect` (run a command while leader, with its term) and `dlock leader` (who
//! leads, once or each change): the library's leader election for shell users.

use std::time::Duration;

use clap::Args;

use crate::cmd::run::{RunArgs, ScheduleArgs};
use crate::hold::KindArgs;
use crate::lease::{LeaseArgs, Replication};
use crate::{duration, exit};

/// `dlock elect`: `dlock run` on the election's lock, proclaiming a value while it runs.
#[derive(Args, Debug, Clone)]
pub struct ElectArgs {
    /// Election name (its leaders hold the lock of this name)
    pub name: String,
    /// What this candidate proclaims once it leads (an address, a host name): shown by
    /// `dlock leader`; one printable line (a value starting with '-': `--value=-x`)
    #[arg(long, value_name = "VALUE")]
    pub value: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// How long the command gets after SIGTERM before SIGKILL when leadership is lost
    /// [default: a quarter of --ttl, at most 10s]
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    pub kill_after: Option<Duration>,
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl ElectArgs {
    /// Everything that can be checked without Redis.
    pub fn check(&self, prefix: &str, replication: Option<Replication>) -> dlock::Result<()> {
        if self.value.chars().any(char::is_control) {
            return Err(dlock::Error::InvalidArgument(
                "--value has a control character (a newline?); `dlock leader` prints it on one line: use printable characters".into(),
            ));
        }
        let args = self.run_args();
        dlock::check_name(prefix, &args.name)?;
        args.lease.options(replication)?;
        crate::cmd::run::check(&args)
    }

    /// The `dlock run` this is: the plain mutex named after the election.
    pub fn run_args(&self) -> RunArgs {
        RunArgs {
            name: self.name.clone(),
            lease: self.lease.clone(),
            kill_after: self.kill_after,
            also: Vec::new(),
            kind: KindArgs::default(),
            schedule: self.schedule.clone(),
            command: self.command.clone(),
        }
    }
}

/// `elect --help`'s epilogue.
pub const ELECT_HELP: &str = "\
HOW IT WORKS:
    dlock waits until it leads the election NAME (it holds the lock NAME),
    records VALUE as the leader's (`dlock leader NAME` shows it), and runs CMD
    as `dlock run` does, with DLOCK_TERM set besides DLOCK_NAME, DLOCK_TOKEN and
    DLOCK_FENCE: the term, larger than every earlier leader's (it is the grant's
    fence). If leadership is lost, CMD is stopped (exit 70). When CMD exits,
    dlock steps down: the record is cleared and the next candidate leads (with
    --hold-at-least, once that time after the grant is up). A leader that dies
    is replaced within its lease (--ttl).

    Exit codes as for `dlock run` (see `dlock run --help`).";

/// `dlock leader`: who leads.
#[derive(Args, Debug, Clone)]
pub struct LeaderArgs {
    /// Election name
    pub name: String,
    /// Print {"value": .., "term": ..} (null when nobody leads)
    #[arg(long)]
    pub json: bool,
    /// Print the leader now and again at each change, until interrupted
    #[arg(long)]
    pub watch: bool,
}

/// `leader --help`'s epilogue.
pub const LEADER_HELP: &str = "\
OUTPUT:
    TERM VALUE on one line (`read term value`), or an empty line when nobody
    leads; with --json, {\"value\":\"..\",\"term\":..} or null. With --watch, a line
    for the leader now and one for each change (a new leader, a new value,
    nobody), woken by the leaders' messages, until interrupted.

    A name held by `dlock run` or a mutex that never proclaimed shows nobody
    leading.

EXIT CODES:
    0    printed (also when nobody leads); with --watch, its reader went away
         after reading some
    64   invalid arguments (also: several --redis masters)
    65   NAME is held by another kind of lock: no election leads there
    69   Redis unreachable (--watch keeps watching through a restart or
         failover)
    74   standard output is closed, its reader left before reading anything, or
         it could not be written
    76   Redis refused the request (wrong credentials, ACL, ...)";

/// Prints the leader, once or at each change.
pub async fn leader(client: &dlock::Client, args: &LeaderArgs) -> dlock::Result<i32> {
    let election = client.election(&args.name)?;
    let line = |leader: Option<dlock::Leader>| match (leader, args.json) {
        (None, false) => "\n".to_string(),
        (None, true) => "null\n".to_string(),
        (Some(leader), false) => format!("{} {}\n", leader.term, leader.value),
        (Some(leader), true) => {
            serde_json::json!({"value": leader.value, "term": leader.term}).to_string() + "\n"
        }
    };
    if !args.watch {
        return Ok(exit::emit(&line(election.leader().await?)));
    }
    let mut observer = election.observe();
    let mut reader_gone = tokio::time::interval(Duration::from_secs(1));
    let mut failures = 0u32;
    loop {
        let next = observer.next();
        tokio::pin!(next);
        let leader = loop {
            tokio::select! {
                leader = &mut next => break leader,
                // A reader that went away (`| head -1`) is noticed without waiting for
                // the next change to write (and without asking Redis anything).
                _ = reader_gone.tick() => {
                    if stdout_hung_up() {
                        return Ok(exit::after_reader_left());
                    }
                }
            }
        };
        let leader = match leader {
            Ok(leader) => {
                failures = 0;
                leader
            }
            // Redis restarting or failing over: watch on, as the help promises.
            Err(err) if err.is_transient() => {
                failures += 1;
                if failures == 1 {
                    eprintln!("dlock: {err}; watching on");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(err) => return Err(err),
        };
        if let Err(code) = exit::write_out(&line(leader)) {
            return Ok(code);
        }
    }
}

/// True when standard output is a pipe or socket whose reader went away.
fn stdout_hung_up() -> bool {
    let mut poll = libc::pollfd {
        fd: 1,
        events: 0,
        revents: 0,
    };
    // SAFETY: one pollfd on our own descriptor, no waiting.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & (libc::POLLERR | libc::POLLHUP) != 0
}
