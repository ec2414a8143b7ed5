//! `dlock`: flock(1) for a fleet. A thin layer over the `dlock` library.

/// `eprintln!` for the whole crate (defined before the modules, so it shadows std's in all
/// of them): stderr is only where dlock explains itself, and a closed or broken stderr
/// (`2>&-`, a log pipe whose reader left) must not turn the documented exit code into a
/// panic (101), as std's `eprintln!` does.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cmd;
mod duration;
mod exit;
mod hold;
mod holder;
mod tree;

use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use dlock::{Client, LockOptions, Redlock, Wait};

use cmd::{bench, elect, guarded, inspect, run};
use hold::{KindArgs, Locks};

/// The heading of the options every subcommand takes: a subcommand's `--help` lists its
/// own options first, then these, instead of interleaving them.
const GLOBAL: &str = "Global options (every subcommand)";

#[derive(Parser, Debug)]
#[command(
    name = "dlock",
    version,
    about = "Distributed locks on Redis for shell scripts and cron jobs",
    after_help = exit::HELP
)]
struct Cli {
    /// Redis URL of a single server: redis://[user:password@]host[:port][/db] or rediss://
    /// for TLS. Repeat it (or separate URLs with commas) to name several independent
    /// masters: locks are then granted by a majority of them (Redlock; the plain mutex
    /// only). Not with --cluster or --sentinel (a flag on the command line beats another
    /// deployment's variable, e.g. --cluster beats DLOCK_REDIS)
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        value_name = "URL",
        env = "DLOCK_REDIS",
        default_value = "redis://127.0.0.1:6379",
        action = ArgAction::Append,
        hide_env_values = true
    )]
    redis: Vec<String>,

    /// Redis Cluster: a seed node's URL (repeat the flag, or separate URLs with commas);
    /// the other nodes are found through it. Needs Redis 7. Not with --redis or --sentinel
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_CLUSTER",
        value_name = "URL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    cluster: Vec<String>,

    /// Redis Sentinel: a sentinel's URL (repeat the flag, or separate URLs with commas);
    /// locks live on the master the sentinels name for --service, followed across
    /// failovers. The first URL's user, password and database serve the sentinels and the
    /// master. Not with --redis or --cluster
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_SENTINEL",
        value_name = "URL",
        value_delimiter = ',',
        hide_env_values = true
    )]
    sentinel: Vec<String>,

    /// With --sentinel: the name the sentinels know the master by (`sentinel monitor NAME
    /// ...`)
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_SERVICE", value_name = "NAME")]
    service: Option<String>,

    /// Grant (run, acquire), extend and renew a lock only once N replicas have the write
    /// (Redis WAIT); when fewer acknowledge within --replica-timeout the lock is given back
    /// and dlock exits 69. Narrows, does not close, the window in which a failover to a
    /// replica that missed the grant hands the lock out twice. release and inspect ignore
    /// it; bench refuses it
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_REPLICAS", value_name = "N")]
    replicas: Option<u32>,

    /// With --replicas: how long to wait for the replicas' acknowledgement; must be shorter
    /// than the lease (--ttl) [default: 1s, or a third of the lease when that is shorter]
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_REPLICA_TIMEOUT",
        value_name = "DUR",
        value_parser = duration::parse,
        requires = "replicas"
    )]
    replica_timeout: Option<Duration>,

    /// Which deployment the flags name (settled by `parse_from`).
    #[arg(skip)]
    topology: Topology,

    /// Prefix put in front of every lock name to form its Redis key
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_PREFIX", default_value = "")]
    prefix: String,

    /// For rediss:// URLs: PEM file of the CA to trust (default: the system's roots)
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_TLS_CA", value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,

    /// For mutual TLS: PEM file of the client certificate (with --tls-key)
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<std::path::PathBuf>,

    /// For mutual TLS: PEM file of the client key (with --tls-cert)
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<std::path::PathBuf>,

    /// More log output on stderr (-v: info, -vv: debug); RUST_LOG overrides
    #[arg(short, long, global = true,
        help_heading = GLOBAL, action = ArgAction::Count)]
    verbose: u8,

    /// Quiet: say nothing when the lock is busy (cron mails nothing), log only errors
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    quiet: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding the lock; exit with the command's exit code
    #[command(after_help = run::help())]
    Run(run::RunArgs),
    /// Take the lock and leave it held for its lease; print "TOKEN FENCE"
    #[command(after_help = exit::HELP)]
    Acquire {
        /// Lock name
        name: String,
        #[command(flatten)]
        lease: LeaseArgs,
        #[command(flatten)]
        kind: KindArgs,
        /// Print one JSON object: name, key, kind, token, fence, ttl_ms, weight (the
        /// permits the hold takes: K of --take, else 1)
        #[arg(long)]
        json: bool,
    },
    /// Release a hold by its TOKEN (as printed by `dlock acquire`), or by force
    #[command(after_help = exit::HELP)]
    Release {
        /// Lock name
        name: String,
        /// The token printed by `dlock acquire` (not with --force)
        #[arg(required_unless_present = "force", conflicts_with = "force")]
        token: Option<String>,
        #[command(flatten)]
        kind: KindArgs,
        /// Operator's override: release NAME whoever holds it, and draw a new fencing
        /// token so fenced storage refuses the evicted holder's late writes. Only by
        /// exact name; prints the new fencing token
        #[arg(long)]
        force: bool,
    },
    /// Reset the lease of a hold by its TOKEN
    #[command(after_help = exit::HELP)]
    Extend {
        /// Lock name
        name: String,
        /// The token printed by `dlock acquire`
        token: String,
        #[command(flatten)]
        kind: KindArgs,
        /// New lease, from now, 10ms to 24h (e.g. 30s)
        #[arg(long, value_parser = duration::ttl)]
        ttl: Duration,
        /// The --lock-delay the hold was acquired with: Redis keeps it --ttl plus DUR
        /// (without it, an extend drops the delay)
        #[arg(long, value_parser = duration::parse, value_name = "DUR")]
        lock_delay: Option<Duration>,
    },
    /// Wait to lead the election NAME, then run a command while leader (with DLOCK_TERM),
    /// proclaiming --value; exit with the command's exit code
    #[command(after_help = elect::ELECT_HELP)]
    Elect(elect::ElectArgs),
    /// Show who leads the election NAME (TERM VALUE), once or at each change (--watch)
    #[command(after_help = elect::LEADER_HELP)]
    Leader(elect::LeaderArgs),
    /// Run one Redis command on the lock's data only while the hold TOKEN is held, and
    /// print its reply (KEY is stored beside the lock: {NAME}:data:KEY for an untagged name)
    #[command(after_help = guarded::HELP)]
    Guarded(guarded::GuardedArgs),
    /// Show who holds locks: kind, holders (host, pid and start of dlock processes),
    /// remaining lease, fencing counter, queue (QUEUED: waiters with a place in line; of a
    /// read-write lock its writers, not its readers, who wait without one)
    #[command(after_help = exit::HELP)]
    Inspect(inspect::InspectArgs),
    /// Measure throughput, hand-off latency, herd cost and renewal cost against the
    /// configured Redis: --redis, a --cluster or a --sentinel master, the raw baseline on
    /// the same deployment (use a private one: it writes keys and resets nothing); with
    /// several --redis masters (or --spawn's five), Redlock over them vs over the first
    Bench(bench::BenchArgs),
    /// Print the completion script for SHELL on stdout, e.g. `dlock completions bash >
    /// ~/.local/share/bash-completion/completions/dlock` (see the README for zsh and fish)
    Completions {
        /// The shell to complete in
        shell: clap_complete::Shell,
    },
    /// Print the manual page dlock(1) on stdout (`dlock man | man -l -`), or with
    /// --out-dir write it and one page per subcommand (dlock-run.1, ...) into DIR
    Man {
        /// Write dlock.1 and the subcommands' pages into this directory instead
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
    /// Internal: the watchdog of `run` that kills the command's process group when dlock dies
    /// or stops renewing (--terminal: dlock's process group, given the terminal back;
    /// --deadline: by when the command must be gone unless dlock renews, CLOCK_MONOTONIC ns)
    #[command(name = "__watch-group", hide = true)]
    WatchGroup {
        #[arg(long)]
        terminal: Option<i32>,
        #[arg(long)]
        deadline: Option<u64>,
    },
}

