//! The raw protocol of a lock kind: what each primitive writes itself — its scripts and how
//! to read their replies — split into a narrow core ([`private::KindProtocol`],
//! [`private::Placement`], [`private::RawProtocol`]) and optional abilities
//! (`raw/abilities.rs`). Everything else (waiting, retries, clean-up of cancelled waits,
//! the guard, renewal, the lost signal, release on drop, shutdown) is shared and lives in
//! [`wait`](crate::wait) and [`guard`](crate::guard), in the spirit of `lock_api`'s
//! `RawMutex` under `Mutex<R, T>`.

use std::future::Future;
use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lease;
use crate::mutex::scripts::{DrawFence, ReleaseToken};
use crate::options::LockOptions;
use crate::queue::QueueKeys;
pub use crate::renew::HoldKind;
use crate::renew::Renewer;
use crate::renew::{Held, Linger, Renew, Renewal};
use crate::script::ScriptCall;
use crate::session::{Owner, Session};

mod abilities;

/// A kind of lock that a [`Lock`](crate::Lock) handle takes and a [`Guard`](crate::Guard)
/// holds: the plain or fair mutex, a reentrant mutex's owner, the read or write side of
/// an [`RwLock`](crate::RwLock), a semaphore, a Redlock mutex, or any of them chosen at
/// run time.
///
/// Sealed: it is implemented by dlock's primitives only.
pub trait RawLock:
    private::RawProtocol + private::Watching + private::Queueing + private::HandleForms
{
}

impl<T> RawLock for T where
    T: private::RawProtocol + private::Watching + private::Queueing + private::HandleForms
{
}

/// Room left between a `WAIT`'s timeout and the client's response timeout, for the round
/// trip around the wait.
const WAIT_MARGIN: Duration = Duration::from_millis(500);

/// What every kind of lock knows about the named lock it acts on.
#[derive(Debug, Clone)]
pub struct LockCore {
    pub(crate) client: Client,
    /// Shared by every clone (waits and guards clone their lock): no string copies.
    pub(crate) keys: std::sync::Arc<LockKeys>,
    pub(crate) options: LockOptions,
}

impl LockCore {
    /// Validates the name and options of a lock made from `client`.
    pub(crate) fn new(client: Client, name: &str, options: LockOptions) -> Result<LockCore> {
        options.validate()?;
        let keys = std::sync::Arc::new(LockKeys::new(client.prefix(), name)?);
        // A lock whose writes wait for replicas writes on the connection `WAIT` runs on.
        let client = match options.replicas {
            Some(replicas) => {
                let limit = client.response_timeout().saturating_sub(WAIT_MARGIN);
                if replicas.timeout > limit {
                    return Err(crate::error::Error::InvalidArgument(format!(
                        "the replica timeout {} must be at most {} (the client's response timeout {} less {}), or the response timeout would cut the WAIT off; shorten it or raise ClientBuilder::response_timeout",
                        crate::duration_text::humane(replicas.timeout),
                        crate::duration_text::humane(limit),
                        crate::duration_text::humane(client.response_timeout()),
                        crate::duration_text::humane(WAIT_MARGIN)
                    )));
                }
                client.acknowledging(replicas)
            }
            None => client,
        };
        Ok(LockCore {
            client,
            keys,
            options,
        })
    }
}

/// What one acquire attempt found.
#[derive(Debug)]
pub enum Attempt {
    /// Granted, with the fencing token when the kind draws it at grant (`None`: drawn
    /// lazily, on first read, while held — the plain mutex); `holds` is the owner's hold
    /// count (1 unless reentrant).
    Granted { fence: Option<u64>, holds: u32 },
    /// Every name of a multi-lock granted, with each name's fence in the order of its
    /// names (the first is the guard's [`fence`](crate::Guard::fence)).
    GrantedAll { fences: Vec<u64> },
    /// Held by others; `remaining` is the blocking lease when known; `split` when
    /// contenders split the votes (Redlock): retry after a random delay, not on a wake.
    Busy {
        remaining: Option<Duration>,
        split: bool,
    },
}

