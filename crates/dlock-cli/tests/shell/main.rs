//! `dlock` in production shells: the command's whole process tree, signals delivered once,
//! cancelled waits that leave nothing behind, flock's habits, `inspect`, least privilege,
//! and the scripts wherever cargo puts its output. One test binary, a module per topic.

// The helpers shared with the CLI's other test binaries live beside them in
// `tests/common/`; a directory test reaches them only through a path.
#[path = "../common/mod.rs"]
mod common;

mod connections_and_privilege;
mod flock_and_inspect;
mod process_tree;
mod signals;
