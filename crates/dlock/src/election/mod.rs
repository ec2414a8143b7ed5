//! Leader election on a lock: a leader is the holder of the lock named after the election,
//! its term is the grant's fencing token, and its value is recorded beside the lock
//! (`{NAME}:leader`) while it holds it. Observers are told of changes on `{NAME}:leader`
//! and look again when the leader's lease ends (a leader that died says nothing).

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::mutex::{Mutex, MutexGuard};
use crate::options::{LockOptions, Wait};
use crate::script::ScriptCall;
use crate::signal::{LostReason, LostSignal};

pub(crate) mod scripts;
use scripts::{ElectionKeys, LookAtLeader, Proclaim, Resign};

/// How long an observer waits for a message when it cannot know better (no leader whose
/// lease end it could wait for): a message normally comes first.
const OBSERVE_AT_MOST: Duration = Duration::from_secs(30);

/// A leader election named `name`: at most one campaigner leads at a time, with a term
/// that grows with every new leader. Made by [`Client::election`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign("host-a:8080").await?; // waits to lead
/// println!("leading in term {}", leadership.term());
/// tokio::select! {
///     _ = leadership.lost() => eprintln!("no longer leader"), // stop leading at once
///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
/// }
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    mutex: Mutex,
    client: Client,
    keys: ElectionKeys,
}

/// The leader of an election, as [`Election::leader`] and [`Observer::next`] see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// What the leader proclaimed (an address, a host name, ...).
    pub value: String,
    /// The leader's term: the fencing token of its grant, larger than every earlier
    /// leader's. Pass it with writes, so storage can refuse an older leader's.
    pub term: u64,
}

impl Client {
    /// The leader election `name` with default options (a 30 s lease, renewed; campaigns
    /// wait until they lead). Its leaders hold the lock `name`: a mutex, so no other kind
    /// of lock may use that name.
    pub fn election(&self, name: &str) -> Result<Election> {
        self.election_with(name, LockOptions::default().wait(Wait::Forever))
    }

    /// The leader election `name` with `options` for its leaders' lock (lease, renewal,
    /// how long a campaign waits).
    pub fn election_with(&self, name: &str, options: LockOptions) -> Result<Election> {
        // The term is the grant's fence: drawn with the grant.
        let mutex = self.mutex_with(name, options.fence_at_grant())?;
        let keys = ElectionKeys::new(crate::raw::private::Placement::keys(&mutex.raw));
        Ok(Election {
            mutex,
            client: self.clone(),
            keys,
        })
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// Waits to become leader (as the lock's options say: forever by default), then
    /// records `value` as the leader's and tells observers. The returned [`Leadership`]
    /// is a lock hold: renewed, with the lost signal, and its fence is the term.
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        let guard = self.mutex.lock().await?;
        let term = guard.fence().await?;
        let leadership = Leadership {
            guard: Some(guard),
            term,
            value: value.to_string(),
            election: self.clone(),
        };
        leadership.record(value).await?;
        Ok(leadership)
    }

    /// The current leader, without campaigning: `None` when nobody leads (the lock is
    /// free, or its holder has not proclaimed yet).
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.look().await?.map(|(leader, _)| leader))
    }

    /// Proclaims `value` for a hold of the election's lock taken by other means (its
    /// `token`, and its fence as the `term`): what `dlock elect` does around `dlock run`'s
    /// hold. [`Error::Lost`] (nothing recorded) when that token does not hold the lock.
    pub async fn proclaim_token(&self, token: &str, term: u64, value: &str) -> Result<()> {
        proclaim(self, token, term, value).await
    }

    /// Clears the leader record of the hold `token` (if it is still that hold's) and tells
    /// observers; the caller then releases the lock.
    pub async fn resign_token(&self, token: &str) -> Result<()> {
        resign(self, token).await
    }

    /// The leader and what is left of its lease.
    async fn look(&self) -> Result<Option<(Leader, Duration)>> {
        let reply = LookAtLeader { keys: &self.keys }.run(&self.client).await?;
        let reply = match reply {
            redis::Value::Array(items) => items,
            redis::Value::Int(-1) => {
                return Err(self.client.wrong_type(&self.keys.lock, "string").await)
            }
            other => return Err(Error::unexpected_reply(other)),
        };
        let text = |value: &redis::Value| -> Option<String> {
            redis::from_redis_value::<Option<String>>(value.clone())
                .ok()
                .flatten()
        };
        match reply.as_slice() {
            [] => Ok(None),
            [value, term, remaining] => {
                let (Some(value), Some(term)) = (text(value), text(term)) else {
                    return Ok(None); // a record from a leader mid-proclaim
                };
                let term = term.parse().map_err(|_| Error::unexpected_reply(&reply))?;
                let remaining: i64 = redis::from_redis_value(remaining.clone())
                    .map_err(|_| Error::unexpected_reply(&reply))?;
                let remaining = Duration::from_millis(remaining.max(0) as u64);
                Ok(Some((Leader { value, term }, remaining)))
            }
            _ => Err(Error::unexpected_reply(&reply)),
        }
    }

    /// A cursor over the leader's changes: [`Observer::next`] answers the current leader
    /// at once, then each change (a new leader, a new value, nobody leading), woken by
    /// the leaders' messages and, for a leader that died without a word, at its lease's
    /// end. Between changes it looks once per leader lease (at most every 30 s; every
    /// 30 s while nobody leads, every 0.5 s while its subscription reconnects).
    /// [`Observer::into_stream`] makes it a `Stream`.
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            seen: None,
            watch: None,
        }
    }
}

