//! The name of each kind of lock, as the library's logs, metrics and errors give it (the
//! `kind` label of every metric, the kind in a log line); the `dlock` CLI prints the same
//! names in its JSON.

/// The plain mutex ([`Mutex`](crate::Mutex) without a queue).
pub const MUTEX: &str = "mutex";
/// The fair mutex (a [`Mutex`](crate::Mutex) from [`Client::fair_mutex`](crate::Client::fair_mutex)).
pub const FAIR: &str = "fair";
/// A read hold of a [`RwLock`](crate::RwLock).
pub const READ: &str = "read";
/// A write hold of a [`RwLock`](crate::RwLock).
pub const WRITE: &str = "write";
/// A permit of a [`Semaphore`](crate::Semaphore).
pub const SEMAPHORE: &str = "semaphore";
/// A hold of a [`ReentrantMutex`](crate::ReentrantMutex).
pub const REENTRANT: &str = "reentrant";
/// A mutex over independent masters ([`Redlock`](crate::Redlock)).
pub const REDLOCK: &str = "redlock";
/// Several names held at once ([`MultiLock`](crate::MultiLock)).
pub const MULTI: &str = "multi";
