//! The command line: the global options (which Redis deployment, TLS, prefix, replicas,
//! logging), the subcommands (each one's arguments live in its `cmd` module), and the
//! usage checks that need the whole line (one deployment at a time, what Redlock cannot
//! combine with).

mod topology;

use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};

use crate::cmd::{acquire, bench, docs, elect, extend, guarded, inspect, release, run};
use crate::hold::{self, KindArgs};
use crate::lease::{LeaseArgs, Replication};
use crate::{duration, exit};
use topology::split_urls;
pub use topology::Topology;

/// The heading of the options every subcommand that talks to Redis takes: its `--help`
/// lists its own options first, then these, instead of interleaving them.
const GLOBAL: &str = "Global options (before or after the subcommand)";

#[derive(Parser, Debug)]
#[command(
    name = "dlock",
    version,
    about = "Distributed locks on Redis for shell scripts and cron jobs",
    after_help = exit::HELP,
    // Help wraps at the terminal's width (COLUMNS when it is no terminal, else 100), but
    // no wider than 100 columns: long lines are hard to read on a wide terminal.
    max_term_width = 100
)]
pub struct Cli {
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
    pub redis: Vec<String>,

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
    pub cluster: Vec<String>,

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
    pub sentinel: Vec<String>,

    /// With --sentinel: the name the sentinels know the master by (`sentinel monitor NAME
    /// ...`)
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_SERVICE", hide_env_values = true, value_name = "NAME")]
    pub service: Option<String>,

    /// Grant (run, acquire), extend and renew a lock only once N replicas have the write
    /// (Redis WAIT); when fewer acknowledge within --replica-timeout the lock is given back
    /// and dlock exits 69. Narrows, does not close, the window in which a failover to a
    /// replica that missed the grant hands the lock out twice. release and inspect ignore
    /// it; bench refuses it
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_REPLICAS", hide_env_values = true, value_name = "N")]
    pub replicas: Option<u32>,

    /// With --replicas: how long to wait for the replicas' acknowledgement; must be shorter
    /// than the lease (--ttl) [default: 1s, or a third of the lease when that is shorter]
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_REPLICA_TIMEOUT",
        hide_env_values = true,
        value_name = "DUR",
        value_parser = duration::parse,
        requires = "replicas"
    )]
    pub replica_timeout: Option<Duration>,

    /// Which deployment the flags name (settled by `parse_from`).
    #[arg(skip)]
    pub topology: Topology,

    /// Prefix put in front of every lock name to form its Redis key
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_PREFIX", hide_env_values = true, default_value = "")]
    pub prefix: String,

    /// For rediss:// URLs: PEM file of the CA to trust (default: the system's roots)
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "DLOCK_TLS_CA", hide_env_values = true, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// For mutual TLS: PEM file of the client certificate (with --tls-key)
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_TLS_CERT",
        hide_env_values = true,
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// For mutual TLS: PEM file of the client key (with --tls-cert)
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "DLOCK_TLS_KEY",
        hide_env_values = true,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// More log output on stderr (-v: info, -vv: debug); RUST_LOG overrides
    #[arg(short, long, global = true,
        help_heading = GLOBAL, action = ArgAction::Count)]
    pub verbose: u8,

    /// Quiet: say nothing when the lock is busy (cron mails nothing), log only errors
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command while holding the lock; exit with the command's exit code
    #[command(after_help = run::help())]
    Run(run::RunArgs),
    /// Take the lock and leave it held for its lease; print "TOKEN FENCE"
    #[command(after_help = exit::HELP)]
    Acquire(acquire::AcquireArgs),
    /// Release a hold by its TOKEN (as printed by `dlock acquire`), or by force
    #[command(after_help = exit::HELP)]
    Release(release::ReleaseArgs),
    /// Reset the lease of a hold by its TOKEN
    #[command(after_help = exit::HELP)]
    Extend(extend::ExtendArgs),
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
    /// ~/.local/share/bash-completion/completions/dlock` (zsh and fish: docs/cli.md)
    Completions(docs::CompletionsArgs),
    /// Print the manual page dlock(1) on stdout (`dlock man | man -l -`), or with
    /// --out-dir write it and one page per subcommand (dlock-run.1, ...) into DIR
    Man(docs::ManArgs),
    /// Internal: the watchdog of `run` that kills the command's process group when dlock dies
    /// or stops renewing (--terminal: dlock's process group, given the terminal back;
    /// --deadline: by when the command must be gone unless dlock renews, CLOCK_MONOTONIC ns)
    #[command(name = "__watch-group", hide = true)]
    WatchGroup(crate::tree::WatchGroupArgs),
}

