//! The one error type every dlock operation returns.

use std::time::Duration;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Match on the variant to decide what to do: [`Error::Busy`] and [`Error::TimedOut`] are
/// the normal "someone else has it" outcomes, [`Error::Lost`] means this caller no longer
/// owns the lock it thought it held, [`Error::Connection`] is worth retrying
/// ([`Error::is_transient`]), and the rest are configuration problems that retrying will
/// not fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A single attempt found the lock held by someone else.
    #[error("lock {name:?} is held by another owner{}", describe_remaining(*.remaining))]
    Busy {
        /// The lock name.
        name: String,
        /// How long the current holder's lease still runs, when Redis knows it
        /// (`None` for a key without an expiry, e.g. one set by another tool, or a
        /// queued waiter that will be woken in turn).
        remaining: Option<Duration>,
    },

    /// Waiting for the lock used up the whole wait budget.
    #[error("lock {name:?} was not acquired within {}: another owner kept holding it", crate::duration_text::humane(*.waited))]
    TimedOut {
        /// The lock name.
        name: String,
        /// How long this caller waited.
        waited: Duration,
    },

    /// The caller's token no longer owns the lock: its lease expired, or it was released
    /// and possibly taken by someone else. Nothing of the current holder was touched.
    #[error("lock {name:?} is no longer held with this token (the lease expired or another owner took it)")]
    Lost {
        /// The lock name.
        name: String,
    },

    /// Redis could not be reached, or did not answer in time. Worth retrying.
    #[error("cannot reach Redis: {0}")]
    Connection(#[source] redis::RedisError),

    /// Redis rejected the credentials (wrong user name or password, or none given to a
    /// server that requires them). Not transient: retrying will not help.
    #[error("Redis rejected the credentials: {0}; check the user name and password in the URL")]
    Authentication(#[source] redis::RedisError),

    /// The deployment is not what the client was configured for, or the settings cannot
    /// reach it as given: a Sentinel or a Cluster node given as a single server, a server
    /// without cluster support given as a cluster, sentinels that know no master of that
    /// name, TLS against a plain port (or a certificate the CA does not sign), a port that
    /// does not speak the Redis protocol. Not transient: retrying will not help; fix the
    /// URL or the topology settings. The message says which.
    #[error("the Redis settings do not match the server: {0}")]
    Misconfigured(String),

    /// An argument was rejected before anything was sent to Redis.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A key that the lock needs holds a value of another kind: another kind of dlock lock
    /// on the same name, or data dlock did not write. Nothing was changed.
    #[error("key {key:?} holds {what}")]
    WrongType {
        /// The Redis key that holds the other value.
        key: String,
        /// What was found, and what this lock needs there.
        what: String,
    },

    /// Redis refused a request: an ACL rule (NOPERM), `maxmemory` reached (OOM), a
    /// read-only replica (READONLY), a script error, ... `reason` carries the server's
    /// own words.
    #[error("Redis refused {command}: {reason}")]
    Refused {
        /// What dlock asked for (a script's name or a command).
        command: String,
        /// The server's reply.
        reason: String,
    },

    /// Fewer replicas than asked ([`LockOptions::replicas`](crate::LockOptions::replicas))
    /// acknowledged a grant or extend in time. The grant was given back (an extend's
    /// hold too); nothing is held.
    #[error("lock {name:?}: only {acknowledged} of {wanted} replicas acknowledged the write in time; the lock was given back")]
    NotReplicated {
        /// The lock name.
        name: String,
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that acknowledged.
        acknowledged: u32,
    },

    /// A [`Redlock`](crate::Redlock) could not reach a majority of its masters: too many
    /// did not answer in time, refused, or could not be raised to the grant's fence.
    /// Whatever was granted on the others was given back. Worth retrying
    /// ([`Error::is_transient`]).
    #[error("{}", describe_no_quorum(name.as_deref(), *needed, *reached, *nodes, failures))]
    NoQuorum {
        /// The lock name (`None` when connecting).
        name: Option<String>,
        /// Masters needed: a majority.
        needed: usize,
        /// Masters that granted (or, when connecting, answered).
        reached: usize,
        /// Masters in all.
        nodes: usize,
        /// The masters that failed, each as `url: error` (passwords hidden).
        failures: Vec<String>,
    },

    /// A script or command answered something dlock never expects: a foreign script
    /// loaded under the same SHA, a proxy that rewrites replies, or a bug in dlock. The
    /// server did not refuse anything; what happened to the lock is unknown, so treat
    /// the hold as lost.
    #[error("{command} answered {reply}, which dlock never expects (a foreign script or proxy in the way, or a bug in dlock)")]
    UnexpectedReply {
        /// What dlock asked for.
        command: String,
        /// The reply, as debug text.
        reply: String,
    },

    /// The server lacks something dlock needs (e.g. it is older than Redis 6.2).
    #[error("unsupported Redis server: {0}")]
    Unsupported(String),

    /// The client was shut down ([`Client::shutdown`](crate::Client::shutdown)).
    #[error("the dlock client was shut down")]
    Closed,
}

fn describe_remaining(remaining: Option<Duration>) -> String {
    match remaining {
        Some(d) => format!(" for another {}", crate::duration_text::humane(d)),
        None => String::new(),
    }
}

fn describe_no_quorum(
    name: Option<&str>,
    needed: usize,
    reached: usize,
    nodes: usize,
    failures: &[String],
) -> String {
    let what = match name {
        Some(name) => format!(
            "lock {name:?}: only {reached} of {nodes} Redis masters agreed ({needed} needed)"
        ),
        None => format!("only {reached} of {nodes} Redis masters answered ({needed} needed)"),
    };
    if failures.is_empty() {
        what
    } else {
        format!("{what}; failed: {}", failures.join("; "))
    }
}

impl Error {
    /// True for errors worth retrying later: Redis unreachable or slow (for Redlock, too
    /// few masters reachable).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Connection(_) | Error::NoQuorum { .. })
    }

    /// A script answered something it never answers (a bug, or a foreign script at the
    /// same SHA).
    pub(crate) fn unexpected_reply(reply: impl std::fmt::Debug) -> Error {
        Error::UnexpectedReply {
            command: "a dlock script".into(),
            reply: format!("{reply:?}"),
        }
    }

    /// Classifies an error of the Redis client for a request described by `command`.
    pub(crate) fn from_redis(command: &str, err: redis::RedisError) -> Error {
        let code = err.code().map(str::to_owned);
        if err.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(code.as_deref(), Some("WRONGPASS" | "NOAUTH"))
        {
            return Error::Authentication(err);
        }
        if is_transient(&err) {
            return Error::Connection(err);
        }
        if matches!(
            err.kind(),
            redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
        ) {
            // An answer of a shape the request never gets. (At connect, the same means a
            // peer that does not speak Redis: `backend::connect_error` says so.) The
            // parser's own words may span lines and quote raw bytes: keep the first line.
            let words = err.detail().map_or_else(|| err.to_string(), str::to_string);
            return Error::UnexpectedReply {
                command: command.to_string(),
                reply: words.lines().next().unwrap_or_default().to_string(),
            };
        }
        if err.kind() == redis::ErrorKind::InvalidClientConfig {
            return Error::InvalidArgument(err.to_string());
        }
        let reason = match (code, err.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code,
            (None, _) => err.to_string(),
        };
        // Redis appends where in a script an error was raised (` script: <sha>, on
        // @user_script:12.`); it says nothing to users. Only that last part goes: Valkey's
        // own words for an ACL refusal in a script say `ACL failure in script: User ...`.
        let reason = match reason.rfind(" script: ") {
            Some(at) if reason[at..].contains(" on @") => reason[..at].to_string(),
            _ => reason,
        };
        Error::Refused {
            command: command.to_string(),
            reason,
        }
    }
}

