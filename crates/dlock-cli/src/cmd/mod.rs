//! The subcommands: each module owns its arguments (clap derive), its checks and its run.

pub mod acquire;
pub mod bench;
pub mod docs;
pub mod elect;
pub mod extend;
pub mod guarded;
pub mod inspect;
pub mod release;
pub mod run;
