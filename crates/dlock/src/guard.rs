//! What every single-hold guard does the same way: expose the grant, stop renewal before
//! releasing, and release in the background when dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::Result;
use crate::lease::{Grant, Held, LostReason, LostSignal};
use crate::options::LockOptions;
use crate::renew::OwnerField;

/// The accessors every single-hold guard shares, delegating to its `core: GuardCore`.
/// `$what` names the hold in the docs ("lock", "permit", ...).
macro_rules! hold_accessors {
    ($what:literal) => {
        #[doc = concat!("The random token that identifies this ", $what, " in Redis.")]
        pub fn token(&self) -> &str {
            self.core.token()
        }

        #[doc = concat!("Until when this ", $what, " may be assumed held, by the local monotonic clock: ")]
        #[doc = "the send time of the last successful grant, extension or renewal, plus the"]
        #[doc = "lease, minus [`drift_allowance`](crate::drift_allowance)."]
        pub fn valid_until(&self) -> std::time::Instant {
            self.core.valid_until()
        }

        /// How much of the validity is left (zero once it passed).
        pub fn remaining(&self) -> std::time::Duration {
            self.core.remaining()
        }

        #[doc = concat!("A signal that fires when this ", $what, " may have been lost. See [`LostSignal`](crate::LostSignal).")]
        pub fn lost_signal(&self) -> crate::LostSignal {
            self.core.lost_signal()
        }

        #[doc = concat!("Resolves when this ", $what, " may have been lost, with the reason.")]
        pub async fn lost(&self) -> crate::LostReason {
            self.core.lost().await
        }
    };
}
pub(crate) use hold_accessors;

/// Releases the hold identified by a token; given by each primitive.
type ReleaseFn =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> + Send + Sync>;

pub(crate) struct GuardCore {
    pub held: Held,
    release: ReleaseFn,
    runtime: tokio::runtime::Handle,
    released: bool,
}

impl GuardCore {
    /// Starts holding `grant` (of a lease of `options.ttl` at `key`, renewed per
    /// `options.renewal`); `release` gives a hold back by its token.
    pub fn start<F, Fut>(
        client: &Client,
        grant: Grant,
        key: &str,
        owner: OwnerField,
        options: &LockOptions,
        release: F,
    ) -> GuardCore
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let held = Held::start(client, grant, key, owner, options.ttl, options.renewal);
        let release: ReleaseFn = Arc::new(move |token| Box::pin(release(token)));
        GuardCore {
            held,
            release,
            runtime: client.inner.runtime.clone(),
            released: false,
        }
    }

    pub fn token(&self) -> &str {
        &self.held.token
    }

    pub fn fence(&self) -> u64 {
        self.held.fence
    }

    pub fn valid_until(&self) -> Instant {
        self.held.valid_until()
    }

    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    pub async fn lost(&self) -> LostReason {
        self.held.lost_signal().wait().await
    }

    /// Stops renewal (waiting out an in-flight round), then releases.
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.held.stop_renewal().await;
        (self.release)(self.held.token.clone()).await
    }

    /// Gives up the guard without releasing; renewal stops.
    pub fn into_token(mut self) -> String {
        self.released = true;
        self.held.detach().0
    }
}

impl std::fmt::Debug for GuardCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("held", &self.held).finish()
    }
}

impl Drop for GuardCore {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (token, renewal) = self.held.detach();
        let release = (self.release)(token);
        // Handle::spawn never panics: after runtime shutdown the task is dropped and the
        // lease frees the lock.
        self.runtime.spawn(async move {
            if let Some(renewal) = renewal {
                renewal.cancel().await;
            }
            if let Err(err) = release.await {
                tracing::debug!(error = %err, "background release failed; the lease will expire");
            }
        });
    }
}
