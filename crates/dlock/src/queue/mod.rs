//! Waiter queues for the primitives that grant in order (fair mutex, semaphore, writers of
//! the read-write lock).
//!
//! A waiter holds a leased place in a queue kept in Redis (see `queue.lua`) and listens on
//! a channel of its own, so a release wakes exactly the next waiter instead of every
//! waiter. Leaving the wait any way other than being granted removes the place: awaited on
//! a timeout or error, in the background when the waiting future is dropped.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::client::{Client, RunScript};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::options::LockOptions;
use crate::wait::{acquire_waiting, Attempt};

static CANCEL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("queue.lua"),
        include_str!("cancel.lua")
    ))
});

/// Keys and channels of one lock's waiter queue.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys {
    pub queue: String,
    pub leases: String,
    /// Prefix of the per-waiter wake channels (the waiter's token follows).
    pub wake_prefix: String,
    /// Where to announce that the last waiter left without a grant (rwlock writers:
    /// readers wait while writers queue).
    pub on_empty: Option<String>,
}

impl QueueKeys {
    pub fn new(keys: &LockKeys) -> QueueKeys {
        QueueKeys {
            queue: keys.companion("queue"),
            leases: keys.companion("queue-leases"),
            wake_prefix: format!("dlock:wake:{}:", keys.key),
            on_empty: None,
        }
    }

    pub fn wake_channel(&self, token: &str) -> String {
        format!("{}{token}", self.wake_prefix)
    }

    /// Removes `token` from the queue, waking the next waiter if it was first.
    pub async fn leave(&self, client: &Client, token: &str) -> Result<()> {
        let mut invocation = CANCEL.prepare_invoke();
        invocation
            .key(&self.queue)
            .key(&self.leases)
            .arg(token)
            .arg(&self.wake_prefix);
        if let Some(channel) = &self.on_empty {
            invocation.arg(channel);
        }
        let _: i64 = invocation.run(client).await?;
        Ok(())
    }
}

/// Waits in line: repeats `attempt` (which joins or refreshes `token`'s place) until it
/// grants, woken on the waiter's own channel, within the wait budget of `options`. The
/// place is given up when the wait ends without a grant, or the future is dropped.
pub(crate) async fn wait_in_line<T, F, Fut>(
    client: &Client,
    queue: &QueueKeys,
    name: &str,
    token: &str,
    options: &LockOptions,
    attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let seat = Seat::new(client, queue, token);
    let outcome = acquire_waiting(
        client,
        name,
        &queue.wake_channel(token),
        options.wait,
        options.backoff,
        options.waiter_lease / 3,
        attempt,
    )
    .await;
    seat.finish(&outcome).await;
    outcome
}

/// A waiter's place in a queue for the duration of one wait; removes the place when the
/// wait ends without a grant.
struct Seat {
    client: Client,
    keys: QueueKeys,
    token: String,
    armed: bool,
}

impl Seat {
    fn new(client: &Client, keys: &QueueKeys, token: &str) -> Seat {
        Seat {
            client: client.clone(),
            keys: keys.clone(),
            token: token.to_string(),
            armed: true,
        }
    }

    /// Ends the wait: a grant already removed the place; otherwise remove it now.
    async fn finish<T>(mut self, outcome: &Result<T>) {
        self.armed = false;
        if outcome.is_err() {
            if let Err(err) = self.keys.leave(&self.client, &self.token).await {
                tracing::debug!(error = %err, "leaving the queue failed; the waiter lease will expire");
            }
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if self.armed {
            let (client, keys, token) =
                (self.client.clone(), self.keys.clone(), self.token.clone());
            self.client.inner.runtime.spawn(async move {
                if let Err(err) = keys.leave(&client, &token).await {
                    tracing::debug!(error = %err, "leaving the queue failed; the waiter lease will expire");
                }
            });
        }
    }
}

/// Interprets the "busy" reply of a queued acquire script: `{0, ms, rank}`.
/// Only the first in line watches a lease; the others wait to be woken.
pub(crate) fn busy_remaining(reply: &[i64]) -> Option<Duration> {
    match reply {
        [0, ms, 0] | [0, ms] if *ms >= 0 => Some(Duration::from_millis(*ms as u64)),
        _ => None,
    }
}
