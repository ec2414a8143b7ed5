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
/// A command could not print its result: stdout closed, a pipe whose reader left before
/// reading anything, a write error (EX_IOERR). `acquire` leaves nothing held.
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
         leader, run --skip-if-ran-within, with several --redis masters)
    65   the key holds another kind of lock or data dlock did not write (wrong
         type; also a string without an expiry, which no lock is)
    69   Redis unreachable (with --cluster: no node answers; with --sentinel: no
         sentinel answers, or none knows the --service name; with several
         --redis masters: fewer than a majority answered or granted, and the
         message names the masters that failed), not the deployment the flags
         name (a Sentinel or Cluster node given as --redis, a plain server as
         --cluster, rediss:// on a plain port, not Redis at all), or too old
         (dlock needs Redis 6.2 or newer, 7 on a cluster); also: fewer than
         --replicas replicas acknowledged a grant or extend within
         --replica-timeout, and the lock was given back (nothing is held)
    70   the lock was lost while the command ran (`run`; `elect`: the
         leadership; also: its renewals were not acknowledged by --replicas
         replicas)
    74   the result could not be printed: stdout closed, a pipe whose reader
         left before reading anything, or a write error (a full disk); for every
         command that prints one (acquire, release --force, leader, guarded,
         inspect, bench, completions, man, --help, --version). `acquire`:
         nothing was left held; `guarded`, `release --force`: stdout closed,
         nothing done; the output unwritable, done. A reader that leaves after
         reading some (`| head`) is 0
    75   not acquired within the wait budget (busy); also `run
         --skip-if-ran-within` found the command succeeded lately and did not
         run it; -E N changes it
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
            "the reason is the server's own: check the Redis user's permissions (redis-cli ACL LOG names a denied command or key; docs/operations.md, \"Least privilege\", lists the commands dlock needs), maxmemory, and that the server is a writable primary",
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

/// Prints a command's whole output (see [`write_out`]): returns the exit code, 0 when it
/// was written (or its reader read some and left), 74 when it could not be.
pub fn emit(text: &str) -> i32 {
    match write_out(text) {
        Ok(()) => OK,
        Err(code) => code,
    }
}

/// Writes `text` to stdout, the one way every subcommand prints its result. `Err(code)`
/// when output must stop: the reader left after reading some (`Err(OK)`: a `| head` that
/// read enough is success), or the result could not be delivered (74, said on stderr):
/// stdout closed, a pipe whose reader left before reading anything, a write error (a full
/// disk).
pub fn write_out(text: &str) -> Result<(), i32> {
    match try_write(text) {
        Ok(()) => Ok(()),
        Err(Unwritten::ReaderLeft) => Err(OK),
        Err(Unwritten::Failed(why)) => {
            eprintln!("dlock: cannot write the output: {why}\n  hint: give dlock a standard output it can write (a file or a pipe; >/dev/null to drop it); check where stdout goes (a full disk, a closed descriptor)");
            Err(IO_ERROR)
        }
    }
}

/// Why [`try_write`] could not write.
#[derive(Debug)]
pub enum Unwritten {
    /// The reader (a pipe's) went away after output was delivered to it: `| head`.
    ReaderLeft,
    /// Nothing more could be delivered: why, in words.
    Failed(String),
}

/// Whether any byte of output was delivered to stdout yet: a reader that leaves after that
/// read what it wanted (`| head -1`); one that leaves before got nothing.
static DELIVERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes `text` to stdout, saying nothing: what [`write_out`] does, for a caller with its
/// own words (and clean-up) for a failure. Written unbuffered, straight to descriptor 1, so
/// that what was delivered is known.
pub fn try_write(text: &str) -> Result<(), Unwritten> {
    use std::io::Write;
    use std::os::fd::FromRawFd as _;
    use std::sync::atomic::Ordering;
    if !stdout_is_open() {
        return Err(Unwritten::Failed("standard output is closed".into()));
    }
    // Holding std's lock serialises with anything else printing; its buffer goes first.
    let mut stdout = std::io::stdout().lock();
    let flushed = stdout.flush();
    // SAFETY: descriptor 1 stays open for the process's life; ManuallyDrop never closes it.
    let mut fd = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    let mut rest = text.as_bytes();
    let mut failure = flushed.err();
    while failure.is_none() && !rest.is_empty() {
        match fd.write(rest) {
            Ok(0) => failure = Some(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                DELIVERED.store(true, Ordering::SeqCst);
                rest = &rest[n..];
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => failure = Some(err),
        }
    }
    match failure {
        None => Ok(()),
        Some(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(reader_gone()),
        Some(err) => Err(Unwritten::Failed(err.to_string())),
    }
}

/// What a reader that went away means: the end of output when it read some, a failure when
/// it got nothing.
fn reader_gone() -> Unwritten {
    if DELIVERED.load(std::sync::atomic::Ordering::SeqCst) {
        Unwritten::ReaderLeft
    } else {
        Unwritten::Failed(
            "the reader of standard output went away before reading anything (broken pipe)".into(),
        )
    }
}

/// For a command that noticed its reader went away before writing (a watch between two
/// lines): its exit code, as [`write_out`] would have ended, said when it is 74.
pub fn after_reader_left() -> i32 {
    match reader_gone() {
        Unwritten::ReaderLeft => OK,
        Unwritten::Failed(why) => {
            eprintln!("dlock: cannot write the output: {why}\n  hint: give dlock a standard output it can write (a file or a pipe; >/dev/null to drop it)");
            IO_ERROR
        }
    }
}

/// False when file descriptor 1 was closed (`>&-`): closed when dlock started (see
/// [`probe_stdout`]), or closed since.
pub fn stdout_is_open() -> bool {
    use std::sync::atomic::Ordering;
    // SAFETY: fcntl only queries the descriptor.
    !STDOUT_CLOSED_AT_START.load(Ordering::SeqCst) && unsafe { libc::fcntl(1, libc::F_GETFD) } != -1
}

/// Whether descriptor 1 was closed when the process started, as [`probe_stdout`] saw it.
static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Runs [`probe_stdout`] as a constructor, before `main` and before Rust's runtime
/// (`#[used]` keeps it in the binary; it has to live in the binary crate).
#[used]
#[link_section = ".init_array"]
static PROBE_STDOUT: extern "C" fn() = probe_stdout;

/// Notes whether descriptor 1 is closed. Rust's runtime reopens a closed standard
/// descriptor on /dev/null (read-write) before `main`, after which a closed stdout looks
/// like a read-write /dev/null, which is also what `subprocess.DEVNULL`, daemon(3),
/// `start-stop-daemon --background` or `1<>/dev/null` give legitimately: only a look
/// before the runtime's tells them apart.
extern "C" fn probe_stdout() {
    // SAFETY: fcntl only queries the descriptor; nothing else runs yet.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED_AT_START.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The signal dlock should die of once it has cleaned up (0: none).
static DIE_BY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Whether the signal is replayed to dlock's whole process group.
static DIE_WITH_GROUP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that dlock ends because of `signal` (the command died of it, or it
/// interrupted a wait); `with_group` replays it to dlock's process group (a terminal's
/// signal that only the command's group received).
pub fn die_by(signal: i32, with_group: bool) {
    DIE_BY.store(signal, std::sync::atomic::Ordering::SeqCst);
    DIE_WITH_GROUP.store(with_group, std::sync::atomic::Ordering::SeqCst);
}

/// Dies of the signal recorded by [`die_by`], when it is one a shell stops a script for
/// (SIGINT, SIGQUIT); returns otherwise. Called last, once everything is cleaned up.
pub fn die_now_if_asked() {
    let signal = DIE_BY.load(std::sync::atomic::Ordering::SeqCst);
    if signal == libc::SIGINT || signal == libc::SIGQUIT {
        // A shell stops a script whose command died of SIGINT/SIGQUIT, not one that exited
        // 130: die of it too, now that everything is cleaned up.
        // SAFETY: restoring the default action and raising it on ourselves (or on our
        // process group, replaying a terminal's Ctrl-C the command's group received).
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            if DIE_WITH_GROUP.load(std::sync::atomic::Ordering::SeqCst) {
                libc::killpg(libc::getpgrp(), signal);
            }
            libc::raise(signal);
        }
    }
}

/// The exit code that passes on a command's end: its own code, or 128 + the signal it
/// died of, as a shell reports it.
pub fn of_status(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}
