//! What dlock says when a command fails: the error in words (with what only the command
//! line knows), its hint and its exit code.

use crate::cli::{Cli, Command, Topology};
use crate::cmd::release;
use crate::exit;
use crate::hold::KindArgs;

/// Prints an error with what to do about it, and returns its exit code.
pub fn report(err: &dlock::Error, cli: &Cli) -> i32 {
    let (code, hint) = diagnose(err, cli);
    let busy = matches!(
        err,
        dlock::Error::Busy { .. } | dlock::Error::TimedOut { .. }
    );
    if busy && cli.quiet {
        return code;
    }
    eprintln!("dlock: {}\n  hint: {hint}", describe(err, cli));
    code
}

/// The error in words, with what only the command line knows: the addresses an
/// unreachable deployment was tried at (passwords hidden), the permits of a full
/// semaphore.
fn describe(err: &dlock::Error, cli: &Cli) -> String {
    let permits = cli
        .command
        .kind()
        .and_then(|kind| Some((kind.permits?, kind.weight.take.unwrap_or(1))));
    match (err, permits) {
        (dlock::Error::Connection(why), _) => {
            format!("cannot reach Redis{}: {why}", redis_at(cli))
        }
        (dlock::Error::Busy { name, .. }, Some(permits)) => {
            format!("semaphore {name:?} is busy: {}", all_held(permits))
        }
        (dlock::Error::TimedOut { name, waited }, Some(permits)) => format!(
            "semaphore {name:?} was not acquired within {}: {} the whole time",
            dlock::humane(*waited),
            all_held(permits)
        ),
        _ => err.to_string(),
    }
}

