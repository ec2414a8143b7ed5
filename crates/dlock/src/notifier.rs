//! The shared subscriber: one pub/sub connection per [`Client`](crate::Client) delivers
//! release notifications to every waiter of that client.
//!
//! A release publishes `one` (wake one waiter of each client: the lock can go to one
//! holder only) or `all` (a broadcast: e.g. every reader may go when a writer leaves).
//! One waiter per client is woken by `one`, as Redisson's `LockPubSub` releases one
//! permit per message, so a release costs one attempt per client instead of one per
//! waiter. A woken waiter that gives up before using its wake passes it on.
//!
//! Queued waiters (fair mutex, semaphore, writers) are addressed one by one: the waiters
//! of one client for one lock share a channel, and each line of a message there names the
//! token it is for (see `waiter_address` in `queue.lua`): `one <token>` (look again),
//! `granted <fence> <token>` (a release handed it the lock, a direct hand-off: it holds
//! the lock without an attempt), `watch <ms> <token>` (the waiter ahead was, with a lease
//! that ends in `ms`).
//!
//! A channel stays subscribed a while after its last waiter left ([`LINGER`]): a client
//! that waits again soon finds it live, and spends neither a `SUBSCRIBE` nor the second
//! attempt that covers the time a subscription takes.
//!
//! Pub/sub is fire-and-forget: when the subscriber connection drops, every waiter is woken,
//! falls back to jittered polling, and the task resubscribes everything on reconnect (and
//! wakes everyone again, since releases may have been missed meanwhile). A channel the
//! server refuses (an ACL without it; a cluster slot not served during a failover) leaves
//! its waiters polling, and is tried again with a growing pause while they wait.

use crate::backend::{Backend, Heard, SubscriberSink};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;

/// How long a waiter waits for Redis to confirm its subscription before polling instead.
const SUBSCRIBE_ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a channel stays subscribed after its last waiter left.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// Where one waiter (or every waiter of a shared channel) is woken and told things.
#[derive(Clone, Default)]
struct Inbox {
    one: Arc<Notify>,
    /// What a queued waiter was told and has not read yet.
    told: Arc<StdMutex<Told>>,
}

impl Inbox {
    fn hear(&self, word: Word) {
        {
            let mut told = self.told.lock().unwrap();
            match word {
                Word::Granted(fence) => told.granted = Some(fence),
                Word::Watch(ms) => told.watch_ms = Some(ms),
                Word::Look => {}
            }
        }
        self.one.notify_one();
    }
}

/// One channel's waiters in this client.
struct Entry {
    /// The waiters that are not addressed by token: `one` wakes one of them (or is kept
    /// for the next one to wait).
    shared: Inbox,
    /// Queued waiters, by token.
    addressed: HashMap<String, Inbox>,
    /// Bumped on every broadcast; a waiter marks the value seen before re-checking the
    /// lock, so a broadcast in between is not missed.
    all: watch::Sender<u64>,
    /// Its waiters; at 0 the entry lingers (subscribed) until the task forgets it.
    waiters: usize,
    /// Subscribed on the current connection (false when the server refused, e.g. an ACL
    /// user without the channel: its waiters poll).
    live: Arc<AtomicBool>,
}

/// What a queued waiter is told on its channel besides "look again".
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Told {
    /// `granted <fence>`: a release handed it the lock, with this fence.
    pub granted: Option<u64>,
    /// `watch <ms>`: the lock was granted to the waiter ahead; its lease ends in `ms`.
    pub watch_ms: Option<u64>,
}

/// What one line of a message says.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Word {
    /// `one` (or anything not understood): look again.
    Look,
    Granted(u64),
    Watch(u64),
}

