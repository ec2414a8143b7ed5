//! `dlock-torture`: dlock's fault-injection safety harness. Client processes (through the
//! library, async and blocking, and through `dlock run`) contend for locks on real
//! redis-servers (one, a master with a replica, or Redlock's independent masters) while
//! the harness pauses and kills them, pauses and restarts servers, delays their replies,
//! or cuts a Sentinel master off from all but one client; a checker then reads what
//! every process believed and did.
//! See docs/safety.md.

mod catalogue;
mod check;
mod client;
mod config;
mod fault;
mod judge;
mod record;
mod run;
mod servers;
mod store;
mod verdict;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use catalogue::{Expect, SCENARIOS};
use config::Config;
use judge::Outcome;

const AFTER_HELP: &str = "\
EXPECTATIONS:
    safe       no two holds believed at once beyond the lock's limit (one; three for the
               semaphore of three), and fences only increase in grant order
    violation  a negative control: the checker must see the double grant, or the harness
               itself would be blind; fences must still only increase (the clock floor),
               except in sentinel-partition (two masters grant at once);
               redlock-clock-offset-no-raise must instead see fences go back (its clients
               skip the Redlock fence raise) and no double grant
    pending    needs a feature that is not built yet (ok: null in --json)
    skipped    it runs none of the --primitive kinds: redlock runs only in the redlock-*
               scenarios, read and reentrant only in rwlock-readers (with write) and
               reentrant, every other kind in the others (ok: null)

EXIT CODES:
    0    every scenario met its expectation (pending and skipped ones aside), or the
         reader of the output went away (`| head`)
    1    a scenario did not: its problems are printed
    64   invalid arguments
    69   the dlock binary or redis-server is missing
    74   the results could not be written
    128+N  interrupted by signal N (INT, TERM, HUP); everything it started is stopped";

#[derive(Parser)]
#[command(name = "dlock-torture", version, about = "Fault-injection safety harness for dlock", after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    /// A small configuration of every scenario: 2 fault rounds each (about 10 minutes in
    /// all on 2 busy cores, most of it the failover scenarios' 6 s leases and the
    /// partition scenarios' partitions of 7 s or more)
    #[arg(long)]
    quick: bool,
    /// Fault rounds per scenario (default 2 with --quick, else 15)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: Option<u32>,
    /// Run only these scenarios (repeatable)
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<String>,
    /// One JSON object per scenario instead of a table
    #[arg(long)]
    json: bool,
    /// The table in Markdown (as in docs/safety.md)
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
    /// List the scenarios with what each proves, and exit
    #[arg(long)]
    list: bool,
    /// Run only these lock kinds (repeatable; default: all). `redlock` runs only in the
    /// redlock-* scenarios, the others only outside them
    #[arg(long = "primitive", value_enum, value_name = "KIND")]
    primitives: Vec<client::Primitive>,
    /// Keep each scenario's records and the clients' stderr, and print where
    #[arg(long)]
    keep: bool,
    /// The dlock binary the CLI clients run (default: the one beside this binary)
    #[arg(long, value_name = "PATH")]
    dlock: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Role {
    /// (internal) A library client process
    #[command(hide = true)]
    Client(client::ClientArgs),
    /// (internal) One hold's work under `dlock run`
    #[command(hide = true)]
    Writer(client::WriterArgs),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let usage = err.use_stderr();
            let _ = err.print();
            if usage {
                eprintln!("  hint: fix the arguments; dlock-torture --help lists them");
            }
            std::process::exit(if usage { 64 } else { 0 });
        }
    };
    let code = match cli.role {
        Some(Role::Client(args)) => client::run_library(args),
        Some(Role::Writer(args)) => client::run_writer(args),
        None => harness(cli),
    };
    std::process::exit(code);
}

fn fail(code: i32, what: &str, hint: &str) -> i32 {
    eprintln!("dlock-torture: {what}\nhint: {hint}");
    code
}

