//! The `dlock` binary against real redis-server processes: exit codes, the child's
//! environment, signals, and mutual exclusion across OS processes. One test binary, a
//! module per topic.

// The helpers shared with the CLI's other test binaries live beside them in
// `tests/common/`; a directory test reaches them only through a path.
#[path = "../common/mod.rs"]
mod common;

mod bench;
mod broken_output;
mod docs_and_tooling;
mod exclusion;
mod exit_codes;
mod inspect;
mod lock_commands;
mod run;