/// Reads one line of a message: what it says, and the token it names (empty: whoever
/// listens on the channel).
fn read_line(line: &[u8]) -> (Word, &[u8]) {
    fn split(text: &[u8]) -> (&[u8], &[u8]) {
        match text.iter().position(|&b| b == b' ') {
            Some(at) => (&text[..at], &text[at + 1..]),
            None => (text, &[]),
        }
    }
    let number = |text: &[u8]| std::str::from_utf8(text).ok()?.parse::<u64>().ok();
    let (verb, rest) = split(line);
    let numbered = |make: fn(u64) -> Word| {
        let (n, to) = split(rest);
        number(n).map(|n| (make(n), to))
    };
    let read = match verb {
        b"granted" => numbered(Word::Granted),
        b"watch" => numbered(Word::Watch),
        _ => None,
    };
    read.unwrap_or((Word::Look, if verb == b"one" { rest } else { &[] }))
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
        let entries = self.entries.lock().unwrap();
        let Some(entry) = entries.get(channel) else {
            return;
        };
        if payload == b"all" {
            entry.all.send_modify(|n| *n += 1);
            return;
        }
        for line in payload.split(|&b| b == b'\n') {
            let (word, to) = read_line(line);
            if to.is_empty() {
                entry.shared.hear(word);
            } else if let Some(inbox) = std::str::from_utf8(to)
                .ok()
                .and_then(|token| entry.addressed.get(token))
            {
                inbox.hear(word);
            }
            // A line for a token nobody here waits as: that wait has ended.
        }
    }

    /// Removes `channel` if nobody waits on it (it lingered long enough); true if removed.
    /// Some waiter still listens on `channel`.
    fn is_wanted(&self, channel: &str) -> bool {
        (self.entries.lock().unwrap().get(channel)).is_some_and(|entry| entry.waiters > 0)
    }

    fn remove_if_unwatched(&self, channel: &str) -> bool {
        let mut entries = self.entries.lock().unwrap();
        if entries.get(channel).is_some_and(|entry| entry.waiters == 0) {
            entries.remove(channel);
            return true;
        }
        false
    }
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    /// The last waiter of a channel left: unsubscribe after [`LINGER`] unless a new one
    /// came meanwhile.
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

    /// Registers a waiter on `channel` (addressed as `token`, for a queued waiter):
    /// returns it, and whether the channel was live already.
    fn register(&self, channel: &str, token: Option<&str>) -> (Watch, bool) {
        let mut entries = self.channels.entries.lock().unwrap();
        let entry = entries.entry(channel.to_string()).or_insert_with(|| Entry {
            shared: Inbox::default(),
            addressed: HashMap::new(),
            all: watch::channel(0).0,
            waiters: 0,
            live: Arc::new(AtomicBool::new(false)),
        });
        entry.waiters += 1;
        let inbox = match token {
            Some(token) => entry
                .addressed
                .entry(token.to_string())
                .or_default()
                .clone(),
            None => entry.shared.clone(),
        };
        let live =
            entry.live.load(Ordering::Acquire) && self.channels.connected.load(Ordering::Acquire);
        let watch = Watch {
            channel: channel.to_string(),
            token: token.map(str::to_string),
            inbox,
            all: entry.all.subscribe(),
            live: entry.live.clone(),
            holding_wake: false,
            channels: self.channels.clone(),
            commands: self.commands.clone(),
        };
        (watch, live)
    }

    /// Registers interest in `channel` (as `token`, for a queued waiter) and returns once
    /// Redis confirmed the subscription (or it could not be made, in which case the
    /// waiter polls). No round trip when the channel is subscribed already.
    pub(crate) async fn watch(&self, channel: &str, token: Option<&str>) -> Watch {
        let (watch, live) = self.register(channel, token);
        if live {
            return watch;
        }
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

    /// Registers on `channel` (as `token`) only if it is subscribed and delivered already
    /// (a waiter of this client listens, or did a moment ago): then a waiter registered
    /// before its attempt misses nothing that comes after it.
    pub(crate) fn watch_if_live(&self, channel: &str, token: Option<&str>) -> Option<Watch> {
        let live = self.channels.connected.load(Ordering::Acquire)
            && (self.channels.entries.lock().unwrap().get(channel))
                .is_some_and(|entry| entry.live.load(Ordering::Acquire));
        // (A forget that removes the entry meanwhile leaves this registration not live:
        // then it subscribes as any waiter does.)
        live.then(|| self.register(channel, token))
            .and_then(|(watch, live)| live.then_some(watch))
    }
}