fn harness(cli: Cli) -> i32 {
    if cli.list {
        for scenario in SCENARIOS {
            let expect = match scenario.expect {
                Expect::Safe => "safe",
                Expect::Violation => "violation",
            };
            let pending = scenario
                .pending
                .map_or(String::new(), |needs| format!(" [pending: needs {needs}]"));
            let line = format!(
                "{:<30} {expect:<10} {}{pending}\n",
                scenario.name, scenario.about
            );
            if let Some(code) = write_out(&line) {
                return code;
            }
        }
        return 0;
    }
    for name in &cli.scenarios {
        if !SCENARIOS.iter().any(|s| s.name == name) {
            let names: Vec<_> = SCENARIOS.iter().map(|s| s.name).collect();
            return fail(
                64,
                &format!("no scenario named {name:?}"),
                &format!("choose from {}", names.join(", ")),
            );
        }
    }
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(err) => {
            return fail(
                69,
                &format!("cannot find this binary: {err}"),
                "run it by its path",
            )
        }
    };
    let dlock = cli
        .dlock
        .clone()
        .unwrap_or_else(|| me.with_file_name("dlock"));
    if !dlock.is_file() {
        return fail(
            69,
            &format!("the dlock binary is not at {}", dlock.display()),
            "build it beside this one (cargo build -p dlock-redis-cli -p dlock-torture), or pass --dlock PATH",
        );
    }
    if which_redis_server().is_none() {
        return fail(
            69,
            "redis-server is not installed",
            "./scripts/ensure-redis.sh installs it (Debian package redis-server)",
        );
    }
    let config = Config {
        rounds: cli.rounds.unwrap_or(if cli.quick { 2 } else { 15 }),
        ttl: Duration::from_secs(1),
        dlock,
        me,
        primitives: if cli.primitives.is_empty() {
            client::Primitive::ALL.to_vec()
        } else {
            cli.primitives.clone()
        },
        keep: cli.keep,
    };
    let chosen: Vec<_> = SCENARIOS
        .iter()
        .filter(|s| cli.scenarios.is_empty() || cli.scenarios.iter().any(|n| n == s.name))
        .collect();
    // A filter that leaves every chosen scenario without a kind would test nothing and
    // still exit 0.
    if chosen
        .iter()
        .all(|s| s.pending.is_some() || s.kinds_of(&config.primitives).is_empty())
    {
        return fail(
            64,
            "none of the chosen scenarios runs any of the chosen lock kinds",
            "redlock runs only in the redlock-* scenarios, read only with write in rwlock-readers, reentrant only in reentrant, every other kind in the others",
        );
    }
    // The clock scenarios need their tools before anything starts (a server that cannot
    // start under libfaketime would hang the run, then panic).
    let clocked = chosen
        .iter()
        .find(|s| s.moves_clocks() && !s.kinds_of(&config.primitives).is_empty());
    if let Some(clocked) = clocked {
        if let Err(why) = fault::ClockTools::find() {
            return fail(
                69,
                &format!("{} {why}", clocked.name),
                "./scripts/torture.sh installs both (Debian's libfaketime, Valkey from PyPI)",
            );
        }
    }
    run::catch_interrupts();
    let mut outcomes = Vec::new();
    // On a terminal, a bar per scenario with its round; otherwise a plain line per
    // scenario (indicatif draws nothing where stderr is not a terminal).
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    for (index, scenario) in chosen.iter().enumerate() {
        let title = format!("[{}/{}] {}", index + 1, chosen.len(), scenario.name);
        let progress = indicatif::ProgressBar::new(1);
        if terminal {
            progress.set_style(
                indicatif::ProgressStyle::with_template(&format!(
                    "{title} {{bar:20}} {{pos}}/{{len}} {{msg}} {{elapsed}}"
                ))
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            progress.enable_steady_tick(std::time::Duration::from_secs(1));
        } else {
            progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
            eprintln!("{title} ...");
        }
        let outcome = run::run(scenario, &config, &progress);
        progress.finish_and_clear();
        if terminal {
            let verdict = match outcome.ok {
                Some(true) => "ok",
                Some(false) => "FAILED",
                None => "not judged",
            };
            eprintln!("{title}: {verdict} ({:.0} s)", outcome.seconds);
        }
        if let Some(signal) = run::interrupted() {
            // run() has already killed its clients and stopped its servers.
            eprintln!("dlock-torture: interrupted by signal {signal}; every process it started is stopped");
            return 128 + signal;
        }
        if let Some(why) = &outcome.skipped {
            eprintln!("    {}: skipped: {why}", scenario.name);
        }
        for problem in &outcome.problems {
            eprintln!("    {}: {problem}", scenario.name);
        }
        if cli.json {
            // Printed as each finishes, so a long soak shows progress.
            let line = serde_json::to_string(&outcome).expect("outcomes serialize") + "\n";
            if let Some(code) = write_out(&line) {
                return code;
            }
        }
        outcomes.push(outcome);
    }
    if !cli.json {
        if let Some(code) = write_out(&table(&outcomes, cli.markdown)) {
            return code;
        }
    }
    if outcomes.iter().all(|o| o.ok != Some(false)) {
        0
    } else {
        1
    }
}