impl Attempt {
    /// Reads the reply of an acquire script: `{1, fence[, holds]}` granted, `{1}` granted
    /// without a fence (drawn later), `{0, ms[, rank]}` busy (see
    /// [`crate::queue::busy_remaining`]).
    pub fn from_reply(reply: &[i64]) -> Result<Attempt> {
        match reply {
            [1] => Ok(Attempt::Granted {
                fence: None,
                holds: 1,
            }),
            [1, fence] if *fence > 0 => Ok(Attempt::Granted {
                fence: Some(*fence as u64),
                holds: 1,
            }),
            [1, fence, holds] if *fence > 0 && *holds > 0 => Ok(Attempt::Granted {
                fence: Some(*fence as u64),
                holds: u32::try_from(*holds).unwrap_or(u32::MAX),
            }),
            [0, ..] => Ok(Attempt::Busy {
                remaining: crate::queue::busy_remaining(reply),
                split: false,
            }),
            other => Err(crate::error::Error::unexpected_reply(other)),
        }
    }
}

/// Where the waiters of a lock kind are woken.
pub enum Waiting<'a> {
    /// On the lock's release channel, shared by its waiters (one is woken per release
    /// and client, or all on a broadcast).
    Channel(&'a str),
    /// In line: each waiter has a leased place in a queue and is named in the messages on
    /// its client's wake channel for the lock.
    Queue(&'a QueueKeys),
}

pub mod private {
    use super::*;

    /// What each kind writes itself: its name, how its waiters are woken, and its acquire
    /// and release scripts with how to read their replies. Every script is safe to run
    /// twice with the same token (see [`crate::script::Call::run`]).
    pub trait KindProtocol: Clone + Send + Sync + std::fmt::Debug + 'static {
        /// The kind's name in logs and metrics: `mutex`, `fair`, `reentrant`, `read`,
        /// `write`, `semaphore`, `redlock`.
        fn kind_name(&self) -> &'static str;
        /// How its waiters are woken.
        fn waiting(&self) -> Waiting<'_>;
        /// One attempt for the hold `token`; with `join_queue`, a queued kind takes (or
        /// refreshes) the waiter's place when not granted. A resend with the same token
        /// that finds the hold granted restarts its lease and answers `Granted` again.
        fn attempt(
            &self,
            token: &str,
            join_queue: bool,
        ) -> impl Future<Output = Result<Attempt>> + Send;
        /// Gives the hold back; [`crate::Error::Lost`] when it was not held (nothing else
        /// is touched).
        fn release(&self, token: &str) -> impl Future<Output = Result<()>> + Send;
    }

    /// Where a kind's holds live and what it acts on: its session and renewer, the named
    /// lock, its options, the keys a hold is recorded at, and the one server guarded writes
    /// run on when there is one. What the guard and the wait read, never a request.
    pub trait Placement {
        /// The session its holds belong to.
        fn session(&self) -> &Session;
        /// The keys of the named lock.
        fn keys(&self) -> &std::sync::Arc<LockKeys>;
        /// The options in force.
        fn options(&self) -> &LockOptions;
        /// The renewal scheduler of its holds.
        fn renewer(&self) -> &Renewer;
        /// The client of the one server its holds live on, where guarded writes run
        /// (see [`crate::Guarded`]); `None` where a hold spans several servers (Redlock,
        /// a multi-lock).
        fn one_server(&self) -> Option<&Client> {
            None
        }

        /// The lock name (without prefix).
        fn name(&self) -> &str {
            &self.keys().name
        }

        /// The key every hold lives in (the lock key), and how a hold is recorded there
        /// (for renewal).
        fn hold_key(&self) -> (&str, HoldKind);

        /// The other locks a hold lives in too, with the same token and kind of hold (a
        /// multi-lock's names after the first): renewed under the same lease, each with
        /// its own fence. Empty for every kind over one name.
        fn other_holds(&self) -> &[LockKeys] {
            &[]
        }
    }

    /// The core of the raw protocol, what every kind on every topology does: beside its
    /// [`KindProtocol`] (attempt, release) and its [`Placement`], the verbs of a hold
    /// that the one guard ([`Guard`](crate::Guard)) sends. Abilities not every kind has
    /// are optional traits with "not supported" defaults: [`Watching`], [`Queueing`],
    /// [`HandleForms`] (see `raw/abilities.rs`).
    ///
    /// The kinds on one server (a single node, a Cluster, a Sentinel master) implement
    /// [`OnOneServer`] and get the rest from it; Redlock and the multi-lock implement
    /// this themselves, fanning each request out.
    pub trait RawProtocol: KindProtocol + Placement {
        /// Each attempt settles its own leftovers: one that is not granted gives back,
        /// itself and in the background, whatever it may have been granted, so the next
        /// attempt takes a fresh token. (Redlock: a round granted by a minority of the
        /// masters must not keep them until the wait ends.) Otherwise one token serves
        /// the whole wait and a resend is recognised by it.
        fn settles_each_attempt(&self) -> bool {
            false
        }
        /// Restarts the lease of the hold `token` at `ttl`; [`crate::Error::Lost`] when it
        /// is not held.
        fn extend(&self, token: &str, ttl: Duration) -> impl Future<Output = Result<()>> + Send;
        /// Keeps the hold `token` until `rest` from now, renewal already stopped, and
        /// lets its lease end it then ([`LockOptions::hold_at_least`]); whoever waits is
        /// told when it ends. [`crate::Error::Lost`] when it is not held.
        fn linger(&self, token: &str, rest: Duration) -> impl Future<Output = Result<()>> + Send;
        /// Whether the hold `token` is still held.
        fn is_held(&self, token: &str) -> impl Future<Output = Result<bool>> + Send;
        /// Draws the fence of a hold granted without one, while held;
        /// [`crate::Error::Lost`] when it is not held any more.
        fn draw_fence(&self, token: &str) -> impl Future<Output = Result<u64>> + Send;
    }

    pub use super::abilities::{HandleForms, Queueing, Watching};

    /// A kind on one server: beside its [`KindProtocol`], where its holds live; extend,
    /// "still held?", the lazy fence, waking and renewal are the same for every such kind
    /// and come with it.
    pub trait OnOneServer: KindProtocol {
        /// How a hold of this kind is recorded at the lock key.
        const HOLD: HoldKind;
        /// The named lock this kind acts on.
        fn core(&self) -> &LockCore;
        /// The named lock, to change its options.
        fn core_mut(&mut self) -> &mut LockCore;
        /// The owner of its holds, for the kinds whose holds have one.
        fn owner_mut(&mut self) -> Option<&mut Owner> {
            None
        }
        /// Whether a string hold of any form (plain, fair, write) is given back by token
        /// through this kind: the mutex's handle takes every form's token.
        const RELEASES_ANY_FORM: bool = false;
    }

    impl<T: OnOneServer> Placement for T {
        fn hold_key(&self) -> (&str, HoldKind) {
            (&self.core().keys.key, T::HOLD)
        }

        fn session(&self) -> &Session {
            self.core().client.session()
        }

        fn keys(&self) -> &std::sync::Arc<LockKeys> {
            &self.core().keys
        }

        fn options(&self) -> &LockOptions {
            &self.core().options
        }

        fn renewer(&self) -> &Renewer {
            self.core().client.renewer()
        }

        fn one_server(&self) -> Option<&Client> {
            Some(&self.core().client)
        }
    }

    impl<T: OnOneServer> RawProtocol for T {
        async fn extend(&self, token: &str, ttl: Duration) -> Result<()> {
            extend_on_server(self, token, ttl).await
        }

        async fn linger(&self, token: &str, rest: Duration) -> Result<()> {
            let core = self.core();
            match linger_on(&core.client, &core.keys, T::HOLD, token, rest).await? {
                Lingered::Held | Lingered::GivenBack => Ok(()),
                Lingered::NotHeld => Err(Error::Lost {
                    name: core.keys.name.clone(),
                }),
            }
        }

        async fn is_held(&self, token: &str) -> Result<bool> {
            let (key, kind) = self.hold_key();
            held_on(&self.core().client, key, kind, token).await
        }

        async fn draw_fence(&self, token: &str) -> Result<u64> {
            draw_fence_on_server(self, token).await
        }
    }
}