/// Lease and wait options shared by `run` and `acquire`.
#[derive(Args, Debug, Clone)]
pub struct LeaseArgs {
    /// Lease of the lock, 10ms to 24h (e.g. 250ms, 30s, 5m); `run` renews it while the
    /// command runs, so a long job keeps a short --ttl
    #[arg(long, value_parser = duration::ttl, default_value = "30s")]
    pub ttl: Duration,
    /// Wait at most this long for the lock (default: wait forever)
    #[arg(long, value_parser = duration::parse, conflicts_with = "no_wait", value_name = "DUR")]
    pub wait: Option<Duration>,
    /// Fail at once (exit 75, or -E N) if the lock is held
    #[arg(long, short = 'n')]
    pub no_wait: bool,
    /// Exit with N instead of 75 when the lock is busy (flock's -E)
    #[arg(short = 'E', long, value_name = "N")]
    pub conflict_exit_code: Option<u8>,
    /// Lease on a waiter's place in the queue of a fair lock, write lock or semaphore: a
    /// crashed waiter holds up the queue this long (100ms to 24h) [default: 30s]
    #[arg(long, value_parser = duration::waiter_lease, value_name = "DUR")]
    pub waiter_lease: Option<Duration>,
    /// Keep the lock ungrantable for DUR after a hold that ended by its lease running out
    /// (its holder died or was stopped) rather than by a release: for storage that cannot
    /// check DLOCK_FENCE (--ttl plus DUR at most 24h)
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    pub lock_delay: Option<Duration>,
}

/// `options` with `--lock-delay`, checked in the flag's words.
pub fn with_lock_delay(
    options: LockOptions,
    delay: Option<Duration>,
) -> dlock::Result<LockOptions> {
    let Some(delay) = delay else {
        return Ok(options);
    };
    let room = dlock::MAX_TTL.saturating_sub(options.ttl);
    if room.is_zero() {
        return Err(dlock::Error::InvalidArgument(format!(
            "--lock-delay does not fit with --ttl {}: Redis keeps a hold --ttl plus --lock-delay, at most {}; lower --ttl",
            dlock::humane(options.ttl),
            dlock::humane(dlock::MAX_TTL)
        )));
    }
    if delay.is_zero() || delay > room {
        return Err(dlock::Error::InvalidArgument(format!(
            "--lock-delay {} is out of range; use above zero and at most {} with --ttl {} (Redis keeps a hold --ttl plus --lock-delay, at most {})",
            dlock::humane(delay),
            dlock::humane(room),
            dlock::humane(options.ttl),
            dlock::humane(dlock::MAX_TTL)
        )));
    }
    Ok(options.lock_delay(delay))
}

/// The longest `--wait`: beyond it, leave `--wait` out to wait forever.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

impl LeaseArgs {
    /// The library options, with `--replicas` when given, checked (before any connection).
    pub fn options(&self, replication: Option<Replication>) -> dlock::Result<LockOptions> {
        let wait = match (self.no_wait, self.wait) {
            (true, _) => Wait::NoWait,
            (false, Some(limit)) if limit > MAX_WAIT => {
                return Err(dlock::Error::InvalidArgument(format!(
                    "--wait {} is longer than a year; leave out --wait to wait forever",
                    dlock::humane(limit)
                )))
            }
            (false, Some(limit)) => Wait::Timeout(limit),
            (false, None) => Wait::Forever,
        };
        // --ttl and --waiter-lease were checked against their ranges while parsing.
        let mut options = LockOptions::default().ttl(self.ttl).wait(wait);
        if let Some(lease) = self.waiter_lease {
            options = options.waiter_lease(lease);
        }
        options = with_lock_delay(options, self.lock_delay)?;
        options = Replication::apply(replication, options, "--ttl")?;
        options.validate()?;
        Ok(options)
    }
}

