//! From a parsed command line to its exit code: the checks that need no Redis, then the
//! connection to the deployment it names, then the subcommand's own run.

use crate::cli::{Cli, Command, Topology};
use crate::cmd::{bench, elect, inspect, release, run};
use crate::connect::{connect, connect_redlock, redlock_builder};
use crate::exit;
use crate::hold::Locks;
use crate::report;

/// Everything that can be checked without Redis.
pub fn check(cli: &Cli) -> dlock::Result<()> {
    let (prefix, replication) = (cli.prefix.as_str(), cli.replication());
    if let Some(replication) = replication {
        // Also where it is ignored: a bad value in DLOCK_REPLICAS is better found at once.
        replication.check()?;
    }
    match &cli.command {
        Command::Run(args) => args.check(prefix, replication),
        Command::Elect(args) => args.check(prefix, replication),
        Command::Leader(args) => dlock::check_name(prefix, &args.name),
        Command::Acquire(args) => args.check(prefix, replication),
        Command::Release(args) => args.check(prefix),
        Command::Extend(args) => args.check(prefix, replication),
        Command::Inspect(args) => args.check(prefix),
        Command::Guarded(args) => args.check(prefix),
        Command::Bench(args) => args.check(replication),
        Command::WatchGroup(_) | Command::Completions(_) | Command::Man(_) => Ok(()),
    }
}

/// For a command whose output is the point, what would be lost with stdout closed and
/// what to do: checked before anything is done (Rust's stdout drops writes to a closed
/// descriptor silently).
fn needs_stdout(command: &Command) -> Option<(&'static str, &'static str)> {
    match command {
        // The token is the only handle on the lock: with nowhere to print it, take nothing.
        Command::Acquire(_) => Some((
            "the token, so nothing was acquired",
            "give dlock acquire a standard output to print TOKEN FENCE to",
        )),
        Command::Bench(_) => Some((
            "the results",
            "give dlock bench a standard output (a file or a pipe)",
        )),
        // A reply nobody can read (a popped value) would be lost with the write applied.
        Command::Guarded(args) if !args.commands => Some((
            "the reply, so nothing was applied",
            "give dlock guarded a standard output (redirect it to /dev/null to drop the reply)",
        )),
        // A watch nobody reads would never end.
        Command::Leader(args) if args.watch => {
            Some(("the leader", "give dlock leader --watch a standard output"))
        }
        // The operator's override prints the new fence for the fenced storage.
        Command::Release(release::ReleaseArgs { force: true, .. }) => Some((
            "the new fencing token, so nothing was released",
            "give dlock release --force a standard output to print the new fencing token to",
        )),
        // What it shows is all it does.
        Command::Inspect(_) => Some((
            "the locks",
            "give dlock inspect a standard output (a file or a pipe)",
        )),
        _ => None,
    }
}

/// Runs the checked command against its deployment; returns the exit code.
pub async fn execute(cli: &Cli) -> dlock::Result<i32> {
    if let Some((what, hint)) = needs_stdout(&cli.command) {
        if !exit::stdout_is_open() {
            eprintln!("dlock: standard output is closed: nowhere to print {what}\n  hint: {hint}");
            return Ok(exit::IO_ERROR);
        }
    }
    if let Command::Bench(args) = &cli.command {
        return bench_on(cli, args).await;
    }
    if cli.topology == Topology::Redlock {
        if let Command::Inspect(args) = &cli.command {
            // Each master's own view, also of masters that cannot be reached: no majority
            // needed to look.
            let redlock = redlock_builder(cli)?.connect_lazily()?;
            let outcome = inspect::inspect(inspect::Scope::Redlock(&redlock), args).await;
            redlock.shutdown().await;
            return outcome;
        }
    }
    let locks = match cli.topology {
        Topology::Redlock => Locks::Redlock(connect_redlock(cli).await?),
        _ => Locks::Client(connect(cli, cli.redis.first().map_or("", String::as_str)).await?),
    };
    let outcome = dispatch(&locks, cli).await;
    // Whatever is still held (an error path's guard, a cancelled wait's queue place) is
    // given back before exit: the runtime's shutdown would not wait for it.
    locks.shutdown().await;
    outcome
}