/// Implements [`private::OnOneServer`] for a kind whose named lock is the field
/// `$core`: `hold` says how its holds are recorded at the lock key, `owner` names the
/// field of the owner its holds belong to, and `releases_any_form` marks the kind whose
/// handle releases a string hold of any form by token (the mutex).
macro_rules! on_one_server {
    ($kind:ty, hold: $hold:expr, core: $($core:ident).+
     $(, owner: $owner:ident)? $(, releases_any_form: $any:expr)?) => {
        impl $crate::raw::private::OnOneServer for $kind {
            const HOLD: $crate::raw::HoldKind = $hold;
            $(const RELEASES_ANY_FORM: bool = $any;)?

            fn core(&self) -> &$crate::raw::LockCore {
                &self.$($core).+
            }

            fn core_mut(&mut self) -> &mut $crate::raw::LockCore {
                &mut self.$($core).+
            }

            $(fn owner_mut(&mut self) -> Option<&mut $crate::session::Owner> {
                Some(&mut self.$owner)
            })?
        }
    };
}
pub(crate) use on_one_server;

/// Releases the string hold `token` at `core`'s key, whatever kind took it, and hands the
/// lock to whoever waits for the name the way they wait (see `mutex/release_token.lua`).
async fn release_string_hold(core: &LockCore, token: &str) -> Result<()> {
    let queue = QueueKeys::new(&core.keys);
    let (keys, queue) = (&core.keys, &queue);
    let released = ReleaseToken { keys, queue, token }
        .run(&core.client)
        .await?;
    match released {
        1 => Ok(()),
        0 => Err(Error::Lost {
            name: core.keys.name.clone(),
        }),
        other => Err(Error::unexpected_reply(other)),
    }
}