/// One waiter's registration on a release channel. Dropping it deregisters, and passes on
/// a wake it received but did not use.
pub(crate) struct Watch {
    channel: String,
    /// The token it is addressed as (a queued waiter), or none (a shared wake).
    token: Option<String>,
    inbox: Inbox,
    all: watch::Receiver<u64>,
    live: Arc<AtomicBool>,
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
        let stored = self.inbox.one.notified();
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
        let told = std::mem::take(&mut *self.inbox.told.lock().unwrap());
        if told.granted.is_some() || told.watch_ms.is_some() {
            self.holding_wake = false;
        }
        told
    }

    /// Resolves on the next wake for this waiter or broadcast after the last
    /// [`Watch::mark_seen`].
    pub(crate) async fn notified(&mut self) {
        tokio::select! {
            _ = self.inbox.one.notified() => self.holding_wake = true,
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
            if let Some(token) = &self.token {
                // Nobody else is addressed as this token: its wake goes nowhere.
                entry.addressed.remove(token);
            } else if self.holding_wake && entry.waiters > 0 {
                // This waiter was woken but leaves without using it: another one must try.
                entry.shared.one.notify_one();
            }
            if entry.waiters == 0 {
                let _ = self.commands.send(Command::Forget(self.channel.clone()));
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
async fn back_off(
    pause: Duration,
    channels: &Channels,
    commands: &mut mpsc::UnboundedReceiver<Command>,
) -> bool {
    let sleep = tokio::time::sleep(crate::options::jitter(pause));
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return true,
            command = commands.recv() => match command {
                Some(Command::Subscribe(_, ack)) => { let _ = ack.send(false); }
                Some(Command::Forget(channel)) => {
                    channels.remove_if_unwatched(&channel);
                }
                Some(Command::Stop) | None => return false,
            },
        }
    }
}

/// The channels whose last waiter left, each forgotten [`LINGER`] after it last did.
#[derive(Default)]
struct Lingering {
    /// In the order they are due (a channel may be in it more than once).
    due: VecDeque<(Instant, String)>,
    /// When each channel is due (its latest entry in `due`).
    latest: HashMap<String, Instant>,
}

impl Lingering {
    fn add(&mut self, channel: String) {
        let at = Instant::now() + LINGER;
        self.latest.insert(channel.clone(), at);
        self.due.push_back((at, channel));
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.front().map(|(at, _)| *at)
    }

    /// The channels due now (each once, at its latest time).
    fn take_due(&mut self) -> Vec<String> {
        let now = Instant::now();
        let mut due = Vec::new();
        while self.due.front().is_some_and(|(at, _)| *at <= now) {
            let (at, channel) = self.due.pop_front().expect("checked above");
            if self.latest.get(&channel) == Some(&at) {
                self.latest.remove(&channel);
                due.push(channel);
            }
        }
        due
    }
}

/// The channels whose subscription the server refused while waiters listen on them, each
/// tried again after a pause that doubles up to [`RETRY_REFUSED_MAX`]: a refusal can pass
/// (a cluster's slot not served during a failover, an ACL changed), and the waiters that
/// poll meanwhile would otherwise stay deaf until a new waiter subscribes.
#[derive(Default)]
struct RetryRefused {
    /// When each is due, and the pause that led there.
    due: HashMap<String, (Instant, Duration)>,
}

/// The first pause before a refused subscription is tried again.
const RETRY_REFUSED_FIRST: Duration = Duration::from_millis(250);
/// The longest (a channel refused for good, an ACL without it, costs one `SUBSCRIBE`
/// this often while waiters listen).
const RETRY_REFUSED_MAX: Duration = Duration::from_secs(5);

impl RetryRefused {
    /// Schedules `channel` after `pause`, unless it is scheduled already.
    fn add(&mut self, channel: String, pause: Duration) {
        self.due
            .entry(channel)
            .or_insert_with(|| (Instant::now() + crate::options::jitter(pause), pause));
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.values().map(|(at, _)| *at).min()
    }

    /// The channels due now, with the pause after which they were.
    fn take_due(&mut self) -> Vec<(String, Duration)> {
        let now = Instant::now();
        let due: Vec<(String, Duration)> = (self.due.iter())
            .filter(|(_, (at, _))| *at <= now)
            .map(|(channel, (_, pause))| (channel.clone(), *pause))
            .collect();
        for (channel, _) in &due {
            self.due.remove(channel);
        }
        due
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
            if !back_off(pause, &channels, &mut commands).await {
                return;
            }
            pause = (pause * 2).min(Duration::from_secs(2));
            continue;
        };
        let mut subscribed: HashSet<String> = HashSet::new();
        // Channels nobody waits on any more need no new subscription.
        let mut lingering = Lingering::default();
        let mut refused = RetryRefused::default();
        let wanted: Vec<String> = {
            let mut entries = channels.entries.lock().unwrap();
            entries.retain(|_, entry| entry.waiters > 0);
            entries.keys().cloned().collect()
        };
        let mut healthy = true;
        for channel in wanted {
            match subscribe(&mut sink, &channel).await {
                Subscribed::Yes => {
                    channels.set_live(&channel, true);
                    subscribed.insert(channel);
                }
                Subscribed::Refused => {
                    channels.set_live(&channel, false);
                    refused.add(channel, RETRY_REFUSED_FIRST);
                }
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
            let next_forget = lingering.next_due();
            let next_retry = refused.next_due();
            tokio::select! {
                _ = tokio::time::sleep_until(next_retry.unwrap_or_else(Instant::now)), if next_retry.is_some() => {
                    for (channel, pause) in refused.take_due() {
                        if subscribed.contains(&channel) || !channels.is_wanted(&channel) {
                            continue;
                        }
                        match subscribe(&mut sink, &channel).await {
                            Subscribed::Yes => {
                                subscribed.insert(channel.clone());
                                channels.set_live(&channel, true);
                                // Its waiters polled: they re-check now, and from here on
                                // sleep until a release.
                                channels.deliver(&channel, b"all");
                            }
                            Subscribed::Refused => {
                                refused.add(channel, (pause * 2).min(RETRY_REFUSED_MAX));
                            }
                            Subscribed::Broken => {
                                healthy = false;
                                break;
                            }
                        }
                    }
                }
                _ = tokio::time::sleep_until(next_forget.unwrap_or_else(Instant::now)), if next_forget.is_some() => {
                    for channel in lingering.take_due() {
                        if channels.remove_if_unwatched(&channel)
                            && subscribed.remove(&channel)
                            && sink.unsubscribe(&channel).await.is_err()
                        {
                            healthy = false;
                        }
                    }
                }
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
                            } else {
                                refused.add(channel.clone(), RETRY_REFUSED_FIRST);
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
                                Subscribed::Refused => {
                                    refused.add(channel.clone(), RETRY_REFUSED_FIRST);
                                    false
                                }
                                Subscribed::Broken => {
                                    healthy = false;
                                    false
                                }
                            }
                        };
                        channels.set_live(&channel, ok);
                        let _ = ack.send(ok);
                    }
                    Some(Command::Forget(channel)) => lingering.add(channel),
                    Some(Command::Stop) | None => return,
                },
            }
        }
        channels.connected.store(false, Ordering::Release);
        tracing::debug!("release notifications interrupted; waiters poll until reconnected");
        channels.wake_all();
        if !back_off(pause, &channels, &mut commands).await {
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

#[cfg(test)]
mod tests {
    use super::{read_line, Word};

    #[test]
    fn lines_say_what_and_to_whom() {
        let to = |line: &'static str| read_line(line.as_bytes());
        assert_eq!(to("one"), (Word::Look, &b""[..]));
        assert_eq!(to("one ab.cd"), (Word::Look, &b"ab.cd"[..]));
        assert_eq!(to("granted 42"), (Word::Granted(42), &b""[..]));
        assert_eq!(
            to("granted 42 web/ab.cd"),
            (Word::Granted(42), &b"web/ab.cd"[..])
        );
        assert_eq!(to("watch 900 ab.cd"), (Word::Watch(900), &b"ab.cd"[..]));
        // Not understood: look again, whoever listens (never a wrong grant).
        assert_eq!(to("granted x ab.cd"), (Word::Look, &b""[..]));
        assert_eq!(to("hello ab.cd"), (Word::Look, &b""[..]));
    }
}
