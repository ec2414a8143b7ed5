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

mod cli;
mod cmd;
mod connect;
mod dispatch;
mod duration;
mod exit;
mod hold;
mod holder;
mod lease;
mod report;
mod tree;

use std::process::ExitCode;
use std::time::Duration;

use cli::{parse_from, Cli, Command, Usage};
use report::report;

fn main() -> ExitCode {
    if std::env::args_os().len() <= 1 {
        // Nothing on the command line: the help on stderr and a usage error, as clap
        // answers when no DLOCK_* variable is set (one that is counts as an argument to
        // clap, which would then name a missing subcommand instead).
        // Written as `eprintln!` writes (a broken stderr changes no exit code).
        use std::io::{IsTerminal as _, Write as _};
        let help = cli::command().render_help();
        let text = if std::io::stderr().is_terminal() {
            help.ansi().to_string()
        } else {
            help.to_string()
        };
        let _ = write!(std::io::stderr(), "{text}");
        eprintln!("  hint: {}", cli::USAGE_HINT);
        return ExitCode::from(exit::USAGE as u8);
    }
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
    // Before logging, checks and Redis: the watchdog, the generated texts, a listing.
    let early = match &cli.command {
        Command::WatchGroup(args) => Some(args.run()),
        Command::Completions(args) => Some(args.run(cli::command())),
        Command::Man(args) => Some(args.run(cli::command())),
        Command::Guarded(args) if args.commands => Some(cmd::guarded::list_commands()),
        _ => None,
    };
    if let Some(code) = early {
        return ExitCode::from(code as u8);
    }
    init_logging(&cli);
    // Arguments are checked before any connection: a bad name is a usage error even
    // when Redis is down.
    if let Err(err) = dispatch::check(&cli) {
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
        match dispatch::execute(&cli).await {
            Ok(code) => code,
            Err(err) => report(&err, &cli),
        }
    });
    // Releases were awaited by the client's shutdown; nothing may hang the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    exit::die_now_if_asked();
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
    // The library's outcome events (a lost lock, a forced release) repeat what dlock
    // prints as its own line, and so do the redis crate's warnings about a node it could
    // not reach: shown from -v on, so that by default one line says it.
    let level = match cli.verbose {
        0 => format!("{level},{}=off,redis=error", dlock::OUTCOME_TARGET),
        _ => level.to_string(),
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
