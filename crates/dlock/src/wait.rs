//! Waiting without blind polling.
//!
//! Every release publishes on the lock's channel. All waiters of one [`Client`] share one
//! subscriber connection, run by a single background task (the [`Notifier`]). A waiter
//! registers its channel, waits until Redis confirms the subscription, re-checks the lock,
//! and then sleeps until a release is announced — never longer than the holder's remaining
//! lease, so an abandoned lock is taken as soon as it expires.
//!
//! Pub/sub is fire-and-forget: when the subscriber connection drops, every waiter is woken,
//! falls back to jittered polling, and the task resubscribes everything on reconnect (and
//! wakes everyone again, since releases may have been missed meanwhile).
//!
//! [`Client`]: crate::Client

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};

use crate::client::Client;
use crate::error::{Error, Result};

/// How long a waiter waits for Redis to confirm its subscription before polling instead.
const SUBSCRIBE_ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// State shared by the notifier task and the waiters.
struct Channels {
    /// Channel → (wake-up counter, number of waiters). The counter is bumped on every
    /// message so a waiter that marked the current value as seen before re-checking the
    /// lock cannot miss a release that happens in between.
    entries: StdMutex<HashMap<String, (watch::Sender<u64>, usize)>>,
    /// True while the subscriber connection is up and subscribed.
    connected: AtomicBool,
}

impl Channels {
    fn wake_all(&self) {
        for (tx, _) in self.entries.lock().unwrap().values() {
            tx.send_modify(|n| *n += 1);
        }
    }
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    /// The last waiter of a channel left: unsubscribe unless a new one came meanwhile.
    Forget(String),
}

