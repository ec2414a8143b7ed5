//! Waiter queues for the kinds that grant in order (fair mutex, semaphore, writers of the
//! read-write lock).
//!
//! A waiter holds a leased place in a queue kept in Redis (see `queue.lua`) and is named in
//! the messages on its client's channel, so a release hands the lock to exactly the next
//! waiter (or wakes it) instead of waking every waiter. The acquisition path
//! ([`crate::wait`]) gives the place back when a wait ends without a grant, including when
//! its future is dropped.

use std::time::Duration;

use crate::error::Result;
use crate::keys::LockKeys;
use crate::script::{ScriptCall, Target};

pub(crate) mod scripts;
use scripts::LeaveQueue;

/// Keys and channels of one lock's waiter queue.
#[derive(Debug, Clone)]
pub struct QueueKeys {
    /// The queue: a sorted set of waiter tokens in arrival order.
    pub queue: String,
    /// The waiters' leases (a sorted set of lease ends).
    pub leases: String,
    /// A semaphore waiter's N, named in its token for a direct hand-off.
    pub limit: Option<u32>,
    /// How many of those N permits a semaphore waiter takes at once (1 but for
    /// `Semaphore::lock_many`), named in its token as `~w<k>` when more than 1.
    pub weight: u32,
    /// Prefix of the wake channels (the waiter's client tag follows; see `wake_channel`).
    pub wake_prefix: String,
    /// Where to announce that the last waiter left without a grant (rwlock writers:
    /// readers wait while writers queue).
    pub on_empty: Option<String>,
}

impl QueueKeys {
    /// The queue of the lock `keys` (one place at a time; no semaphore limit).
    pub fn new(keys: &LockKeys) -> QueueKeys {
        QueueKeys {
            queue: keys.companion("queue"),
            leases: keys.companion("queue-leases"),
            limit: None,
            weight: 1,
            wake_prefix: keys.companion("wake:"),
            on_empty: None,
        }
    }

    /// The token of a queued waiter: `token` followed by what a release that hands it the
    /// lock directly must give it, `~<ttl ms>` and a semaphore waiter's `~<N>` (read by
    /// `waiter_wants` in `queue.lua`): the queue then stores nothing else per waiter. A
    /// semaphore waiter taking k > 1 permits ends in `~w<k>` (`permit_weight`): the permit
    /// it is granted is stored under this token, so every client reads its weight there.
    pub fn waiter_token(&self, mut token: String, ttl: Duration) -> String {
        use std::fmt::Write;
        // Appended in place: the session's tokens leave room for it.
        let ttl = ttl.as_millis();
        let _ = match (self.limit, self.weight) {
            (Some(n), 1) => write!(token, "~{ttl}~{n}"),
            (Some(n), k) => write!(token, "~{ttl}~{n}~w{k}"),
            (None, _) => write!(token, "~{ttl}"),
        };
        token
    }

    /// The token of a single attempt, which does not queue: `token` as it is, but for a
    /// semaphore attempt taking k > 1 permits, which ends in `~w<k>` like its waiter's.
    pub fn attempt_token(&self, token: String) -> String {
        match (self.limit, self.weight) {
            (Some(_), k) if k > 1 => {
                use std::fmt::Write;
                let mut token = token;
                let _ = write!(token, "~w{k}");
                token
            }
            _ => token,
        }
    }

    /// Where the queued waiter `token` listens: its client's channel (its waiters share
    /// it; messages name the token), or, for a token without a client tag, a channel of
    /// its own (see `waiter_address` in `queue.lua`).
    pub fn wake_channel(&self, token: &str) -> String {
        let to = crate::session::client_tag_of(token).unwrap_or(token);
        format!("{}{to}", self.wake_prefix)
    }

    /// Removes `token` from the queue on `client`'s deployment, waking the next waiter if
    /// it was first. (A script [`Target`], not a client handle: the queue sits below the
    /// client, which inspects through the queue's keys.)
    pub(crate) async fn leave(&self, client: &impl Target, token: &str) -> Result<()> {
        LeaveQueue { queue: self, token }.run(client).await?;
        Ok(())
    }
}

/// Reads the "busy" reply of an acquire script: `{0, ms}` or `{0, ms, rank}`. `ms` < 0
/// means no lease to watch (a key without expiry, or queued behind others: woken in turn).
pub(crate) fn busy_remaining(reply: &[i64]) -> Option<Duration> {
    match reply {
        [0, ms, ..] if *ms >= 0 => Some(Duration::from_millis(*ms as u64)),
        _ => None,
    }
}