/// Where the command line points dlock, for a message about Redis: " at URL", " at the
/// masters ...", " through the cluster nodes ..." or " through the sentinels ..."
/// (passwords hidden); nothing for `bench --spawn`, whose private server is not the one
/// --redis names.
pub fn redis_at(cli: &Cli) -> String {
    let list = |urls: &[String]| {
        urls.iter()
            .map(|url| dlock::redact_url(url))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match cli.topology {
        _ if matches!(&cli.command, Command::Bench(args) if args.spawn) => String::new(),
        Topology::SingleNode => format!(" at {}", list(&cli.redis[..cli.redis.len().min(1)])),
        Topology::Redlock => format!(" at the masters {}", list(&cli.redis)),
        Topology::Cluster => format!(" through the cluster nodes {}", list(&cli.cluster)),
        Topology::Sentinel => format!(" through the sentinels {}", list(&cli.sentinel)),
    }
}

/// What keeps a semaphore of N `permits` busy for a request of `take` of them, in words.
fn all_held((permits, take): (u64, u64)) -> String {
    match (permits, take) {
        (1, _) => "its one permit is not free for it (held, or a waiter ahead in line comes first)".into(),
        (n, 1) => format!(
            "all {n} permits are held (or waiters ahead in line come first)"
        ),
        (n, k) => format!(
            "fewer than {k} of its {n} permits are free for it (held, or waiters ahead in line come first)"
        ),
    }
}

/// The exit code of an error and the hint printed with it, for the command `cli` runs.
pub fn diagnose(err: &dlock::Error, cli: &Cli) -> (i32, &'static str) {
    let (mut code, mut hint) = exit::classify(err);
    let by_token = matches!(
        cli.command,
        Command::Release(release::ReleaseArgs { force: false, .. })
            | Command::Extend(_)
            | Command::Guarded(_)
    );
    if matches!(cli.command, Command::Guarded(_)) && matches!(err, dlock::Error::Refused { .. }) {
        hint = "Redis refused the command (its words above): a data key of another type, a value that is not a number, wrong arguments for the command, or the ACL or maxmemory; the hold is untouched";
    }
    if by_token && matches!(err, dlock::Error::WrongType { .. }) {
        hint = match cli.command {
            // `guarded` does not look up the kind the key holds.
            Command::Guarded(_) => "the name holds another kind of lock: pass the kind flag the token was acquired with (--fair, --read, --write or --permits N)",
            // Without a kind flag they act on every kind they can look up by token: what
            // is left is data of another tool, or a reentrant mutex (or, over several
            // masters, anything but a plain mutex, the one kind Redlock has).
            _ if !cli.command.kind().is_some_and(KindArgs::names_a_kind) => "the name holds what release and extend cannot act on by token (shown above): data that is not a dlock lock (check the name and --prefix / DLOCK_PREFIX; `dlock inspect NAME` shows what it holds) or a reentrant mutex, which its owner gives back through the library; nothing was changed",
            _ => "the name holds another kind of lock than the flag says, or data that is not a lock: pass the kind flag the token was acquired with, or none (release and extend find the kind the key holds)",
        };
    }
    // A command that only reads holds nothing that could be lost.
    let reads_only = matches!(cli.command, Command::Inspect(_) | Command::Leader(_));
    if reads_only
        && matches!(err, dlock::Error::UnexpectedReply { command, .. } if command != "SCAN")
    {
        hint = "something between dlock and Redis answers for it (a proxy, or a script of another tool under the same SHA); this command only reads, so no lock was taken or changed: check what --redis points at";
    }
    // The flags that name the deployment, where the hint names --redis.
    match (cli.topology, err) {
        (Topology::Cluster, dlock::Error::Misconfigured(_)) => {
            hint = "give the cluster's data nodes in --cluster / DLOCK_CLUSTER (cluster-enabled servers; a single server goes in --redis, sentinels in --sentinel), and rediss:// only on TLS ports";
        }
        (Topology::Sentinel, dlock::Error::Misconfigured(_)) => {
            hint = "give sentinels in --sentinel / DLOCK_SENTINEL (a data server goes in --redis) and, in --service / DLOCK_SERVICE, the name they monitor the master under (`sentinel monitor <name> ...`)";
        }
        (Topology::Cluster, dlock::Error::Connection(_)) => {
            hint = "check that the nodes in --cluster / DLOCK_CLUSTER are running, reachable and cluster-enabled (a single server goes in --redis), and the TLS settings";
        }
        (Topology::Sentinel, dlock::Error::Connection(_)) => {
            hint = "check that the sentinels in --sentinel / DLOCK_SENTINEL are running and reachable, that --service / DLOCK_SERVICE is the name they monitor the master under, that the master is up, and the TLS settings";
        }
        (Topology::Cluster, dlock::Error::Authentication(_)) => {
            hint = "fix the user name and password in the --cluster / DLOCK_CLUSTER URLs (redis://user:password@host)";
        }
        (Topology::Sentinel, dlock::Error::Authentication(_)) => {
            hint = "fix the user name and password in the first --sentinel / DLOCK_SENTINEL URL (redis://user:password@host): it serves the sentinels and the master";
        }
        (Topology::Redlock, dlock::Error::Connection(_)) => {
            hint = "check that the masters in --redis / DLOCK_REDIS are running and reachable: a majority of them must answer";
        }
        (Topology::Redlock, dlock::Error::Authentication(_)) => {
            hint = "fix the user name and password in the --redis / DLOCK_REDIS URLs (redis://user:password@host): every master must accept them";
        }
        (Topology::Cluster, dlock::Error::Unsupported(_)) => {
            hint = "upgrade the cluster's servers: dlock needs Redis 7 or newer on a cluster (sharded pub/sub)";
        }
        _ => {}
    }
    let busy = matches!(
        err,
        dlock::Error::Busy { .. } | dlock::Error::TimedOut { .. }
    );
    if busy
        && cli
            .command
            .kind()
            .is_some_and(|kind| kind.permits.is_some())
    {
        hint = "the permits are taken, or waiters ahead in line come first; wait longer with --wait, or try again later";
    }
    if busy {
        if let Some(conflict) = cli
            .command
            .lease()
            .and_then(|lease| lease.conflict_exit_code)
        {
            code = conflict as i32;
        }
    }
    (code, hint)
}

#[cfg(test)]
mod tests {
    /// A listing that comes back unreadable, or a reply no dlock script sends to a command
    /// that only reads, is exit 76 and says nothing was taken or changed, never "treat the
    /// lock as lost" (which is for a hold).
    #[test]
    fn an_unexpected_reply_to_a_read_says_nothing_was_held() {
        let scan = dlock::Error::UnexpectedReply {
            command: "SCAN".into(),
            reply: "invalid UTF-8".into(),
        };
        let script = dlock::Error::UnexpectedReply {
            command: "a dlock script".into(),
            reply: "[7]".into(),
        };
        for argv in [
            &["dlock", "inspect", "--match", "odd:*", "--prometheus"][..],
            &["dlock", "inspect", "job"],
            &["dlock", "leader", "job"],
        ] {
            let Ok(cli) = crate::cli::parse_from(argv) else {
                panic!("{argv:?} parses");
            };
            for err in [&scan, &script] {
                let (code, hint) = super::diagnose(err, &cli);
                assert_eq!(code, 76, "{argv:?} {err}");
                assert!(
                    !hint.contains("lost") && hint.contains("no lock was"),
                    "{argv:?} {err}: {hint}"
                );
            }
        }
        // A hold's unexpected reply still says to treat the lock as lost.
        let Ok(cli) = crate::cli::parse_from(["dlock", "acquire", "job"]) else {
            panic!("acquire parses");
        };
        assert!(super::diagnose(&script, &cli)
            .1
            .contains("treat the lock as lost"));
    }
}