impl Command {
    /// The kind flags of a command that takes them.
    pub fn kind(&self) -> Option<&KindArgs> {
        match self {
            Command::Run(args) => Some(&args.kind),
            Command::Acquire(args) => Some(&args.kind),
            Command::Release(args) => Some(&args.kind),
            Command::Extend(args) => Some(&args.kind),
            Command::Guarded(args) => Some(&args.kind),
            _ => None,
        }
    }

    /// The lease and wait flags of a command that takes a hold (`-E` is among them).
    pub fn lease(&self) -> Option<&LeaseArgs> {
        match self {
            Command::Run(args) => Some(&args.lease),
            Command::Acquire(args) => Some(&args.lease),
            _ => None,
        }
    }
}

impl Cli {
    /// `--replicas` with its timeout, when given.
    pub fn replication(&self) -> Option<Replication> {
        self.replicas
            .map(|count| Replication::new(count, self.replica_timeout))
    }
}

/// The command line's definition: the derived one, with the global options hidden from
/// the subcommands that never connect (`completions`, `man`), whose help would otherwise
/// list a dozen Redis options they ignore.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let command = Cli::command();
    let globals: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.get_help_heading() == Some(GLOBAL))
        .map(|arg| arg.clone().hide(true))
        .collect();
    // A subcommand that has an argument of a global's id keeps its own when clap builds
    // the command: here, the same argument hidden.
    command.mut_subcommands(|sub| match sub.get_name() {
        "completions" | "man" => globals.iter().cloned().fold(sub, clap::Command::arg),
        _ => sub,
    })
}

/// The hint of a usage error clap found.
pub const USAGE_HINT: &str =
    "fix the arguments; `dlock --help` and `dlock <COMMAND> --help` list them";

/// A usage error found after clap parsed the arguments, with its hint.
pub struct Usage {
    /// clap's error, printed as clap prints it.
    pub error: clap::Error,
    /// What to do about it.
    pub hint: &'static str,
}

impl From<clap::Error> for Usage {
    fn from(error: clap::Error) -> Usage {
        Usage {
            error,
            hint: USAGE_HINT,
        }
    }
}

/// clap's error for a missing subcommand, naming only the subcommands `--help` lists
/// (clap's own list names the hidden watchdog's too; `help` goes without saying).
fn missing_subcommand(error: clap::Error) -> clap::Error {
    use clap::error::ErrorKind;
    if error.kind() != ErrorKind::MissingSubcommand {
        return error;
    }
    let mut cli = command();
    let visible: Vec<String> = docs::visible_subcommands(&cli)
        .map(|sub| sub.get_name().to_string())
        .collect();
    let message = format!("a subcommand is required: {}", visible.join(", "));
    cli.error(ErrorKind::MissingSubcommand, message)
}

/// Parses the arguments and settles which deployment they name. A flag on the command
/// line beats another deployment's environment variable (DLOCK_REDIS in a profile does
/// not stand in the way of `--cluster`); two on the command line, or two environment
/// variables with neither flag given, are a usage error.
pub fn parse_from<I, T>(args: I) -> Result<Cli, Usage>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::parser::ValueSource;
    use clap::FromArgMatches;
    let matches = command()
        .try_get_matches_from(args)
        .map_err(missing_subcommand)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.redis = split_urls(&cli.redis);
    let usage = |message: String, hint: &'static str| Usage {
        error: command().error(clap::error::ErrorKind::ArgumentConflict, message),
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
    if let Some((flag, state)) = cli.command.kind().and_then(KindArgs::single_master_only) {
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
    if let Command::Release(release::ReleaseArgs { force: true, .. }) = cli.command {
        return Err((
            "release --force cannot be used with several --redis URLs (Redlock) yet".into(),
            "release by the TOKEN that dlock acquire printed, or force it on every master in turn with one --redis URL each (each draws a new fencing token there, so the next grant's fence is larger than the evicted holder's)",
        ));
    }
    Ok(())
}
