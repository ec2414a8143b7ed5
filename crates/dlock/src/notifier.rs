//! The shared subscriber: one pub/sub connection per [`Client`](crate::Client) delivers
//! release notifications to every waiter of that client.
//!
//! A release publishes `one` (wake one waiter of each client: the lock can go to one
//! holder only) or `all` (a broadcast: e.g. every reader may go when a writer leaves).
//! One waiter per client is woken by `one`, as Redisson's `LockPubSub` releases one
//! permit per message, so a release costs one attempt per client instead of one per
//! waiter. A woken waiter that gives up before using its wake passes it on. On a queued
//! waiter's own channel, `granted <fence>` says the release handed it the lock (a direct
//! hand-off, see `queue.lua`): it holds the lock without an attempt; `watch <ms>` says the
//! waiter ahead was, with a lease that ends in `ms`.
//!
//! Pub/sub is fire-and-forget: when the subscriber connection drops, every waiter is woken,
//! falls back to jittered polling, and the task resubscribes everything on reconnect (and
//! wakes everyone again, since releases may have been missed meanwhile).

use crate::backend::{Backend, Heard, SubscriberSink};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify};

/// How long a waiter waits for Redis to confirm its subscription before polling instead.
const SUBSCRIBE_ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// One channel's waiters in this client.
struct Entry {
    /// Wakes one waiter (or keeps the wake for the next one to wait).
    one: Arc<Notify>,
    /// Bumped on every broadcast; a waiter marks the value seen before re-checking the
    /// lock, so a broadcast in between is not missed.
    all: watch::Sender<u64>,
    waiters: usize,
    /// Subscribed on the current connection (false when the server refused, e.g. an ACL
    /// user without the channel: its waiters poll).
    live: Arc<AtomicBool>,
    /// What a queued waiter's own channel said and the waiter has not read yet.
    told: Arc<StdMutex<Told>>,
}

/// What a queued waiter is told on its own channel besides "look again".
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Told {
    /// `granted <fence>`: a release handed it the lock, with this fence.
    pub granted: Option<u64>,
    /// `watch <ms>`: the lock was granted to the waiter ahead; its lease ends in `ms`.
    pub watch_ms: Option<u64>,
}

/// State shared by the notifier task and the waiters.
struct Channels {
    entries: StdMutex<HashMap<String, Entry>>,
    /// True while the subscriber connection is up and subscribed.
    connected: AtomicBool,
}

impl Channels {
    fn wake_all(&self) {
        for entry in self.entries.lock().unwrap().values() {
            entry.all.send_modify(|n| *n += 1);
        }
    }

    fn set_live(&self, channel: &str, live: bool) {
        if let Some(entry) = self.entries.lock().unwrap().get(channel) {
            entry.live.store(live, Ordering::Release);
        }
    }

    fn deliver(&self, channel: &str, payload: &[u8]) {
        if let Some(entry) = self.entries.lock().unwrap().get(channel) {
            if payload == b"all" {
                entry.all.send_modify(|n| *n += 1);
            } else {
                let mut told = entry.told.lock().unwrap();
                if let Some(fence) = said(payload, b"granted ") {
                    told.granted = Some(fence);
                } else if let Some(ms) = said(payload, b"watch ") {
                    told.watch_ms = Some(ms);
                }
                entry.one.notify_one();
            }
        }
    }
}

/// The number in a message `<word> <number>` (`granted <fence>`, `watch <ms>`).
fn said(payload: &[u8], word: &[u8]) -> Option<u64> {
    std::str::from_utf8(payload.strip_prefix(word)?)
        .ok()?
        .parse()
        .ok()
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    /// The last waiter of a channel left: unsubscribe unless a new one came meanwhile.
    Forget(String),
    Stop,
}