/// What [`linger_on`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lingered {
    /// The hold stays until the rest ends.
    Held,
    /// A reentrant owner's other holds keep the lock: this one was given back at once.
    GivenBack,
    /// The hold was not held (nothing touched).
    NotHeld,
}

/// Keeps the hold `token` of `kind` at `keys` on `client`'s server until `rest` from now,
/// then lets it end by itself, telling whoever waits (see `renew/linger.lua`).
pub(crate) async fn linger_on(
    client: &Client,
    keys: &LockKeys,
    kind: HoldKind,
    token: &str,
    rest: Duration,
) -> Result<Lingered> {
    let queue = QueueKeys::new(keys);
    let lingered = Linger {
        keys,
        queue: &queue,
        kind,
        token,
        rest,
    }
    .run(client)
    .await?;
    match lingered {
        1 => Ok(Lingered::Held),
        2 => Ok(Lingered::GivenBack),
        0 => Ok(Lingered::NotHeld),
        -1 => Err(client.wrong_type(&keys.key, kind.wanted()).await),
        other => Err(Error::unexpected_reply(other)),
    }
}

/// Whether `client`'s server holds the hold `token` of `kind` at `key`.
pub(crate) async fn held_on(
    client: &Client,
    key: &str,
    kind: HoldKind,
    token: &str,
) -> Result<bool> {
    let held = Held { key, kind, token }.run(client).await?;
    Ok(held == 1)
}

/// Draws the fencing token of a hold granted without one (only the plain mutex's string
/// holds are), by a script that checks the hold is still ours.
async fn draw_fence_on_server<R: private::OnOneServer>(raw: &R, token: &str) -> Result<u64> {
    let core = raw.core();
    if R::HOLD != HoldKind::String {
        return Err(Error::unexpected_reply("a fence missing from a grant"));
    }
    let keys = &core.keys;
    let fence = DrawFence { keys, token }.run(&core.client).await?;
    match fence {
        0 => Err(Error::Lost {
            name: core.keys.name.clone(),
        }),
        -2 => Err(core.client.wrong_type(&core.keys.fence, "counter").await),
        fence if fence > 0 => Ok(fence as u64),
        other => Err(Error::unexpected_reply(other)),
    }
}

/// Restarts the lease of the hold `token` of `raw`'s kind at `ttl`;
/// [`Error::Lost`] when it is not held. An extend the replicas do not have gives the hold
/// back ([`Error::NotReplicated`]).
pub(crate) async fn extend_on_server<R: private::OnOneServer>(
    raw: &R,
    token: &str,
    ttl: Duration,
) -> Result<()> {
    lease::validate_ttl(ttl)?;
    let core = raw.core();
    let kind = R::HOLD;
    let hold = Renewal {
        key: &core.keys.key,
        kind,
        token,
        lease_ms: core.options.kept_for(ttl).as_millis() as u64,
    };
    let outcome = Renew { holds: &[hold] }.run(&core.client).await;
    let outcome = match outcome {
        Err(Error::NotReplicated {
            wanted,
            acknowledged,
            ..
        }) => {
            // An extend the replicas do not have: give the hold back rather than keep
            // one a failover could hand to someone else.
            let _ = raw.release(token).await;
            return Err(Error::NotReplicated {
                name: core.keys.name.clone(),
                wanted,
                acknowledged,
            });
        }
        outcome => outcome?,
    };
    match outcome.as_slice() {
        [1] => Ok(()),
        [0] => Err(Error::Lost {
            name: core.keys.name.clone(),
        }),
        [-1] => Err(core.client.wrong_type(&core.keys.key, kind.wanted()).await),
        other => Err(Error::unexpected_reply(other)),
    }
}