/// Which Redis deployment the command talks to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Topology {
    /// The one server of `--redis` (or of `bench --spawn`).
    #[default]
    SingleNode,
    /// The Redis Cluster of `--cluster`.
    Cluster,
    /// The master that the sentinels of `--sentinel` name for `--service`.
    Sentinel,
    /// The independent masters of `--redis` given more than once (or a list in
    /// DLOCK_REDIS): the plain mutex granted by a majority of them.
    Redlock,
}

/// `--redis` values as given (repeated flags, or one value with several URLs), one URL
/// each. A comma separates URLs only where a new URL begins (`,redis://`, `,rediss://`,
/// `,unix://`...), so a comma inside a password stays part of it.
fn split_urls(values: &[String]) -> Vec<String> {
    let mut urls = Vec::new();
    for value in values {
        let mut current = String::new();
        for (index, piece) in value.split(',').enumerate() {
            if index > 0 && starts_a_url(piece) {
                urls.push(std::mem::take(&mut current));
            } else if index > 0 {
                current.push(',');
            }
            current.push_str(piece);
        }
        urls.push(current);
    }
    let urls: Vec<String> = urls
        .into_iter()
        .map(|url| url.trim().trim_end_matches(',').trim_end().to_string())
        .collect();
    if urls.iter().all(String::is_empty) {
        // Nothing but blanks: left as given, for the URL check to refuse.
        return urls.into_iter().take(1).collect();
    }
    urls.into_iter().filter(|url| !url.is_empty()).collect()
}

/// True when `text` begins with a URL scheme: letters, digits, `+`, `-` or `.`, then `://`.
fn starts_a_url(text: &str) -> bool {
    let text = text.trim_start();
    text.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// `--replicas N` and `--replica-timeout DUR`.
#[derive(Debug, Clone, Copy)]
pub struct Replication {
    count: u32,
    /// `None`: the default (see [`Replication::timeout`]).
    timeout: Option<Duration>,
}

/// The longest default `--replica-timeout`.
const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

impl Replication {
    /// The time the replicas get for a lock whose lease is `lease`: `--replica-timeout`,
    /// or 1 s, or a third of the lease when that is shorter.
    fn timeout(&self, lease: Duration) -> Duration {
        self.timeout
            .unwrap_or_else(|| DEFAULT_REPLICA_TIMEOUT.min(lease / 3))
    }

    /// `options` (whose `ttl` is the lease) with the replicas asked for, checked against
    /// that lease, which the flag `lease_flag` sets.
    pub fn apply(
        replication: Option<Replication>,
        options: LockOptions,
        lease_flag: &str,
    ) -> dlock::Result<LockOptions> {
        let Some(replication) = replication else {
            return Ok(options);
        };
        replication.check()?;
        let lease = options.ttl;
        let timeout = replication.timeout(lease);
        if timeout.is_zero() || timeout >= lease {
            return Err(dlock::Error::InvalidArgument(format!(
                "--replica-timeout {} must be above zero and shorter than the lease ({lease_flag} {}): an acknowledgement that comes after the lease ended is worthless; use a shorter --replica-timeout or a longer {lease_flag}",
                dlock::humane(timeout),
                dlock::humane(lease)
            )));
        }
        Ok(options.replicas(replication.count, timeout))
    }

    /// The count alone (before any lease is known).
    fn check(&self) -> dlock::Result<()> {
        if self.count == 0 || self.count > dlock::MAX_REPLICAS {
            return Err(dlock::Error::InvalidArgument(format!(
                "--replicas {} is out of range; use 1 to {} (or leave out --replicas to trust the master's reply alone)",
                self.count,
                dlock::MAX_REPLICAS
            )));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(dlock::Error::InvalidArgument(
                "--replica-timeout must be above zero".into(),
            ));
        }
        Ok(())
    }
}

impl Cli {
    /// `--replicas` with its timeout, when given.
    fn replication(&self) -> Option<Replication> {
        self.replicas.map(|count| Replication {
            count,
            timeout: self.replica_timeout,
        })
    }
}

/// A usage error found after clap parsed the arguments, with its hint.
struct Usage {
    error: clap::Error,
    hint: &'static str,
}

impl From<clap::Error> for Usage {
    fn from(error: clap::Error) -> Usage {
        Usage {
            error,
            hint: "fix the arguments; `dlock --help` and `dlock <COMMAND> --help` list them",
        }
    }
}

/// Parses the arguments and settles which deployment they name. A flag on the command
/// line beats another deployment's environment variable (DLOCK_REDIS in a profile does
/// not stand in the way of `--cluster`); two on the command line, or two environment
/// variables with neither flag given, are a usage error.
fn parse_from<I, T>(args: I) -> Result<Cli, Usage>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.redis = split_urls(&cli.redis);
    let usage = |message: String, hint: &'static str| Usage {
        error: Cli::command().error(clap::error::ErrorKind::ArgumentConflict, message),
        hint,
    };
    let spawn = matches!(&cli.command, Command::Bench(args) if args.spawn);
    // (topology, its flag, its variable, where its value came from)
    let choices = [
        (
            Topology::SingleNode,
            "--redis",
            "DLOCK_REDIS",
            matches.value_source("redis"),
        ),
        (
            Topology::Cluster,
            "--cluster",
            "DLOCK_CLUSTER",
            matches.value_source("cluster"),
        ),
        (
            Topology::Sentinel,
            "--sentinel",
            "DLOCK_SENTINEL",
            matches.value_source("sentinel"),
        ),
    ];
    let from = |source: ValueSource| {
        choices
            .iter()
            .filter(move |choice| choice.3 == Some(source))
            .collect::<Vec<_>>()
    };
    let (on_line, in_env) = (
        from(ValueSource::CommandLine),
        from(ValueSource::EnvVariable),
    );
    const ONE_OF: &str = "name one deployment: --redis URL (one server; repeated, independent masters for Redlock), --cluster URL... (a Redis Cluster) or --sentinel URL... with --service NAME (Sentinel)";
    if let [first, second, ..] = on_line.as_slice() {
        return Err(usage(
            format!(
                "the argument '{}' cannot be used with '{}': a command talks to one Redis deployment",
                second.1, first.1
            ),
            ONE_OF,
        ));
    }
    if spawn {
        if let Some(flag) = on_line.iter().find(|c| c.0 != Topology::SingleNode) {
            return Err(usage(
                format!(
                    "the argument '--spawn' cannot be used with '{}': bench --spawn measures a private single server",
                    flag.1
                ),
                "leave out --spawn to bench the cluster or Sentinel deployment, or leave out its flag to bench a private server",
            ));
        }
        if matches.value_source("redis") == Some(ValueSource::CommandLine) && cli.redis.len() > 1 {
            return Err(usage(
                "the argument '--spawn' cannot be used with several --redis URLs: bench --spawn starts private servers of its own (five for the redlock scenario)".into(),
                "leave out --spawn to bench the redlock scenario on the masters you name, or leave out the --redis URLs to bench private servers",
            ));
        }
        cli.topology = Topology::SingleNode;
    } else {
        cli.topology = match (on_line.first(), in_env.as_slice()) {
            (Some(choice), _) | (None, [choice]) => choice.0,
            (None, []) => Topology::SingleNode,
            (None, [first, second, ..]) => {
                return Err(usage(
                    format!(
                        "both {} and {} are set: a command talks to one Redis deployment",
                        first.2, second.2
                    ),
                    "unset one of the variables, or pick the deployment with --redis, --cluster or --sentinel (a flag beats the variables)",
                ))
            }
        };
        if cli.topology == Topology::SingleNode && cli.redis.len() > 1 {
            cli.topology = Topology::Redlock;
        }
    }
    let service_on_line = matches.value_source("service") == Some(ValueSource::CommandLine);
    if cli.topology == Topology::Redlock {
        redlock_usage(&cli, &matches).map_err(|(message, hint)| usage(message, hint))?;
    }
    match cli.topology {
        Topology::Sentinel if matches!(cli.service.as_deref(), None | Some("")) => {
            return Err(usage(
                "--sentinel needs --service NAME: the name the sentinels know the master by"
                    .into(),
                "add --service NAME (or set DLOCK_SERVICE), the NAME of `sentinel monitor NAME ...` in the sentinels' configuration",
            ))
        }
        Topology::SingleNode | Topology::Cluster | Topology::Redlock if service_on_line => {
            return Err(usage(
                "--service names the master of a Sentinel deployment; it needs --sentinel".into(),
                "add --sentinel URL (repeatable), or leave out --service",
            ))
        }
        _ => {}
    }
    Ok(cli)
}