/// The shared subscriber of one client.
pub(crate) struct Notifier {
    channels: Arc<Channels>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Notifier {
    pub(crate) fn start(
        client: redis::Client,
        connect_timeout: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Notifier {
        let channels = Arc::new(Channels {
            entries: StdMutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
        });
        let (commands, rx) = mpsc::unbounded_channel();
        runtime.spawn(run_subscriber(
            client,
            connect_timeout,
            channels.clone(),
            rx,
        ));
        Notifier { channels, commands }
    }

    /// Registers interest in `channel` and returns once Redis confirmed the subscription
    /// (or it could not be made, in which case the waiter polls).
    pub(crate) async fn watch(&self, channel: &str) -> Watch {
        let receiver = {
            let mut entries = self.channels.entries.lock().unwrap();
            let entry = entries
                .entry(channel.to_string())
                .or_insert_with(|| (watch::channel(0).0, 0));
            entry.1 += 1;
            entry.0.subscribe()
        };
        let watch = Watch {
            channel: channel.to_string(),
            receiver,
            channels: self.channels.clone(),
            commands: self.commands.clone(),
        };
        let (ack_tx, ack_rx) = oneshot::channel();
        if self
            .commands
            .send(Command::Subscribe(channel.to_string(), ack_tx))
            .is_ok()
        {
            let _ = tokio::time::timeout(SUBSCRIBE_ACK_TIMEOUT, ack_rx).await;
        }
        watch
    }
}

/// One waiter's registration on a release channel. Dropping it deregisters.
pub(crate) struct Watch {
    channel: String,
    receiver: watch::Receiver<u64>,
    channels: Arc<Channels>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Watch {
    /// Marks every notification so far as seen. Call before re-checking the lock.
    pub(crate) fn mark_seen(&mut self) {
        self.receiver.borrow_and_update();
    }

    /// True while notifications are being delivered (otherwise, poll).
    pub(crate) fn is_live(&self) -> bool {
        self.channels.connected.load(Ordering::Acquire)
    }

    /// Resolves on the next notification after the last [`Watch::mark_seen`].
    pub(crate) async fn notified(&mut self) {
        if self.receiver.changed().await.is_err() {
            // The entry was dropped (cannot happen while we hold it); never resolve.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut entries = self.channels.entries.lock().unwrap();
        if let Some(entry) = entries.get_mut(&self.channel) {
            entry.1 -= 1;
            if entry.1 == 0 {
                entries.remove(&self.channel);
                let _ = self.commands.send(Command::Forget(self.channel.clone()));
            }
        }
    }
}

async fn run_subscriber(
    client: redis::Client,
    connect_timeout: Duration,
    channels: Arc<Channels>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut retry = Duration::from_millis(50);
    loop {
        let connection = tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await;
        let (mut sink, mut stream) = match connection {
            Ok(Ok(pubsub)) => pubsub.split(),
            _ => {
                // Keep answering subscribe requests (with "no") while disconnected, so
                // waiters fall back to polling at once instead of waiting for an ack.
                let sleep = tokio::time::sleep(jitter(retry));
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => break,
                        command = commands.recv() => match command {
                            Some(Command::Subscribe(_, ack)) => { let _ = ack.send(false); }
                            Some(Command::Forget(_)) => {}
                            None => return,
                        },
                    }
                }
                retry = (retry * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        retry = Duration::from_millis(50);

        let mut subscribed: HashSet<String> = HashSet::new();
        let wanted: Vec<String> = channels.entries.lock().unwrap().keys().cloned().collect();
        let mut healthy = true;
        for channel in wanted {
            if sink.subscribe(&channel).await.is_err() {
                healthy = false;
                break;
            }
            subscribed.insert(channel);
        }
        if healthy {
            channels.connected.store(true, Ordering::Release);
            // Releases may have been missed while disconnected: everyone re-checks.
            channels.wake_all();
        }

        while healthy {
            tokio::select! {
                message = stream.next() => match message {
                    Some(message) => {
                        let entries = channels.entries.lock().unwrap();
                        if let Some((tx, _)) = entries.get(message.get_channel_name()) {
                            tx.send_modify(|n| *n += 1);
                        }
                    }
                    None => healthy = false,
                },
                command = commands.recv() => match command {
                    Some(Command::Subscribe(channel, ack)) => {
                        let ok = subscribed.contains(&channel) || match sink.subscribe(&channel).await {
                            Ok(()) => { subscribed.insert(channel); true }
                            Err(_) => { healthy = false; false }
                        };
                        let _ = ack.send(ok);
                    }
                    Some(Command::Forget(channel)) => {
                        let still_wanted = channels.entries.lock().unwrap().contains_key(&channel);
                        if !still_wanted && subscribed.remove(&channel) && sink.unsubscribe(&channel).await.is_err() {
                            healthy = false;
                        }
                    }
                    None => return,
                },
            }
        }
        channels.connected.store(false, Ordering::Release);
        tracing::debug!("release notifications interrupted; waiters poll until reconnected");
        channels.wake_all();
    }
}

/// `base` scaled by a random factor in [0.5, 1.0], so waiters woken together spread out.
pub(crate) fn jitter(base: Duration) -> Duration {
    let factor = rand::rng().random_range(0.5..=1.0);
    base.mul_f64(factor)
}

/// Backoff bounds for polling when notifications are unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first polling interval.
    pub min: Duration,
    /// The largest polling interval.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            min: Duration::from_millis(10),
            max: Duration::from_millis(500),
        }
    }
}

/// A little past the holder's expiry (0.5–2.5 ms, random so that waiters of an expired
/// lock do not all arrive at once).
fn expiry_slack() -> Duration {
    Duration::from_micros(rand::rng().random_range(500..2500))
}

/// How long a waiter should sleep before its next attempt.
///
/// * `holder_remaining`: the blocking lease's remaining time from the last attempt (`None`
///   when unknown: a key without expiry, or a queued waiter that will be woken);
/// * `live`: whether notifications are being delivered;
/// * `poll`: the current polling interval, used when not live;
/// * `idle_recheck`: the longest sleep when live (a queued waiter must also refresh its
///   place in the queue);
/// * `deadline`: the end of the wait budget.
pub(crate) fn next_sleep(
    holder_remaining: Option<Duration>,
    live: bool,
    poll: Duration,
    idle_recheck: Duration,
    deadline: Option<Instant>,
) -> Duration {
    // Notifications cover releases; the lease covers abandonment. Without notifications we
    // also poll.
    let mut sleep = match (holder_remaining, live) {
        (Some(remaining), true) => (remaining + expiry_slack()).min(idle_recheck),
        (Some(remaining), false) => jitter(poll).min(remaining + expiry_slack()),
        (None, true) => idle_recheck,
        (None, false) => jitter(poll),
    };
    if let Some(deadline) = deadline {
        sleep = sleep.min(deadline.saturating_duration_since(Instant::now()));
    }
    sleep
}

/// How long a lock call waits for a lock held by someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Fail at once with [`Error::Busy`].
    NoWait,
    /// Wait up to this long, then fail with [`Error::TimedOut`].
    Timeout(Duration),
    /// Wait until the lock is acquired.
    #[default]
    Forever,
}

/// What one acquire attempt found.
pub(crate) enum Attempt<T> {
    Granted(T),
    Busy { remaining: Option<Duration> },
}

/// Repeats `attempt` until it grants, waiting between attempts for a release notification
/// on `channel` or the holder's expiry, within the `wait` budget.
///
/// Transient connection errors are retried within the budget; other errors end the wait.
pub(crate) async fn acquire_waiting<T, F, Fut>(
    client: &Client,
    name: &str,
    channel: &str,
    wait: Wait,
    backoff: Backoff,
    idle_recheck: Duration,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let started = Instant::now();
    let deadline = match wait {
        Wait::NoWait => None,
        Wait::Timeout(timeout) => Some(started + timeout),
        Wait::Forever => None,
    };
    let mut poll = backoff.min;
    let mut watch: Option<Watch> = None;
    loop {
        if let Some(watch) = watch.as_mut() {
            watch.mark_seen();
        }
        let (remaining, failed) = match attempt().await {
            Ok(Attempt::Granted(value)) => return Ok(value),
            Ok(Attempt::Busy { remaining }) => (remaining, false),
            Err(err) if err.is_transient() && wait != Wait::NoWait => {
                tracing::debug!(lock = %name, error = %err, "acquire attempt failed; retrying");
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(err);
                }
                (None, true)
            }
            Err(err) => return Err(err),
        };
        if wait == Wait::NoWait {
            return Err(Error::Busy {
                name: name.to_string(),
                remaining,
            });
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Error::TimedOut {
                name: name.to_string(),
                waited: started.elapsed(),
            });
        }
        let Some(active) = watch.as_mut() else {
            // Subscribe, then re-check at once: a release between the failed attempt and
            // the subscription would otherwise go unnoticed.
            watch = Some(client.notifier().watch(channel).await);
            continue;
        };
        let live = active.is_live() && !failed;
        let sleep = next_sleep(remaining, live, poll, idle_recheck, deadline);
        if !live {
            poll = (poll * 2).min(backoff.max);
        }
        tokio::select! {
            _ = active.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}
