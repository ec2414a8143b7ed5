//! `dlock completions SHELL` and `dlock man`: generated from the clap definitions, with no
//! Redis and no checks of Redis options. They are handed the finished `clap::Command`, so
//! this module does not depend on the one that defines it.

use clap::Args;

use crate::exit;

/// The arguments of `dlock completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete in
    pub shell: clap_complete::Shell,
}

impl CompletionsArgs {
    /// Prints the completion script of `command` for the shell; returns the exit code.
    pub fn run(&self, command: clap::Command) -> i32 {
        let mut script = Vec::new();
        let mut visible = without_hidden_subcommands(command);
        clap_complete::generate(self.shell, &mut visible, "dlock", &mut script);
        exit::emit(&String::from_utf8_lossy(&script))
    }
}

/// `command` without its hidden subcommands (the watchdog's `__watch-group`): the shells'
/// generators offer every subcommand they are given, hidden or not.
fn without_hidden_subcommands(command: clap::Command) -> clap::Command {
    let visible: Vec<clap::Command> = visible_subcommands(&command).cloned().collect();
    clap::Command::new(command.get_name().to_string())
        .args(command.get_arguments().cloned())
        .subcommands(visible)
}

/// The subcommands `--help` lists (clap's `help` aside, which it adds when it builds).
pub fn visible_subcommands(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command.get_subcommands().filter(|sub| !sub.is_hide_set())
}

/// The arguments of `dlock man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write dlock.1 and the subcommands' pages into this directory instead
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<std::path::PathBuf>,
}

impl ManArgs {
    /// dlock(1) of `command` on stdout, or with `--out-dir` every page (dlock.1 and one
    /// per visible subcommand) written there. Returns the exit code.
    pub fn run(&self, command: clap::Command) -> i32 {
        let Some(dir) = self.out_dir.as_deref() else {
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
}