/// Writes to stdout. `None` when written; otherwise the exit code: 0 when the reader went
/// away (`| head`: nobody wants more, so no more scenarios are run for it), 74 for any
/// other failure (a full disk, a closed stdout).
fn write_out(text: &str) -> Option<i32> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => None,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Some(0),
        Err(err) => {
            eprintln!(
                "dlock-torture: cannot write the results: {err}\nhint: check where stdout goes"
            );
            Some(74)
        }
    }
}

fn which_redis_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
}

/// The result table, plain or Markdown.
fn table(outcomes: &[Outcome], markdown: bool) -> String {
    let header = [
        "scenario",
        "expect",
        "ok",
        "acquisitions",
        "overlaps",
        "stale refused",
        "lost updates",
        "guarded refused",
        "guarded lost",
        "lost signals",
        "commands stopped",
        "fence regressions",
        "late write ms",
        "free ms",
    ];
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            let f = o.findings.clone().unwrap_or_default();
            let expect = match o.expect {
                Expect::Safe => "safe",
                Expect::Violation => "violation",
            };
            let ok = match o.ok {
                Some(true) => "ok".to_string(),
                Some(false) => "FAILED".to_string(),
                None => "pending".to_string(),
            };
            if o.skipped.is_some() {
                let mut row = vec![o.scenario.to_string(), expect.to_string(), "skipped".into()];
                row.extend(std::iter::repeat_n("-".to_string(), header.len() - 3));
                return row;
            }
            if o.pending.is_some() {
                let mut row = vec![o.scenario.to_string(), expect.to_string(), ok];
                row.extend(std::iter::repeat_n("-".to_string(), header.len() - 3));
                return row;
            }
            vec![
                o.scenario.to_string(),
                expect.to_string(),
                ok,
                f.acquisitions.to_string(),
                f.overlaps.to_string(),
                f.stale_rejected.to_string(),
                f.lost_updates.to_string(),
                f.guarded_refused.to_string(),
                f.guarded_lost_updates.to_string(),
                f.lost_signals.to_string(),
                f.commands_stopped.to_string(),
                f.fence_regressions.to_string(),
                format!("{:.0}", f.late_write_ms),
                f.max_free_ms
                    .map_or("-".to_string(), |ms| format!("{ms:.0}")),
            ]
        })
        .collect();
    let mut out = String::new();
    if markdown {
        out += &format!("| {} |\n", header.join(" | "));
        out += &format!("|{}\n", "---|".repeat(header.len()));
        for row in rows {
            out += &format!("| {} |\n", row.join(" | "));
        }
    } else {
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].len())
                    .chain([header[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
                + "\n"
        };
        out += &line(header.iter().map(|h| h.to_string()).collect());
        for row in rows {
            out += &line(row);
        }
    }
    out
}