/// The shared subscriber of one client.
pub(crate) struct Notifier {
    channels: Arc<Channels>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Notifier {
    pub(crate) fn start(
        backend: Backend,
        connect_timeout: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Notifier {
        let channels = Arc::new(Channels {
            entries: StdMutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
        });
        let (commands, rx) = mpsc::unbounded_channel();
        runtime.spawn(run_subscriber(
            backend,
            connect_timeout,
            channels.clone(),
            rx,
        ));
        Notifier { channels, commands }
    }

    /// Stops the subscriber; waiters fall back to polling (and see the client closed).
    pub(crate) fn stop(&self) {
        let _ = self.commands.send(Command::Stop);
        self.channels.connected.store(false, Ordering::Release);
        self.channels.wake_all();
    }

    /// Registers interest in `channel` and returns once Redis confirmed the subscription
    /// (or it could not be made, in which case the waiter polls).
    pub(crate) async fn watch(&self, channel: &str) -> Watch {
        let (one, all, live, told) = {
            let mut entries = self.channels.entries.lock().unwrap();
            let entry = entries.entry(channel.to_string()).or_insert_with(|| Entry {
                one: Arc::new(Notify::new()),
                all: watch::channel(0).0,
                waiters: 0,
                live: Arc::new(AtomicBool::new(false)),
                told: Arc::default(),
            });
            entry.waiters += 1;
            (
                entry.one.clone(),
                entry.all.subscribe(),
                entry.live.clone(),
                entry.told.clone(),
            )
        };
        let watch = Watch {
            channel: channel.to_string(),
            one,
            all,
            live,
            told,
            holding_wake: false,
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

/// One waiter's registration on a release channel. Dropping it deregisters, and passes on
/// a wake it received but did not use.
pub(crate) struct Watch {
    channel: String,
    one: Arc<Notify>,
    all: watch::Receiver<u64>,
    live: Arc<AtomicBool>,
    told: Arc<StdMutex<Told>>,
    /// Woken by a `one` message whose attempt has not answered yet.
    holding_wake: bool,
    channels: Arc<Channels>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Watch {
    /// Marks every broadcast so far as seen. Call before re-checking the lock.
    pub(crate) fn mark_seen(&mut self) {
        self.all.borrow_and_update();
    }

    /// True while notifications for this channel are being delivered (otherwise, poll).
    pub(crate) fn is_live(&self) -> bool {
        self.channels.connected.load(Ordering::Acquire) && self.live.load(Ordering::Acquire)
    }

    /// Consumes a wake this client's channel stored while none of its waiters waited (a
    /// release before now). Only right before an attempt, which sees what that release
    /// did: otherwise the wake would be lost.
    pub(crate) fn discard_stored_wake(&mut self) {
        let stored = self.one.notified();
        tokio::pin!(stored);
        // Takes a stored wake, or registers and, dropped at once, leaves again.
        stored.as_mut().enable();
    }

    /// The attempt after a wake answered (granted or busy): the wake is used up.
    pub(crate) fn wake_used(&mut self) {
        self.holding_wake = false;
    }

    /// What this waiter was told since it last looked (taken once). Being told uses the
    /// wake that brought it.
    pub(crate) fn take_told(&mut self) -> Told {
        let told = std::mem::take(&mut *self.told.lock().unwrap());
        if told.granted.is_some() || told.watch_ms.is_some() {
            self.holding_wake = false;
        }
        told
    }

    /// Resolves on the next wake for this waiter or broadcast after the last
    /// [`Watch::mark_seen`].
    pub(crate) async fn notified(&mut self) {
        tokio::select! {
            _ = self.one.notified() => self.holding_wake = true,
            changed = self.all.changed() => {
                if changed.is_err() {
                    // The entry was dropped (cannot happen while we hold it); never resolve.
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut entries = self.channels.entries.lock().unwrap();
        if let Some(entry) = entries.get_mut(&self.channel) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                entries.remove(&self.channel);
                let _ = self.commands.send(Command::Forget(self.channel.clone()));
            } else if self.holding_wake {
                // This waiter was woken but leaves without using it: another one must try.
                entry.one.notify_one();
            }
        }
    }
}

/// What subscribing one channel came to.
enum Subscribed {
    Yes,
    /// The server refused this channel (e.g. NOPERM): its waiters poll.
    Refused,
    /// The connection failed.
    Broken,
}

async fn subscribe(sink: &mut SubscriberSink, channel: &str) -> Subscribed {
    match sink.subscribe(channel).await {
        Ok(()) => Subscribed::Yes,
        Err(err) if err.code().is_some() && !err.is_connection_dropped() => {
            tracing::debug!(channel, error = %err, "subscription refused; waiters on it poll");
            Subscribed::Refused
        }
        // On a cluster one shard's failure leaves the others subscribed: this channel's
        // waiters poll, and its next waiter tries again.
        Err(err) if sink.is_sharded() => {
            tracing::debug!(channel, error = %err, "sharded subscription failed; waiters on it poll");
            Subscribed::Refused
        }
        Err(_) => Subscribed::Broken,
    }
}

/// Waits `pause` before the next connection attempt, answering subscribe requests with
/// "no" meanwhile (so waiters poll at once instead of waiting for an answer). False when
/// the notifier was stopped.
async fn back_off(pause: Duration, commands: &mut mpsc::UnboundedReceiver<Command>) -> bool {
    let sleep = tokio::time::sleep(crate::options::jitter(pause));
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return true,
            command = commands.recv() => match command {
                Some(Command::Subscribe(_, ack)) => { let _ = ack.send(false); }
                Some(Command::Forget(_)) => {}
                Some(Command::Stop) | None => return false,
            },
        }
    }
}

async fn run_subscriber(
    backend: Backend,
    connect_timeout: Duration,
    channels: Arc<Channels>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    const FIRST_PAUSE: Duration = Duration::from_millis(50);
    let mut pause = FIRST_PAUSE;
    loop {
        let connection = tokio::time::timeout(connect_timeout, backend.subscriber()).await;
        let Ok(Ok((mut sink, mut stream))) = connection else {
            if !back_off(pause, &mut commands).await {
                return;
            }
            pause = (pause * 2).min(Duration::from_secs(2));
            continue;
        };
        let mut subscribed: HashSet<String> = HashSet::new();
        let wanted: Vec<String> = channels.entries.lock().unwrap().keys().cloned().collect();
        let mut healthy = true;
        for channel in wanted {
            match subscribe(&mut sink, &channel).await {
                Subscribed::Yes => {
                    channels.set_live(&channel, true);
                    subscribed.insert(channel);
                }
                Subscribed::Refused => channels.set_live(&channel, false),
                Subscribed::Broken => {
                    healthy = false;
                    break;
                }
            }
        }
        if healthy {
            // Only a connection that subscribed resets the pause between attempts.
            pause = FIRST_PAUSE;
            channels.connected.store(true, Ordering::Release);
            // Releases may have been missed while disconnected: everyone re-checks.
            channels.wake_all();
        }

        while healthy {
            tokio::select! {
                heard = stream.next() => match heard {
                    Some(Heard::Message { channel, payload }) => channels.deliver(&channel, &payload),
                    // Our own unsubscription's confirmation (the channel was already
                    // taken out of `subscribed`): nothing to do.
                    Some(Heard::Dropped(channel)) if !subscribed.contains(&channel) => {}
                    Some(Heard::Dropped(channel)) => {
                        // The channel's slot moved to another shard: its waiters re-check
                        // now, and the subscription follows the slot.
                        subscribed.remove(&channel);
                        channels.deliver(&channel, b"all");
                        let wanted = channels.entries.lock().unwrap().contains_key(&channel);
                        if wanted {
                            let ok = matches!(subscribe(&mut sink, &channel).await, Subscribed::Yes);
                            if ok {
                                subscribed.insert(channel.clone());
                            }
                            channels.set_live(&channel, ok);
                        }
                    }
                    // A shard reconnected (the redis crate resubscribes it): releases may
                    // have been missed meanwhile.
                    Some(Heard::Interrupted) => channels.wake_all(),
                    None => healthy = false,
                },
                command = commands.recv() => match command {
                    Some(Command::Subscribe(channel, ack)) => {
                        let ok = if subscribed.contains(&channel) {
                            true
                        } else {
                            match subscribe(&mut sink, &channel).await {
                                Subscribed::Yes => {
                                    subscribed.insert(channel.clone());
                                    true
                                }
                                Subscribed::Refused => false,
                                Subscribed::Broken => {
                                    healthy = false;
                                    false
                                }
                            }
                        };
                        channels.set_live(&channel, ok);
                        let _ = ack.send(ok);
                    }
                    Some(Command::Forget(channel)) => {
                        let still_wanted = channels.entries.lock().unwrap().contains_key(&channel);
                        if !still_wanted && subscribed.remove(&channel) && sink.unsubscribe(&channel).await.is_err() {
                            healthy = false;
                        }
                    }
                    Some(Command::Stop) | None => return,
                },
            }
        }
        channels.connected.store(false, Ordering::Release);
        tracing::debug!("release notifications interrupted; waiters poll until reconnected");
        channels.wake_all();
        if !back_off(pause, &mut commands).await {
            return;
        }
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// What a waiter listens to: its release channel on the one server it waits on, or on
/// every master of a Redlock. One word wakes a single-server waiter; a Redlock waiter
/// waits for as many words as a round needs (`needed` of the live masters), since a
/// release frees the masters one by one and a round sent on the first word could find the
/// others still held and split the vote.
pub struct WakeSet {
    watches: Vec<Watch>,
    needed: usize,
}

impl WakeSet {
    /// One channel on one server.
    pub(crate) fn one(watch: Watch) -> WakeSet {
        WakeSet {
            watches: vec![watch],
            needed: 1,
        }
    }

    /// One channel on each of several masters, of which `needed` must speak.
    pub(crate) fn quorum(watches: Vec<Watch>, needed: usize) -> WakeSet {
        WakeSet { watches, needed }
    }

    /// Marks every broadcast so far as seen, and drops the wakes (and direct grants)
    /// stored before now: call right before an attempt, which sees what those releases
    /// did (a grant's holder is recognised by its attempt).
    pub(crate) fn before_attempt(&mut self) {
        for watch in &mut self.watches {
            watch.mark_seen();
            watch.discard_stored_wake();
            watch.take_told();
        }
    }

    /// What a queued waiter (one channel on one server) was told since its last attempt.
    pub(crate) fn take_told(&mut self) -> Told {
        match self.watches.as_mut_slice() {
            [watch] => watch.take_told(),
            _ => Told::default(),
        }
    }

    /// The attempt answered: the wakes it followed are used up.
    pub(crate) fn wake_used(&mut self) {
        for watch in &mut self.watches {
            watch.wake_used();
        }
    }

    /// True while some of its channels are delivered (otherwise, poll).
    pub(crate) fn is_live(&self) -> bool {
        self.watches.iter().any(Watch::is_live)
    }

    /// True when a word may go missing without a fault: a set spread over several
    /// masters is woken per master, and a master whose release failed says nothing, so
    /// such a waiter does not sleep past its backoff's bound.
    pub(crate) fn may_miss_a_word(&self) -> bool {
        self.watches.len() > 1
    }

    /// Resolves once as many channels as needed (of the live ones) have spoken since the
    /// last attempt, each counted once.
    pub(crate) async fn notified(&mut self) {
        let live = self.watches.iter().filter(|w| w.is_live()).count();
        let needed = self.needed.min(live).max(1);
        let mut heard = vec![false; self.watches.len()];
        for _ in 0..needed {
            let waiting: Vec<_> = self
                .watches
                .iter_mut()
                .zip(heard.iter())
                .enumerate()
                .filter(|(_, (_, heard))| !**heard)
                .map(|(index, (watch, _))| {
                    Box::pin(async move {
                        watch.notified().await;
                        index
                    })
                })
                .collect();
            if waiting.is_empty() {
                return std::future::pending().await;
            }
            let (index, _, _) = futures_util::future::select_all(waiting).await;
            heard[index] = true;
        }
    }
}

/// Where the waiters of one handle for one lock take turns, when the kind wants them to
/// (Redlock): the one holding it waits on the servers, the others wait for it, in order.
/// Without it, one release (published on every master, each waking one waiter of this
/// handle) would wake a different waiter on each master, and they would split the vote
/// between them, round after round. The slot carries a granted waiter's subscriptions to
/// the next one, so the next one need not subscribe and re-check while the lock is held.
pub type Turnstile = tokio::sync::Mutex<Option<WakeSet>>;