fn is_transient(err: &redis::RedisError) -> bool {
    use redis::ServerErrorKind as S;
    // BUSY: another client's script is running long; the server answers again after it.
    err.code() == Some("BUSY")
        || err.is_io_error()
        || err.is_timeout()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || matches!(
            err.kind(),
            redis::ErrorKind::Io
                | redis::ErrorKind::Server(
                    S::BusyLoading
                        | S::TryAgain
                        | S::MasterDown
                        | S::ClusterDown
                        // A slot moving: the redirect is followed on the next try.
                        | S::Moved
                        | S::Ask
                )
        )
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        Error::from_redis("a command", err)
    }
}

/// The result type of dlock operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn an_unexpected_reply_is_no_refusal_and_not_worth_retrying() {
        let error = Error::unexpected_reply([7, 7]);
        assert!(
            matches!(&error, Error::UnexpectedReply { reply, .. } if reply == "[7, 7]"),
            "{error:?}"
        );
        assert!(!error.is_transient());
    }

    #[test]
    fn a_reply_of_the_wrong_shape_is_unexpected_not_refused() {
        let parse = redis::RedisError::from((redis::ErrorKind::Parse, "invalid first byte"));
        let error = Error::from_redis("GET", parse);
        assert!(
            matches!(&error, Error::UnexpectedReply { command, .. } if command == "GET"),
            "{error:?}"
        );
        assert!(!error.is_transient());
        // A dropped connection stays a transient connection error.
        let dropped =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(Error::from_redis("GET", dropped).is_transient());
    }
}
