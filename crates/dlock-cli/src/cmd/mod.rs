//! The subcommands: each module owns its arguments (clap derive), its checks and its run.

pub mod bench;
pub mod elect;
pub mod guarded;
pub mod inspect;
pub mod run;