/// `dlock bench`: on `--spawn`'s private servers, else on the deployment the command line
/// names, with the raw baseline on the same one.
async fn bench_on(cli: &Cli, args: &bench::BenchArgs) -> dlock::Result<i32> {
    let interrupts = bench::Interrupts::catch()?;
    // `bench --spawn` measures private servers of its own: the first for every scenario,
    // all of them for redlock.
    let spawned = match bench::spawn_servers(args) {
        Ok(spawned) => spawned,
        Err(code) => return Ok(code),
    };
    let url = spawned
        .urls()
        .first()
        .cloned()
        .unwrap_or_else(|| cli.redis.first().cloned().unwrap_or_default());
    let locks = match cli.topology {
        Topology::Redlock => Locks::Redlock(connect_redlock(cli).await?),
        _ => Locks::Client(connect(cli, &url).await?),
    };
    // bench's raw baseline talks to the same deployment.
    let target = match cli.topology {
        Topology::SingleNode => bench::Target::SingleNode(url),
        Topology::Cluster => bench::Target::Cluster(cli.cluster.clone()),
        Topology::Sentinel => bench::Target::Sentinel {
            sentinels: cli.sentinel.clone(),
            service: cli.service.clone().unwrap_or_default(),
        },
        Topology::Redlock => bench::Target::Redlock(cli.redis.clone()),
    };
    // The masters of the redlock scenario: --spawn's, or those of several --redis.
    let masters = match cli.topology {
        Topology::Redlock => cli.redis.clone(),
        _ => spawned.urls(),
    };
    let outcome = bench::run(&locks, &target, masters, args, interrupts).await;
    locks.shutdown().await;
    outcome
}

/// The subcommand's own run, on the connected deployment.
async fn dispatch(locks: &Locks, cli: &Cli) -> dlock::Result<i32> {
    let client = match locks {
        Locks::Client(client) => Some(client),
        Locks::Redlock(_) => None,
    };
    let replication = cli.replication();
    match &cli.command {
        Command::Run(args) => {
            let mut args = args.clone();
            args.schedule.quiet = cli.quiet;
            run::run(locks, args, replication, None, &report::redis_at(cli)).await
        }
        Command::Elect(args) => {
            // Refused with several masters before connecting (see cli::redlock_usage).
            let Some(client) = client else {
                return Err(dlock::Error::InvalidArgument(
                    "elect needs one server".into(),
                ));
            };
            let election = client.election(&args.name)?;
            let leading = run::Leading {
                election: &election,
                value: &args.value,
            };
            let mut run_args = args.run_args();
            run_args.schedule.quiet = cli.quiet;
            let redis_at = report::redis_at(cli);
            run::run(locks, run_args, replication, Some(leading), &redis_at).await
        }
        Command::Leader(args) => match client {
            Some(client) => elect::leader(client, args).await,
            None => Err(dlock::Error::InvalidArgument(
                "leader needs one server".into(),
            )),
        },
        Command::Acquire(args) => args.run(locks, replication).await,
        Command::Inspect(args) => match client {
            Some(client) => inspect::inspect(inspect::Scope::Client(client), args).await,
            // Redlock's inspect never gets here (see execute).
            None => Err(dlock::Error::InvalidArgument(
                "inspect over several masters goes through each master's own client".into(),
            )),
        },
        Command::Release(args) => args.run(locks).await,
        Command::Extend(args) => args.run(locks, replication).await,
        Command::Guarded(args) => args.run(locks).await,
        // Run before any connection (see main), bench in bench_on.
        Command::Bench(_) | Command::WatchGroup(_) | Command::Completions(_) | Command::Man(_) => {
            Ok(exit::OK)
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// Whatever the arguments, parsing answers with a value or a usage error.
        #[test]
        fn argument_parsing_never_panics(args in proptest::collection::vec(
            prop_oneof![
                Just("run".to_string()), Just("acquire".to_string()), Just("release".to_string()),
                Just("extend".to_string()), Just("bench".to_string()), Just("--ttl".to_string()),
                Just("--wait".to_string()), Just("--no-wait".to_string()), Just("--permits".to_string()),
                Just("--fair".to_string()), Just("--".to_string()), Just("--kill-after".to_string()),
                Just("inspect".to_string()), Just("--force".to_string()), Just("-E".to_string()),
                Just("--cluster".to_string()), Just("--sentinel".to_string()),
                Just("--service".to_string()), Just("--replicas".to_string()),
                Just("--replica-timeout".to_string()), Just("--spawn".to_string()),
                Just("--redis".to_string()), Just("redis://127.0.0.1:1".to_string()),
                Just("redis://127.0.0.1:2,redis://127.0.0.1:3".to_string()),
                "[0-9.]{1,22}(ms|s|m|h)?", "\\PC{0,12}",
            ],
            0..8,
        )) {
            let mut argv = vec!["dlock".to_string()];
            argv.extend(args);
            if let Ok(cli) = crate::cli::parse_from(argv) {
                let _ = super::check(&cli);
            }
        }
    }
}
