//! `dlock-model check [--mutant NAME]`: model-checks dlock's lock protocols; exits 0 when
//! every property holds, 1 with a counterexample trace when one does not, 3 when a bug put
//! in with `--mutant` went uncaught within the bounds, 64 on a usage error.
//! `dlock-model mutants`: the names of the deliberate protocol bugs, one a line.
//! A reader that stops reading (`| head`) ends the program quietly with exit 0, as
//! the dlock CLI does; any other failure to write the output exits 74.

use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use dlock_model::mutant::Mutant;
use dlock_model::{
    election_models, force_models, guarded_models, models, multi_models, pair_models,
    redlock_models, Bounds, Verdict,
};
use stateright::{Checker, HasDiscoveries, Model};

/// Prints a line of output. A closed pipe (a reader that stopped: `| head`) ends the
/// program quietly with exit 0, as the dlock CLI does; any other write error exits 74.
macro_rules! say {
    ($($arg:tt)*) => {
        say(format_args!($($arg)*))
    };
}

fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(err) => {
            eprintln!("dlock-model: cannot write the output: {err}");
            std::process::exit(74);
        }
    }
}

#[derive(Parser)]
#[command(
    version,
    about = "Model checks of dlock's lock protocols",
    after_help = "Exit status: 0 every property holds (or the reader of the output stopped \
                  reading), 1 a property failed (with --mutant: the bug was caught), 3 with \
                  --mutant: the bug was not caught within the bounds, 64 a usage error (bad \
                  arguments, an unknown mutant, --only matching no model), 74 the output \
                  could not be written."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Checks every model: every interleaving within the bounds
    Check {
        /// Put this deliberate bug in (see `mutants`): the check must then fail
        #[arg(long, value_name = "NAME")]
        mutant: Option<String>,
        /// The clock's bound, in ticks (a lease is 2)
        #[arg(long, default_value_t = Bounds::default().max_time, value_parser = clap::value_parser!(u8).range(2..=12))]
        max_time: u8,
        /// Holds each client may be granted
        #[arg(long, default_value_t = Bounds::default().max_holds, value_parser = clap::value_parser!(u8).range(1..=4))]
        max_holds: u8,
        /// Only the models whose name contains this, in any case (e.g. rwlock, redlock)
        #[arg(long, value_name = "TEXT")]
        only: Option<String>,
    },
    /// Prints the names of the deliberate protocol bugs, one a line
    Mutants,
}

fn main() -> ExitCode {
    // Usage errors exit 64, as dlock-torture's and the CLI's do (clap's own is 2).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if err.use_stderr() => {
            let _ = err.print();
            return ExitCode::from(64);
        }
        Err(err) => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
    };
    match cli.command {
        Command::Mutants => {
            for mutant in Mutant::ALL {
                say!("{}", mutant.name());
            }
            ExitCode::SUCCESS
        }
        Command::Check {
            mutant,
            max_time,
            max_holds,
            only,
        } => {
            let mutants = match mutant.as_deref().map(|name| (name, Mutant::named(name))) {
                None => Vec::new(),
                Some((_, Some(mutant))) => vec![mutant],
                Some((name, None)) => {
                    eprintln!("error: no mutant named '{name}'; `dlock-model mutants` lists them");
                    return ExitCode::from(64);
                }
            };
            check(
                Bounds {
                    max_time,
                    max_holds,
                },
                &mutants,
                only.as_deref(),
            )
        }
    }
}