/// Leading an election: a hold of its lock, renewed, whose fence is the term. Dropping it
/// resigns in the background; [`Leadership::resign`] does it now.
#[must_use = "dropping a leadership resigns at once (in the background)"]
pub struct Leadership {
    guard: Option<MutexGuard>,
    term: u64,
    value: String,
    election: Election,
}

impl Leadership {
    fn guard(&self) -> &MutexGuard {
        self.guard
            .as_ref()
            .expect("the guard is held until resign or drop")
    }

    /// The term: this leadership's fencing token, larger than every earlier leader's.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value last proclaimed.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The hold's token.
    pub fn token(&self) -> &str {
        self.guard().token()
    }

    /// Until when this leadership may be assumed held, by the local monotonic clock (see
    /// [`Guard::valid_until`](crate::Guard::valid_until)).
    pub fn valid_until(&self) -> std::time::Instant {
        self.guard().valid_until()
    }

    /// Resolves when the leadership may have been lost (see [`LostSignal`]): stop acting
    /// as leader at once.
    pub async fn lost(&self) -> LostReason {
        self.guard().lost().await
    }

    /// The lost signal, to watch from elsewhere.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard().lost_signal()
    }

    /// Applies `batch` to data beside the election's lock only while this leadership
    /// holds (see [`Guard::apply`](crate::Guard::apply)).
    pub async fn apply(&self, batch: &crate::guarded::Guarded) -> Result<Vec<redis::Value>> {
        self.guard().apply(batch).await
    }

    /// Records `value` as the leader's and tells observers; [`Error::Lost`] (nothing
    /// recorded) when the leadership is gone.
    pub async fn proclaim(&mut self, value: &str) -> Result<()> {
        self.record(value).await?;
        self.value = value.to_string();
        Ok(())
    }

    async fn record(&self, value: &str) -> Result<()> {
        let recorded = proclaim(&self.election, self.token(), self.term, value).await;
        if matches!(recorded, Err(Error::Lost { .. })) {
            // Not held any more: the lost signal says so, as a renewal would.
            self.guard().declare_lost(LostReason::Taken);
        }
        recorded
    }

    /// Steps down: the leader record is cleared, observers are told, and the lock is
    /// released for the next campaigner (with [`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least),
    /// once that time after the grant is up). [`Error::Lost`] when the leadership had
    /// already been lost.
    pub async fn resign(mut self) -> Result<()> {
        let guard = self
            .guard
            .take()
            .expect("the guard is held until resign or drop");
        let cleared = resign(&self.election, guard.token()).await;
        let released = guard.unlock().await;
        cleared.and(released)
    }
}

async fn proclaim(election: &Election, token: &str, term: u64, value: &str) -> Result<()> {
    let recorded = Proclaim {
        keys: &election.keys,
        token,
        value,
        term,
    }
    .run(&election.client)
    .await?;
    match recorded {
        1 => Ok(()),
        _ => Err(Error::Lost {
            name: election.name().to_string(),
        }),
    }
}

async fn resign(election: &Election, token: &str) -> Result<()> {
    Resign {
        keys: &election.keys,
        token,
    }
    .run(&election.client)
    .await?;
    Ok(())
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let election = self.election.clone();
        let session = election.client.session().clone();
        // Nobody waits for it here; the client's shutdown does.
        drop(session.spawn_background(async move {
            let _ = resign(&election, guard.token()).await;
            let _ = guard.unlock().await;
        }));
    }
}

/// Follows an election's leader: see [`Election::observe`].
pub struct Observer {
    election: Election,
    /// The leader last answered (`Some(None)`: nobody led).
    seen: Option<Option<Leader>>,
    watch: Option<crate::notifier::Watch>,
}

impl Observer {
    /// The changes as a `Stream` (endless; an item is an error when Redis could not be
    /// asked, and the stream goes on after it).
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<Option<Leader>>> {
        futures_util::stream::unfold(self, |mut observer| async move {
            let next = observer.next().await;
            Some((next, observer))
        })
    }

    /// The current leader the first time; afterwards, waits until it changes and answers
    /// the new one (`None`: nobody leads). [`Error::Closed`] once the client was shut
    /// down.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        let election = self.election.clone();
        if election.client.is_closed() {
            return Err(Error::Closed);
        }
        if self.watch.is_none() {
            // Listening before the first look: no change can fall between the two.
            self.watch = Some(
                election
                    .client
                    .notifier()
                    .watch(&election.keys.channel, None)
                    .await,
            );
        }
        loop {
            let watch = self.watch.as_mut().expect("made above");
            watch.mark_seen();
            let now = election.look().await?;
            let leader = now.as_ref().map(|(leader, _)| leader.clone());
            if self.seen.as_ref() != Some(&leader) {
                self.seen = Some(leader.clone());
                return Ok(leader);
            }
            // A leader that dies says nothing: look again when its lease ends (a few
            // milliseconds after, for the server's clock to pass it too).
            let until = match (&now, watch.is_live()) {
                (Some((_, remaining)), _) => *remaining + Duration::from_millis(10),
                (None, true) => OBSERVE_AT_MOST,
                // Messages are not coming through (the subscriber is reconnecting).
                (None, false) => Duration::from_millis(500),
            };
            tokio::select! {
                _ = watch.notified() => {}
                _ = tokio::time::sleep(until.min(OBSERVE_AT_MOST)) => {}
            }
            if election.client.is_closed() {
                return Err(Error::Closed);
            }
        }
    }
}
