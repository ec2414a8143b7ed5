//! The optional abilities of a raw protocol, beside its core
//! ([`RawProtocol`](super::private::RawProtocol)): how a waiter hears of releases
//! ([`Watching`]), how waiters take turns ([`Queueing`]) and the other forms of a kind's
//! handle ([`HandleForms`]). Each trait's defaults say "not supported", so a kind without
//! the ability writes an empty `impl`; the kinds on one server get every ability from
//! [`OnOneServer`], in the spirit of `lock_api`'s `RawMutexFair` beside `RawMutex`.

use std::future::Future;
use std::time::Duration;

use super::private::{OnOneServer, RawProtocol};
use super::release_string_hold;
use crate::error::Result;
use crate::notifier::{Turnstile, WakeSet};
use crate::queue::QueueKeys;
use crate::session::Owner;

/// How a waiter hears that the lock may be free: where it subscribes, and whether it can
/// listen at once without a request. Asked by the one acquisition path
/// ([`crate::wait`]) only; the guard never watches.
pub trait Watching: RawProtocol {
    /// Subscribes to `channel` where the holds are, within `budget`; a queued waiter
    /// is addressed there as its `token`.
    fn watch(
        &self,
        channel: &str,
        token: Option<&str>,
        budget: Duration,
    ) -> impl Future<Output = WakeSet> + Send;
    /// Listens on `channel` (as `token`) at once, without a request, if it is
    /// subscribed already: a waiter that registers before its attempt then needs no
    /// second attempt once queued. `None` otherwise, or where waking takes several
    /// servers.
    fn watch_if_live(&self, _channel: &str, _token: Option<&str>) -> Option<WakeSet> {
        None
    }
}

/// How waiters take turns, for the kinds whose waiters do: a leased place in a queue in
/// Redis (the fair mutex, the writer, the semaphore: their
/// [`waiting`](super::private::KindProtocol::waiting) is a
/// [`Waiting::Queue`](super::Waiting::Queue)), or a turnstile in this process (Redlock).
/// The defaults: no queue to leave, no turnstile.
pub trait Queueing: RawProtocol {
    /// Gives up the waiter place of `token` in `queue`. Asked only of a kind whose
    /// waiters queue; a kind without a queue has nothing to leave (and a kind whose
    /// waiters do queue must write its own: the default says so in debug builds).
    fn leave_queue(
        &self,
        _queue: &QueueKeys,
        _token: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        debug_assert!(
            !matches!(self.waiting(), super::Waiting::Queue(_)),
            "{}: a kind whose waiters queue must leave its queue itself",
            self.kind_name()
        );
        std::future::ready(Ok(()))
    }
    /// Where waiters of one handle take turns, when they do (see [`Turnstile`]).
    fn turnstile(&self) -> Option<std::sync::Arc<Turnstile>> {
        None
    }
}

/// The other forms of a kind's handle that a [`Lock`](crate::Lock) asks for: its release
/// by a bare token, its fence drawn at grant, a fresh owner. The defaults: the kind's own
/// release, and the handle as it is.
pub trait HandleForms: RawProtocol {
    /// Gives back a hold known only by its token (not taken through this handle):
    /// the guard's release unless the kind's token may stand for several of its forms.
    fn release_token(&self, token: &str) -> impl Future<Output = Result<()>> + Send {
        self.release(token)
    }
    /// This kind with its fence drawn with every grant, for work that reads it at
    /// once ([`Lock::with_lock`](crate::Lock::with_lock)).
    fn fence_at_grant(&self) -> Self {
        self.clone()
    }
    /// This kind acting for a fresh owner, when its holds have one: what a clone of
    /// its handle acts for (a clone handed to another task must not re-enter this
    /// one's holds).
    fn another_owner(&self) -> Self {
        self.clone()
    }
}

impl<T: OnOneServer> Watching for T {
    async fn watch(&self, channel: &str, token: Option<&str>, _budget: Duration) -> WakeSet {
        // Bounded by the subscription's own acknowledgement timeout.
        WakeSet::one(self.core().client.notifier().watch(channel, token).await)
    }

    fn watch_if_live(&self, channel: &str, token: Option<&str>) -> Option<WakeSet> {
        // Only a notifier some wait started: an uncontended acquire opens no pub/sub
        // connection.
        let notifier = self.core().client.started_notifier()?;
        Some(WakeSet::one(notifier.watch_if_live(channel, token)?))
    }
}

impl<T: OnOneServer> Queueing for T {
    fn leave_queue(
        &self,
        queue: &QueueKeys,
        token: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        queue.leave(&self.core().client, token)
    }
}

impl<T: OnOneServer> HandleForms for T {
    async fn release_token(&self, token: &str) -> Result<()> {
        if T::RELEASES_ANY_FORM {
            // A mutex, a fair mutex and a write lock share the format: a token of any
            // of them is released, and its waiters woken, by one script.
            release_string_hold(self.core(), token).await
        } else {
            self.release(token).await
        }
    }

    fn fence_at_grant(&self) -> Self {
        let mut eager = self.clone();
        let core = eager.core_mut();
        core.options = core.options.fence_at_grant();
        eager
    }

    fn another_owner(&self) -> Self {
        let mut other = self.clone();
        if let Some(owner) = other.owner_mut() {
            *owner = Owner::new();
        }
        other
    }
}