/// Checks each model; prints what was explored and every property's verdict.
fn check(bounds: Bounds, mutants: &[Mutant], only: Option<&str>) -> ExitCode {
    let only = only.map(str::to_lowercase);
    let chosen =
        |name: &str| (only.as_deref()).is_none_or(|text| name.to_lowercase().contains(text));
    let names: Vec<&str> = (models(bounds, mutants).iter().map(|m| m.name))
        .chain(redlock_models(bounds, mutants).iter().map(|m| m.name))
        .chain(guarded_models(bounds, mutants).iter().map(|m| m.name))
        .chain(election_models(bounds, mutants).iter().map(|m| m.name))
        .chain(force_models(bounds, mutants).iter().map(|m| m.name))
        .chain(pair_models(bounds, mutants).iter().map(|m| m.name))
        .chain(multi_models(bounds, mutants).iter().map(|m| m.name))
        .collect();
    if !names.iter().any(|name| chosen(name)) {
        eprintln!(
            "error: --only {} matches no model; the models are: {}",
            only.as_deref().unwrap_or_default(),
            names.join(", ")
        );
        return ExitCode::from(64);
    }
    // With a bug put in, the first violation is the answer: stop there.
    let mut run = Run {
        hunting: !mutants.is_empty(),
        failed: false,
        searched: 0,
    };
    for model in models(bounds, mutants) {
        let acts = mutants.iter().any(|m| model.kind.touched_by(*m));
        if chosen(model.name) && run.model(model.name, model, acts).is_break() {
            return ExitCode::FAILURE;
        }
    }
    for model in redlock_models(bounds, mutants) {
        let acts = mutants.iter().any(|m| model.touched_by(*m));
        if chosen(model.name) && run.model(model.name, model, acts).is_break() {
            return ExitCode::FAILURE;
        }
    }
    for model in guarded_models(bounds, mutants) {
        let acts = mutants.iter().any(|m| model.touched_by(*m));
        if chosen(model.name) && run.model(model.name, model, acts).is_break() {
            return ExitCode::FAILURE;
        }
    }
    for model in election_models(bounds, mutants) {
        let acts = mutants.iter().any(|m| model.touched_by(*m));
        if chosen(model.name) && run.model(model.name, model, acts).is_break() {
            return ExitCode::FAILURE;
        }
    }
    for model in force_models(bounds, mutants) {
        let acts = mutants.iter().any(|m| model.touched_by(*m));
        if chosen(model.name) && run.model(model.name, model, acts).is_break() {
            return ExitCode::FAILURE;
        }
    }
    for model in pair_models(bounds, mutants) {
        let acts = mutants.iter().any(|m| model.touched_by(*m));
        if chosen(model.name) && run.model(model.name, model, acts).is_break() {
            return ExitCode::FAILURE;
        }
    }
    for model in multi_models(bounds, mutants) {
        let acts = mutants.iter().any(|m| model.touched_by(*m));
        if chosen(model.name) && run.model(model.name, model, acts).is_break() {
            return ExitCode::FAILURE;
        }
    }
    let Run {
        hunting,
        failed,
        searched,
    } = run;
    if failed {
        return ExitCode::FAILURE;
    }
    if hunting {
        let names: Vec<&str> = mutants.iter().map(|m| m.name()).collect();
        if searched == 0 {
            eprintln!(
                "error: the bug {} acts in none of the chosen models: nothing was checked",
                names.join(", ")
            );
            return ExitCode::from(64);
        }
        eprintln!(
            "dlock-model: the bug {} was NOT caught within these bounds (--max-time, --max-holds)",
            names.join(", ")
        );
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

/// The models checked so far in one `check`.
struct Run {
    /// A bug is put in: the first violation is the answer.
    hunting: bool,
    failed: bool,
    searched: usize,
}

impl Run {
    /// Checks one chosen model, unless a bug is put in that acts in none of its
    /// transitions. Breaks once a hunted bug is shown: the other models need not be searched.
    fn model<M>(&mut self, name: &str, model: M, bug_acts_in_it: bool) -> ControlFlow<()>
    where
        M: Model + Clone + Send + Sync + 'static,
        M::State: std::fmt::Debug + std::hash::Hash + Clone + PartialEq + Send + Sync + 'static,
        M::Action: std::fmt::Debug + Clone + PartialEq + Send + Sync + 'static,
    {
        if self.hunting && !bug_acts_in_it {
            say!("{name}: skipped (the bug acts in none of its transitions)");
            return ControlFlow::Continue(());
        }
        self.searched += 1;
        self.failed |= !check_one(name, model, self.hunting);
        if self.hunting && self.failed {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// Checks one model; prints what was explored and every property's verdict (with a
/// counterexample for each that failed). True when every property held.
fn check_one<M>(name: &str, model: M, hunting: bool) -> bool
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: std::fmt::Debug + std::hash::Hash + Clone + PartialEq + Send + Sync + 'static,
    M::Action: std::fmt::Debug + Clone + PartialEq + Send + Sync + 'static,
{
    let started = Instant::now();
    let mut builder = model.clone().checker();
    if hunting {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    say!(
        "{name}: {} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    let mut all_hold = true;
    let stopped = Verdict::stopped(&model, |name| checker.discovery(name).is_some());
    for property in model.properties() {
        let discovery = checker.discovery(property.name);
        let verdict = Verdict::of(&property.expectation, discovery.is_some(), hunting, stopped);
        let holds = verdict.passed();
        say!("  {:<13} {}", verdict.label(), property.name);
        if !holds {
            all_hold = false;
            if let Some(path) = discovery {
                let steps = path.into_vec();
                say!(
                    "  counterexample ({} steps from the start):",
                    steps.len() - 1
                );
                for (number, (_, action)) in steps.iter().enumerate() {
                    if let Some(action) = action {
                        say!("    {:>2}. {action:?}", number + 1);
                    }
                }
                if let Some((last, _)) = steps.last() {
                    say!("    which leaves {last:#?}");
                }
            }
        }
    }
    all_hold
}