/// What several `--redis` masters (Redlock) cannot be combined with: the message and
/// its hint.
fn redlock_usage(cli: &Cli, matches: &clap::ArgMatches) -> Result<(), (String, &'static str)> {
    use clap::parser::ValueSource;
    let flag = |id: &str, flag: &'static str, var: &'static str| match matches.value_source(id) {
        Some(ValueSource::EnvVariable) => var,
        _ => flag,
    };
    if cli.redis.len() > dlock::redlock::MAX_NODES {
        return Err((
            format!(
                "{} --redis URLs are too many: Redlock spans at most {} masters",
                cli.redis.len(),
                dlock::redlock::MAX_NODES
            ),
            "name fewer masters: an odd number (3 or 5) tolerates the most failures for its size",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = cli.redis.iter().find(|url| !seen.insert(url.as_str())) {
        return Err((
            format!(
                "{} is named twice in --redis: Redlock's masters must be independent servers",
                dlock::redact_url(twice)
            ),
            "name each master once",
        ));
    }
    if cli.replicas.is_some() {
        return Err((
            format!(
                "{} cannot be used with several --redis URLs (Redlock): each is an independent master, and the majority that grants the lock is its acknowledgement",
                flag("replicas", "--replicas", "DLOCK_REPLICAS")
            ),
            "leave out --replicas (and unset DLOCK_REPLICAS and DLOCK_REPLICA_TIMEOUT), or give one --redis URL for a master with replicas",
        ));
    }
    if let Some((flag, state)) = kind_of(&cli.command).and_then(KindArgs::single_master_only) {
        return Err((
            hold::redlock_refusal(&flag, state),
            "leave out the kind flag to use the mutex over every master, or give one --redis URL (or --cluster, --sentinel) for that kind",
        ));
    }
    if let Command::Elect(_) | Command::Leader(_) = &cli.command {
        return Err((
            "leader election cannot be used with several --redis URLs (Redlock) yet: its record and messages live on one server".into(),
            "give one --redis URL (or --cluster, --sentinel)",
        ));
    }
    if let Command::Guarded(args) = &cli.command {
        if !args.commands {
            return Err((
                "guarded writes cannot be used with several --redis URLs (Redlock): a Redlock hold spans several masters, and no one script can check it".into(),
                "keep the data beside a lock on one server (one --redis URL, --cluster or --sentinel)",
            ));
        }
    }
    if let Command::Run(run::RunArgs { also, .. }) = &cli.command {
        if !also.is_empty() {
            return Err((
                "--also cannot be used with several --redis URLs (Redlock): a multi-lock's names are taken together by one script on one server, or slot by slot on a Cluster; over independent masters each name would need its own majority, and a partial grant on some masters could not be given back atomically".into(),
                "take the names with one --redis URL (or --cluster, --sentinel), or run one dlock run per name inside another",
            ));
        }
    }
    if let Command::Run(run::RunArgs { schedule, .. }) = &cli.command {
        if schedule.skip_if_ran_within.is_some() {
            return Err((
                "--skip-if-ran-within cannot be used with several --redis URLs (Redlock): its record is a guarded write, which needs the lock and the record on one server".into(),
                "use --hold-at-least alone with Redlock, or give one --redis URL (or --cluster, --sentinel)",
            ));
        }
    }
    if let Command::Release { force: true, .. } = cli.command {
        return Err((
            "release --force cannot be used with several --redis URLs (Redlock) yet".into(),
            "release by the TOKEN that dlock acquire printed, or force it on every master in turn with one --redis URL each (each draws a new fencing token there, so the next grant's fence is larger than the evicted holder's)",
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = match parse_from(std::env::args_os()) {
        Ok(cli) => cli,
        Err(Usage { error, hint }) => {
            let code = if error.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            if code == exit::OK {
                // --help, help, --version: the text is the result, as any command's is.
                return ExitCode::from(print_help(&error) as u8);
            }
            let _ = error.print();
            if code == exit::USAGE {
                // clap's "For more information, try '--help'" has no hint line of ours.
                eprintln!("  hint: {hint}");
            }
            return ExitCode::from(code as u8);
        }
    };
    if let Command::WatchGroup { terminal, deadline } = cli.command {
        return ExitCode::from(tree::watch_group(terminal, deadline) as u8);
    }
    // Generated from the definitions above: no Redis, no checks of Redis options.
    if let Command::Completions { shell } = &cli.command {
        let mut script = Vec::new();
        clap_complete::generate(
            *shell,
            &mut <Cli as clap::CommandFactory>::command(),
            "dlock",
            &mut script,
        );
        return ExitCode::from(exit::emit(&String::from_utf8_lossy(&script)) as u8);
    }
    if let Command::Guarded(args) = &cli.command {
        if args.commands {
            return ExitCode::from(guarded::list_commands() as u8);
        }
    }
    if let Command::Man { out_dir } = &cli.command {
        return ExitCode::from(man_pages(out_dir.as_deref()) as u8);
    }
    init_logging(&cli);
    // Arguments are checked before any connection: a bad name is a usage error even
    // when Redis is down.
    if let Err(err) = check(&cli) {
        return ExitCode::from(report(&err, &cli) as u8);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("dlock: cannot start the async runtime: {err}");
            return ExitCode::from(exit::LOST as u8);
        }
    };
    let code = runtime.block_on(async {
        match execute(&cli).await {
            Ok(code) => code,
            Err(err) => report(&err, &cli),
        }
    });
    // Releases were awaited by the client's shutdown; nothing may hang the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    let signal = DIE_BY.load(std::sync::atomic::Ordering::SeqCst);
    if signal == libc::SIGINT || signal == libc::SIGQUIT {
        // A shell stops a script whose command died of SIGINT/SIGQUIT, not one that exited
        // 130: die of it too, now that everything is cleaned up.
        // SAFETY: restoring the default action and raising it on ourselves (or on our
        // process group, replaying a terminal's Ctrl-C the command's group received).
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            if DIE_WITH_GROUP.load(std::sync::atomic::Ordering::SeqCst) {
                libc::killpg(libc::getpgrp(), signal);
            }
            libc::raise(signal);
        }
    }
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Prints clap's `--help` or `--version` text (with clap's colours on a terminal) through
/// the one printing path, [`exit::emit`]: 0, also when a reader left after reading some
/// (`| head -1`), or 74 when it could not be delivered, as for any result.
fn print_help(text: &clap::Error) -> i32 {
    use std::io::IsTerminal as _;
    let styled = text.render();
    let rendered = if std::io::stdout().is_terminal() {
        styled.ansi().to_string()
    } else {
        styled.to_string()
    };
    exit::emit(&rendered)
}

/// The signal dlock should die of once it has cleaned up (0: none).
static DIE_BY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Whether the signal is replayed to dlock's whole process group.
static DIE_WITH_GROUP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that dlock ends because of `signal` (the command died of it, or it
/// interrupted a wait); `with_group` replays it to dlock's process group (a terminal's
/// signal that only the command's group received).
pub fn die_by(signal: i32, with_group: bool) {
    DIE_BY.store(signal, std::sync::atomic::Ordering::SeqCst);
    DIE_WITH_GROUP.store(with_group, std::sync::atomic::Ordering::SeqCst);
}

/// Stderr for the logs, write errors dropped: tracing-subscriber reports a failed write
/// with std's `eprintln!`, which panics (exit 101) on the same closed or broken stderr, and a
/// log line nobody can read must not change the exit code.
struct QuietStderr;

impl std::io::Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Logs go to stderr: warnings by default (e.g. a wait retrying against a Redis that went
/// away), errors only with -q, more with -v; RUST_LOG overrides.
fn init_logging(cli: &Cli) {
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, _) => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| QuietStderr)
        // Colours only for a terminal: cron mail and log files get plain text.
        // SAFETY: isatty only queries the descriptor.
        .with_ansi(unsafe { libc::isatty(2) == 1 })
        .with_target(false)
        .try_init();
}

/// Prints an error with what to do about it, and returns its exit code.
fn report(err: &dlock::Error, cli: &Cli) -> i32 {
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
    let list = |urls: &[String]| {
        urls.iter()
            .map(|url| dlock::redact_url(url))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let permits =
        kind_of(&cli.command).and_then(|kind| Some((kind.permits?, kind.weight.take.unwrap_or(1))));
    match (err, permits) {
        (dlock::Error::Connection(why), _) => {
            let at = match cli.topology {
                // bench --spawn's private server is not the one --redis names.
                _ if matches!(&cli.command, Command::Bench(args) if args.spawn) => String::new(),
                Topology::SingleNode => {
                    format!(" at {}", list(&cli.redis[..cli.redis.len().min(1)]))
                }
                Topology::Redlock => format!(" at the masters {}", list(&cli.redis)),
                Topology::Cluster => format!(" through the cluster nodes {}", list(&cli.cluster)),
                Topology::Sentinel => format!(" through the sentinels {}", list(&cli.sentinel)),
            };
            format!("cannot reach Redis{at}: {why}")
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

/// What keeps a semaphore of N `permits` busy for a request of `take` of them, in words.
fn all_held((permits, take): (u64, u64)) -> String {
    match (permits, take) {
        (1, _) => "its one permit is not free for it (held, or a waiter ahead in line comes first)".into(),
        (n, 1) => format!(
            "none of its {n} permits is free for it (all held, or waiters ahead in line come first)"
        ),
        (n, k) => format!(
            "fewer than {k} of its {n} permits are free for it (held, or waiters ahead in line come first)"
        ),
    }
}

/// The kind flags of a command that takes them.
fn kind_of(command: &Command) -> Option<&KindArgs> {
    match command {
        Command::Run(args) => Some(&args.kind),
        Command::Acquire { kind, .. }
        | Command::Release { kind, .. }
        | Command::Extend { kind, .. } => Some(kind),
        Command::Guarded(args) => Some(&args.kind),
        _ => None,
    }
}

/// The exit code of an error and the hint printed with it, for the command `cli` runs.
fn diagnose(err: &dlock::Error, cli: &Cli) -> (i32, &'static str) {
    let (mut code, mut hint) = exit::classify(err);
    let by_token = matches!(
        cli.command,
        Command::Release { force: false, .. } | Command::Extend { .. } | Command::Guarded(_)
    );
    if matches!(cli.command, Command::Guarded(_)) && matches!(err, dlock::Error::Refused { .. }) {
        hint = "Redis refused the command (its words above): a data key of another type, a value that is not a number, wrong arguments for the command, or the ACL or maxmemory; the hold is untouched";
    }
    if by_token && matches!(err, dlock::Error::WrongType { .. }) {
        hint = match cli.command {
            // `guarded` does not look up the kind the key holds.
            Command::Guarded(_) => "the name holds another kind of lock: pass the kind flag the token was acquired with (--fair, --read, --write or --permits N)",
            _ => "the name holds another kind of lock than the flag says: pass the kind flag the token was acquired with, or none (release and extend find the kind the key holds)",
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
    if busy && kind_of(&cli.command).is_some_and(|kind| kind.permits.is_some()) {
        hint = "the permits are taken, or waiters ahead in line come first; wait longer with --wait, or try again later";
    }
    if busy {
        if let Some(conflict) = conflict_exit_code(cli) {
            code = conflict as i32;
        }
    }
    (code, hint)
}

fn conflict_exit_code(cli: &Cli) -> Option<u8> {
    match &cli.command {
        Command::Run(args) => args.lease.conflict_exit_code,
        Command::Acquire { lease, .. } => lease.conflict_exit_code,
        _ => None,
    }
}

/// Everything that can be checked without Redis.
fn check(cli: &Cli) -> dlock::Result<()> {
    let name = |name: &str| dlock::check_name(&cli.prefix, name);
    if let Some(replication) = cli.replication() {
        // Also where it is ignored: a bad value in DLOCK_REPLICAS is better found at once.
        replication.check()?;
    }
    match &cli.command {
        Command::Run(args) => {
            name(&args.name)?;
            for also in &args.also {
                name(also)?;
            }
            args.kind.check()?;
            args.lease.options(cli.replication())?;
            run::check(args)
        }
        Command::Elect(elect) => {
            if elect.value.chars().any(char::is_control) {
                return Err(dlock::Error::InvalidArgument(
                    "--value has a control character (a newline?); `dlock leader` prints it on one line: use printable characters".into(),
                ));
            }
            let args = elect.run_args();
            name(&args.name)?;
            args.lease.options(cli.replication())?;
            run::check(&args)
        }
        Command::Leader(args) => name(&args.name),
        Command::Acquire {
            name: n,
            lease,
            kind,
            ..
        } => {
            name(n)?;
            kind.check()?;
            lease.options(cli.replication()).map(drop)
        }
        Command::Release {
            name: n,
            kind,
            force,
            token,
        } => {
            name(n)?;
            check_token(token.as_deref())?;
            if *force && (kind.fair || kind.read || kind.write || kind.permits.is_some()) {
                return Err(dlock::Error::InvalidArgument(
                    "--force releases whatever holds the name; give no kind flag with it".into(),
                ));
            }
            kind.check()
        }
        Command::Extend {
            name: n,
            kind,
            ttl,
            token,
            lock_delay,
        } => {
            name(n)?;
            check_token(Some(token))?;
            kind.check()?;
            // --ttl was checked against its range while parsing.
            hold::extend_options(*ttl, *lock_delay, cli.replication()).map(drop)
        }
        Command::Inspect(args) => args.check(&cli.prefix),
        Command::Guarded(args) if args.commands => Ok(()),
        Command::Guarded(args) => {
            name(args.name.as_deref().unwrap_or_default())?;
            check_token(args.token.as_deref())?;
            args.kind.check()?;
            args.batch().check()
        }
        Command::Bench(args) => {
            if cli.replicas.is_some() {
                return Err(dlock::Error::InvalidArgument(
                    "bench measures locks without replica acknowledgement (its raw baseline has no WAIT); leave out --replicas (and unset DLOCK_REPLICAS)".into(),
                ));
            }
            args.check()
        }
        Command::WatchGroup { .. } | Command::Completions { .. } | Command::Man { .. } => Ok(()),
    }
}

/// A token from `dlock acquire`: never empty, no whitespace or control characters.
fn check_token(token: Option<&str>) -> dlock::Result<()> {
    match token {
        Some(t) if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err(dlock::Error::InvalidArgument(format!(
                "{t:?} is not a lock token; pass the TOKEN printed by `dlock acquire`"
            )))
        }
        _ => Ok(()),
    }
}

/// What `dlock run` processes show as the holder in `dlock inspect`: host, pid, start.
fn holder_label() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most the buffer's length.
    let host = if unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0 {
        let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
        String::from_utf8_lossy(&buffer[..end])
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect()
    } else {
        "unknown".to_string()
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("dlock@{host}:{}:{started}", std::process::id())
}

async fn connect(cli: &Cli, url: &str) -> dlock::Result<Client> {
    builder(cli, url)?.connect().await
}

/// The client configuration for the deployment `cli` names (for Redlock: of the one
/// master `url`), ready to connect.
fn builder(cli: &Cli, url: &str) -> dlock::Result<dlock::ClientBuilder> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            dlock::Error::InvalidArgument(format!("cannot read {}: {e}", path.display()))
        })
    };
    let builder = match cli.topology {
        Topology::SingleNode | Topology::Redlock => Client::builder(url),
        Topology::Cluster => Client::cluster_builder(cli.cluster.iter().cloned()),
        Topology::Sentinel => Client::sentinel_builder(
            cli.sentinel.iter().cloned(),
            cli.service.as_deref().unwrap_or_default(),
        ),
    };
    let mut builder = builder
        .prefix(cli.prefix.clone())
        .holder_label(holder_label());
    if let Some(ca) = &cli.tls_ca {
        builder = builder.tls_root_certificate(read(ca)?);
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        builder = builder.tls_client_certificate(read(cert)?, read(key)?);
    }
    if let Some(timeout) = cli.replica_timeout {
        // A request with a WAIT may take the replica timeout: the response timeout must
        // leave it room (the library refuses a WAIT it would cut off).
        let room = timeout + Duration::from_secs(1);
        let room = room.clamp(dlock::DEFAULT_RESPONSE_TIMEOUT, dlock::MAX_TIMEOUT);
        builder = builder.response_timeout(room);
    }
    Ok(builder)
}

/// The Redlock over the masters of `--redis`: connected once a majority answers.
async fn connect_redlock(cli: &Cli) -> dlock::Result<Redlock> {
    redlock_builder(cli)?.connect().await
}

/// The masters of `--redis`, each master's client with the settings one --redis server
/// would have (prefix, holder label, TLS).
fn redlock_builder(cli: &Cli) -> dlock::Result<dlock::RedlockBuilder> {
    Ok(Client::redlock_builder(cli.redis.iter().cloned())
        .node_settings(builder(cli, &cli.redis[0])?))
}

/// For a command whose output is the point, what would be lost with stdout closed and
/// what to do: checked before anything is done (Rust's stdout drops writes to a closed
/// descriptor silently).
fn needs_stdout(command: &Command) -> Option<(&'static str, &'static str)> {
    match command {
        // The token is the only handle on the lock: with nowhere to print it, take nothing.
        Command::Acquire { .. } => Some((
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
        Command::Release { force: true, .. } => Some((
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

async fn execute(cli: &Cli) -> dlock::Result<i32> {
    if let Some((what, hint)) = needs_stdout(&cli.command) {
        if !exit::stdout_is_open() {
            eprintln!("dlock: standard output is closed: nowhere to print {what}\n  hint: {hint}");
            return Ok(exit::IO_ERROR);
        }
    }
    let interrupts = match cli.command {
        Command::Bench(_) => Some(bench::Interrupts::catch()?),
        _ => None,
    };
    // `bench --spawn` measures private servers of its own: the first for every scenario,
    // all of them for redlock.
    let spawned = match &cli.command {
        Command::Bench(args) if args.spawn => {
            match bench::PrivateServer::start_many(bench::REDLOCK_MASTERS) {
                Ok(servers) => servers,
                Err(why) => {
                    eprintln!("dlock: {why}\n  hint: install redis-server (Debian package redis-server; ./scripts/ensure-redis.sh does it), or bench an existing server with --redis URL");
                    return Ok(exit::UNAVAILABLE);
                }
            }
        }
        _ => Vec::new(),
    };
    let spawned_urls: Vec<String> = spawned.iter().map(bench::PrivateServer::url).collect();
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
    let url = spawned_urls
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
        _ => spawned_urls,
    };
    let outcome = dispatch(&locks, cli, &target, masters, interrupts).await;
    // Whatever is still held (an error path's guard, a cancelled wait's queue place) is
    // given back before exit: the runtime's shutdown would not wait for it.
    locks.shutdown().await;
    outcome
}

async fn dispatch(
    locks: &Locks,
    cli: &Cli,
    target: &bench::Target,
    masters: Vec<String>,
    interrupts: Option<bench::Interrupts>,
) -> dlock::Result<i32> {
    let client = match locks {
        Locks::Client(client) => Some(client),
        Locks::Redlock(_) => None,
    };
    match &cli.command {
        Command::Run(args) => {
            let mut args = args.clone();
            args.schedule.quiet = cli.quiet;
            run::run(locks, args, cli.replication(), None).await
        }
        Command::Elect(args) => {
            // Refused with several masters before connecting (see redlock_usage).
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
            run::run(locks, run_args, cli.replication(), Some(leading)).await
        }
        Command::Leader(args) => match client {
            Some(client) => elect::leader(client, args).await,
            None => Err(dlock::Error::InvalidArgument(
                "leader needs one server".into(),
            )),
        },
        Command::Acquire {
            name,
            lease,
            kind,
            json,
        } => acquire(locks, name, lease, kind, *json, cli.replication()).await,
        Command::Bench(args) => {
            let redlock_masters = masters.clone();
            let work = bench::bench(locks, target, masters, args.clone());
            match interrupts {
                Some(interrupts) => {
                    let outcome = bench::until_signal(work, interrupts).await;
                    if matches!(outcome, Ok(code) if code > 128) {
                        // Interrupted mid-scenario: its own clean-up did not run.
                        bench::remove_redlock_keys(&redlock_masters, locks.prefix()).await;
                    }
                    outcome
                }
                None => work.await,
            }
        }
        Command::Inspect(args) => match client {
            Some(client) => inspect::inspect(inspect::Scope::Client(client), args).await,
            // Redlock's inspect never gets here (see execute).
            None => Err(dlock::Error::InvalidArgument(
                "inspect over several masters goes through each master's own client".into(),
            )),
        },
        Command::Release {
            name, force: true, ..
        } => {
            // Refused with several masters before connecting (see redlock_usage).
            let Some(client) = client else {
                return Err(dlock::Error::InvalidArgument(
                    "release --force cannot be used with several --redis URLs (Redlock) yet".into(),
                ));
            };
            match client.force_release(name).await? {
                Some(fence) => {
                    eprintln!("dlock: released {name:?} by force; new fencing token {fence}");
                    return Ok(exit::emit(&format!("{fence}\n")));
                }
                None => eprintln!("dlock: {name:?} was not held; nothing to release"),
            }
            Ok(exit::OK)
        }
        Command::Release {
            name, token, kind, ..
        } => {
            let token = token.as_deref().unwrap_or_default();
            hold::release(locks, kind, name, token).await?;
            Ok(exit::OK)
        }
        Command::Extend {
            name,
            token,
            kind,
            ttl,
            lock_delay,
        } => {
            let delay = *lock_delay;
            hold::extend(locks, kind, name, token, *ttl, delay, cli.replication()).await?;
            Ok(exit::OK)
        }
        Command::Guarded(args) => guarded::guarded(locks, args).await,
        Command::WatchGroup { .. } | Command::Completions { .. } | Command::Man { .. } => {
            Ok(exit::OK)
        }
    }
}

async fn acquire(
    locks: &Locks,
    name: &str,
    lease: &LeaseArgs,
    kind: &KindArgs,
    json: bool,
    replication: Option<Replication>,
) -> dlock::Result<i32> {
    let mut signals = run::Forwarded::install().map_err(|e| {
        dlock::Error::InvalidArgument(format!("cannot install signal handlers: {e}"))
    })?;
    let guard = tokio::select! {
        hold = hold::take(locks, kind, name, lease.options(replication)?) => hold?,
        signal = signals.next() => {
            // One line: the interruption was asked for, so there is nothing to fix.
            eprintln!("dlock: interrupted while waiting for {name:?}; nothing is held");
            signals.exit_on_next(signal);
            die_by(signal, false);
            return Ok(128 + signal);
        }
    };
    let (guard, fence) = hold::fenced(guard).await?;
    let token = guard.token().to_string();
    let line = if json {
        serde_json::json!({
            "name": name,
            "key": format!("{}{name}", locks.prefix()),
            "kind": kind.describe(),
            "token": token,
            "fence": fence,
            "ttl_ms": lease.ttl.as_millis() as u64,
            "weight": kind.weight.take.unwrap_or(1),
        })
        .to_string()
    } else {
        format!("{token} {fence}")
    };
    if let Err(unwritten) = exit::try_write(&format!("{line}\n")) {
        let err = match unwritten {
            exit::Unwritten::Failed(why) => why,
            exit::Unwritten::ReaderLeft => "its reader went away".to_string(),
        };
        // The caller never got the token: give the lock back rather than strand it.
        match guard.unlock().await {
            Ok(()) => eprintln!("dlock: cannot print the token ({err}); the lock was released again\n  hint: read dlock acquire's output, e.g. read TOKEN FENCE < <(dlock acquire NAME)"),
            Err(release) => eprintln!("dlock: cannot print the token ({err}), and releasing the lock failed too ({release}); it frees when its lease ends\n  hint: read dlock acquire's output, e.g. read TOKEN FENCE < <(dlock acquire NAME)"),
        }
        return Ok(exit::IO_ERROR);
    }
    drop(guard.into_token());
    Ok(exit::OK)
}

/// `dlock man`: dlock(1) on stdout, or with `out_dir` every page (dlock.1 and one per
/// visible subcommand) written there. Returns the exit code.
fn man_pages(out_dir: Option<&std::path::Path>) -> i32 {
    let command = <Cli as clap::CommandFactory>::command();
    let Some(dir) = out_dir else {
        let mut page = Vec::new();
        if let Err(err) = clap_mangen::Man::new(command).render(&mut page) {
            eprintln!("dlock: cannot render the manual page: {err}");
            return exit::IO_ERROR;
        }
        return exit::emit(&String::from_utf8_lossy(&page));
    };
    match clap_mangen::generate_to(command, dir) {
        Ok(()) => exit::OK,
        Err(err) => {
            eprintln!(
                "dlock: cannot write the manual pages into {}: {err}\n  hint: the directory must exist and be writable",
                dir.display()
            );
            exit::IO_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    fn split(values: &[&str]) -> Vec<String> {
        super::split_urls(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
    }

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
            let Ok(cli) = super::parse_from(argv) else {
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
        let Ok(cli) = super::parse_from(["dlock", "acquire", "job"]) else {
            panic!("acquire parses");
        };
        assert!(super::diagnose(&script, &cli)
            .1
            .contains("treat the lock as lost"));
    }

    #[test]
    fn several_redis_urls_are_split_where_a_new_url_begins() {
        assert_eq!(split(&["redis://a:1"]), ["redis://a:1"]);
        assert_eq!(
            split(&["redis://a:1,rediss://b:2, redis://c:3,"]),
            ["redis://a:1", "rediss://b:2", "redis://c:3"]
        );
        assert_eq!(
            split(&["redis://a:1", "redis://b:2,redis://c:3"]),
            ["redis://a:1", "redis://b:2", "redis://c:3"]
        );
        // A comma inside a password does not start a URL.
        assert_eq!(
            split(&["redis://u:pa,ss@a:1,redis://b:2"]),
            ["redis://u:pa,ss@a:1", "redis://b:2"]
        );
        // Blanks alone stay, for the URL check to refuse.
        assert_eq!(split(&[""]), [""]);
    }

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
            if let Ok(cli) = super::parse_from(argv) {
                let _ = super::check(&cli);
            }
        }
    }
}
