//! Exit codes of `dlock` (sysexits.h values) and how library errors map to them.

use dlock::Error;

/// Success.
pub const OK: i32 = 0;
/// Invalid arguments (EX_USAGE).
pub const USAGE: i32 = 64;
/// The key holds a value that is not a lock (EX_DATAERR).
pub const WRONG_TYPE: i32 = 65;
/// Redis unreachable (a cluster or the sentinels too, or a --service they do not know;
/// with several --redis masters: fewer than a majority answered or granted), too old, or
/// too few replicas acknowledged a lock in time with --replicas (nothing is left held)
/// (EX_UNAVAILABLE).
pub const UNAVAILABLE: i32 = 69;
/// `acquire` could not print the token (stdout closed or failing); nothing is left held
/// (EX_IOERR).
pub const IO_ERROR: i32 = 74;
/// The lock was lost while the command ran (EX_SOFTWARE).
pub const LOST: i32 = 70;
/// Not acquired within the wait budget (EX_TEMPFAIL).
pub const BUSY: i32 = 75;
/// Redis refused the request: wrong credentials, ACL, out of memory, read-only replica,
/// script error (EX_PROTOCOL).
pub const REDIS_REFUSED: i32 = 76;
/// Release/extend refused: the caller is not the owner (EX_NOPERM).
pub const NOT_OWNER: i32 = 77;

/// The table printed by `--help`.
pub const HELP: &str = "\
EXIT CODES:
    0    success (for `run`: the command's own exit code is passed through,
         128+N when signal N ended it, 126 when it could not be executed, 127
         when it was not found; 128+N also when signal N interrupted a wait)
    64   invalid arguments (also: a kind other than the plain mutex, or
         --cluster, --sentinel, --replicas, release --force, guarded, elect,
         leader, with several --redis masters)
    65   the key holds another kind of lock or data dlock did not write (wrong type)
    69   Redis unreachable (with --cluster: no node answers; with --sentinel: no
         sentinel answers, or none knows the --service name; with several
         --redis masters: fewer than a majority answered or granted, and the
         message names the masters that failed), not the deployment the flags
         name (a Sentinel or Cluster node given as --redis, a plain server as
         --cluster, rediss:// on a plain port, not Redis at all), or too old (dlock needs Redis
         6.2 or newer, 7 on a cluster); also: fewer than --replicas
         replicas acknowledged a grant or extend within --replica-timeout, and
         the lock was given back (nothing is held)
    70   the lock was lost while the command ran (`run`; `elect`: the leadership)
    74   `acquire` could not print the token (stdout closed); nothing was left held;
         `guarded`: stdout closed (nothing applied) or the reply unwritable (applied)
    75   not acquired within the wait budget (busy); -E N changes it
    76   Redis refused the request (wrong credentials, ACL, out of memory,
         read-only replica, script error; for guarded, the command on the
         data); the server's words are printed;
         also: an answer dlock never expects (a proxy or foreign script)
    77   release/extend/guarded refused: not the owner (expired or taken);
         guarded applied nothing";

/// The exit code and a hint on what to do for a library error.
pub fn classify(err: &Error) -> (i32, &'static str) {
    match err {
        Error::InvalidArgument(_) => (USAGE, "fix the argument and run again"),
        Error::WrongType { .. } => (
            WRONG_TYPE,
            "the name is taken by another kind of lock or by other data: choose another lock name or --prefix",
        ),
        Error::Connection(_) => (
            UNAVAILABLE,
            "check that Redis is running, that --redis / DLOCK_REDIS points at it, and the TLS settings",
        ),
        Error::Misconfigured(_) => (
            UNAVAILABLE,
            "the server is not the deployment the flags name: use --redis for one server, --cluster for a cluster's nodes, --sentinel with --service for sentinels, and rediss:// only on a TLS port",
        ),
        Error::Unsupported(_) => (UNAVAILABLE, "upgrade the Redis server to 6.2 or newer"),
        Error::Authentication(_) => (
            REDIS_REFUSED,
            "fix the user name and password in --redis / DLOCK_REDIS (redis://user:password@host)",
        ),
        Error::Busy { .. } | Error::TimedOut { .. } => (
            BUSY,
            "another owner holds the lock; wait longer with --wait, or try again later",
        ),
        Error::Lost { .. } => (
            NOT_OWNER,
            "the token no longer owns the lock (its lease expired, another owner took it, or the kind flag differs from the one it was acquired with); acquire it again",
        ),
        Error::Refused { .. } => (
            REDIS_REFUSED,
            "the reason is the server's own: check the Redis user's permissions (ACL), maxmemory, and that the server is a writable primary",
        ),
        // A listing of keys holds nothing: no lock was taken or changed by it.
        Error::UnexpectedReply { command, .. } if command == "SCAN" => (
            REDIS_REFUSED,
            "the key listing (SCAN) came back in a shape Redis never sends: something between dlock and Redis answers for it (a proxy, or not Redis at all); no lock was read, taken or changed: check what --redis points at",
        ),
        Error::UnexpectedReply { .. } => (
            REDIS_REFUSED,
            "something between dlock and Redis answers for it (a proxy, or a script of another tool under the same SHA); treat the lock as lost and check what --redis points at",
        ),
        Error::NotReplicated { .. } => (
            UNAVAILABLE,
            "check that the master's replicas are running and keeping up (redis-cli INFO replication: connected_slaves, lag), give them longer with --replica-timeout, or ask for fewer with --replicas",
        ),
        Error::NoQuorum { .. } => (
            UNAVAILABLE,
            "start or reach the failed masters named above: a majority of the --redis masters (2 of 3, 3 of 5) must answer",
        ),
        Error::Closed => (UNAVAILABLE, "the dlock client was shut down; run the command again"),
        _ => (UNAVAILABLE, "see the message above"),
    }
}

/// Prints a command's whole output: a reader that went away (`| head`) is no failure
/// (exit 0, quietly); any other write error (a closed stdout, a full disk) exits 74.
pub fn emit(text: &str) -> i32 {
    match write_out(text) {
        Ok(()) => OK,
        Err(code) => code,
    }
}

/// Writes `text` to stdout. `Err(code)` when output must stop: the reader is gone
/// (`Err(OK)`: a `| head` that read enough is success) or writing failed (74, said).
pub fn write_out(text: &str) -> Result<(), i32> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(OK),
        Err(err) => {
            eprintln!("dlock: cannot write the output: {err}\n  hint: check where stdout goes (a full disk, a closed descriptor)");
            Err(IO_ERROR)
        }
    }
}
