//! The one error type every dlock operation returns.

use std::time::Duration;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Match on the variant to decide what to do: [`Error::Busy`] and [`Error::TimedOut`] are
/// the normal "someone else has it" outcomes, [`Error::Lost`] means this caller no longer
/// owns the lock it thought it held, and the rest are configuration or infrastructure
/// problems.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A single attempt found the lock held by someone else.
    #[error("lock {name:?} is held by another owner{}", describe_remaining(*.remaining))]
    Busy {
        /// The lock name.
        name: String,
        /// How long the current holder's lease still runs, when Redis knows it
        /// (`None` for a key without an expiry, e.g. one set by another tool).
        remaining: Option<Duration>,
    },

    /// Waiting for the lock used up the whole wait budget.
    #[error("lock {name:?} was not acquired within {waited:?}: another owner kept holding it")]
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

    /// Redis could not be reached, or did not answer in time.
    #[error("cannot reach Redis: {0}")]
    Connection(#[source] redis::RedisError),

    /// An argument was rejected before anything was sent to Redis.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A key that dlock needs holds a value of a type dlock did not write there.
    #[error("key {key:?} holds a value that is not a dlock lock ({what}); pick another lock name or remove the key")]
    WrongType {
        /// The Redis key that holds the foreign value.
        key: String,
        /// What was found.
        what: String,
    },

    /// Redis answered with an error that is not one of the above (a script error, an ACL
    /// refusal, a read-only replica, ...).
    #[error("Redis refused the request: {0}")]
    Redis(#[source] redis::RedisError),
}

fn describe_remaining(remaining: Option<Duration>) -> String {
    match remaining {
        Some(d) => format!(" for another {d:?}"),
        None => " (its key has no expiry)".to_string(),
    }
}

impl Error {
    /// True for errors worth retrying later: Redis unreachable or slow.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Connection(_))
    }

    /// A script answered something it never answers (a bug, or a foreign script at the
    /// same SHA).
    pub(crate) fn unexpected_reply(reply: impl std::fmt::Debug) -> Error {
        Error::Redis(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply from a dlock script",
            format!("{reply:?}"),
        )))
    }
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_refusal()
            || err.is_connection_dropped()
            || matches!(
                err.kind(),
                redis::ErrorKind::AuthenticationFailed | redis::ErrorKind::Io
            )
            || matches!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
            )
        {
            Error::Connection(err)
        } else {
            Error::Redis(err)
        }
    }
}

/// The result type of dlock operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
