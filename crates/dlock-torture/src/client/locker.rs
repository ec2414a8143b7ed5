//! How a client reaches its lock: a granted hold of either API (or a leadership), and
//! the connection that grants it.

use std::time::{Duration, Instant};

use dlock::LockOptions;

use super::{Api, ClientArgs, Primitive};

/// A granted lock: the one guard, of the API that granted it, or a leadership.
pub(super) enum Held {
    Async(tokio::runtime::Handle, dlock::AnyGuard),
    Blocking(dlock::blocking::AnyGuard),
    AsyncLeading(tokio::runtime::Handle, dlock::Leadership),
    BlockingLeading(dlock::blocking::Leadership),
}

impl Held {
    pub(super) fn valid_until(&self) -> Instant {
        match self {
            Held::Async(_, guard) => guard.valid_until(),
            Held::Blocking(guard) => guard.valid_until(),
            Held::AsyncLeading(_, leading) => leading.valid_until(),
            Held::BlockingLeading(leading) => leading.valid_until(),
        }
    }

    pub(super) fn is_lost(&self) -> bool {
        match self {
            Held::Async(_, guard) => guard.lost_signal().lost().is_some(),
            Held::Blocking(guard) => guard.lost().is_some(),
            Held::AsyncLeading(_, leading) => leading.lost_signal().lost().is_some(),
            Held::BlockingLeading(leading) => leading.lost().is_some(),
        }
    }

    /// The grant's fence; a leadership's term.
    pub(super) fn fence(&self) -> dlock::Result<u64> {
        match self {
            Held::Async(runtime, guard) => runtime.block_on(guard.fence()),
            Held::Blocking(guard) => guard.fence(),
            Held::AsyncLeading(_, leading) => Ok(leading.term()),
            Held::BlockingLeading(leading) => Ok(leading.term()),
        }
    }

    /// Gives the hold back; a leadership resigns.
    pub(super) fn unlock(self) -> dlock::Result<()> {
        match self {
            Held::Async(runtime, guard) => runtime.block_on(guard.unlock()),
            Held::Blocking(guard) => guard.unlock(),
            Held::AsyncLeading(runtime, leading) => runtime.block_on(leading.resign()),
            Held::BlockingLeading(leading) => leading.resign(),
        }
    }

    pub(super) fn apply(&self, batch: &dlock::Guarded) -> dlock::Result<Vec<dlock::redis::Value>> {
        match self {
            Held::Async(runtime, guard) => runtime.block_on(guard.apply(batch)),
            Held::Blocking(guard) => guard.apply(batch),
            Held::AsyncLeading(runtime, leading) => runtime.block_on(leading.apply(batch)),
            Held::BlockingLeading(leading) => leading.apply(batch),
        }
    }
}

/// Applies a guarded batch for the hold the work is done under.
pub(super) type Apply<'a> = &'a dyn Fn(&dlock::Guarded) -> dlock::Result<Vec<dlock::redis::Value>>;

/// How a client reaches its lock: the async API on a runtime of its own, or the
/// blocking API, over one deployment or a Redlock's masters.
pub(super) struct Locker {
    acquire: Box<dyn Fn() -> dlock::Result<Held>>,
    shutdown: Box<dyn FnOnce()>,
}

/// The lock of `primitive` named `name` on `client`.
fn lock_of(
    client: &dlock::Client,
    primitive: Primitive,
    name: &str,
    options: LockOptions,
) -> dlock::Result<dlock::AnyLock> {
    Ok(match primitive {
        Primitive::Mutex => client.mutex_with(name, options)?.into(),
        Primitive::Fair => client.fair_mutex_with(name, options)?.into(),
        Primitive::Write => client.rwlock_with(name, options)?.writer().into(),
        Primitive::Read => client.rwlock_with(name, options)?.reader().into(),
        Primitive::Reentrant => client.reentrant_mutex_with(name, options)?.into(),
        Primitive::Sem1 | Primitive::Sem3 => client
            .semaphore_with(name, primitive.limit() as u32, options)?
            .into(),
        Primitive::Multi => client
            .multi_lock_with(&[name, Primitive::MULTI_SECOND], options)?
            .into(),
        Primitive::Redlock => unreachable!("a Redlock mutex is made by its handle"),
        Primitive::Elect => unreachable!("an election is campaigned, not locked"),
    })
}

impl Locker {
    pub(super) fn connect(args: &ClientArgs, options: LockOptions) -> dlock::Result<Locker> {
        let (name, primitive) = (args.lock.as_str(), args.primitive);
        if primitive == Primitive::Redlock {
            return Locker::connect_redlock(args, options);
        }
        let builder = match (args.redis.first(), args.service.as_deref()) {
            (Some(url), _) => dlock::Client::builder(url),
            (None, _) if !args.cluster.is_empty() => {
                dlock::Client::cluster_builder(args.cluster.clone())
            }
            (None, service) => {
                dlock::Client::sentinel_builder(args.sentinel.clone(), service.unwrap_or_default())
            }
        };
        let options = match (args.replicas, args.replica_timeout_ms) {
            (Some(count), Some(ms)) => options.replicas(count, Duration::from_millis(ms)),
            _ => options,
        };
        if primitive == Primitive::Elect {
            return Locker::connect_election(args, builder, options);
        }
        Ok(match args.api {
            Api::Async => {
                let runtime = std::sync::Arc::new(async_runtime());
                let client = runtime.block_on(builder.connect())?;
                let lock = lock_of(&client, primitive, name, options)?;
                let on = runtime.clone();
                Locker {
                    acquire: Box::new(move || {
                        Ok(Held::Async(on.handle().clone(), on.block_on(lock.lock())?))
                    }),
                    shutdown: Box::new(move || runtime.block_on(client.shutdown())),
                }
            }
            Api::Blocking => {
                let client = dlock::blocking::Client::connect_with(builder)?;
                let lock = match primitive {
                    Primitive::Mutex => client.mutex_with(name, options)?.into_any(),
                    Primitive::Fair => client.fair_mutex_with(name, options)?.into_any(),
                    Primitive::Write => client.rwlock_with(name, options)?.writer().into_any(),
                    Primitive::Read => client.rwlock_with(name, options)?.reader().into_any(),
                    Primitive::Reentrant => client.reentrant_mutex_with(name, options)?.into_any(),
                    Primitive::Sem1 | Primitive::Sem3 => client
                        .semaphore_with(name, primitive.limit() as u32, options)?
                        .into_any(),
                    Primitive::Multi => client
                        .multi_lock_with(&[name, Primitive::MULTI_SECOND], options)?
                        .into_any(),
                    Primitive::Redlock => unreachable!("connected by connect_redlock"),
                    Primitive::Elect => unreachable!("connected by connect_election"),
                };
                Locker {
                    acquire: Box::new(move || Ok(Held::Blocking(lock.lock()?))),
                    shutdown: Box::new(move || client.shutdown()),
                }
            }
        })
    }

    /// Campaigns in the election named `--lock`, proclaiming the client's name.
    fn connect_election(
        args: &ClientArgs,
        builder: dlock::ClientBuilder,
        options: LockOptions,
    ) -> dlock::Result<Locker> {
        let value = args.client.clone();
        Ok(match args.api {
            Api::Async => {
                let runtime = std::sync::Arc::new(async_runtime());
                let client = runtime.block_on(builder.connect())?;
                let election = client.election_with(&args.lock, options)?;
                let on = runtime.clone();
                Locker {
                    acquire: Box::new(move || {
                        let leading = on.block_on(election.campaign(&value))?;
                        Ok(Held::AsyncLeading(on.handle().clone(), leading))
                    }),
                    shutdown: Box::new(move || runtime.block_on(client.shutdown())),
                }
            }
            Api::Blocking => {
                let client = dlock::blocking::Client::connect_with(builder)?;
                let election = client.election_with(&args.lock, options)?;
                Locker {
                    acquire: Box::new(move || {
                        Ok(Held::BlockingLeading(election.campaign(&value)?))
                    }),
                    shutdown: Box::new(move || client.shutdown()),
                }
            }
        })
    }

    /// A Redlock over every `--redis` master. A master frozen at connect time would hold
    /// the connect up for the default 5 s: a lease is plenty for a healthy one.
    fn connect_redlock(args: &ClientArgs, options: LockOptions) -> dlock::Result<Locker> {
        let mut builder = dlock::Client::redlock_builder(args.redis.clone())
            .connect_timeout(Duration::from_millis(args.ttl_ms));
        if args.without_fence_raise {
            builder = builder.without_fence_raise();
        }
        Ok(match args.api {
            Api::Async => {
                let runtime = std::sync::Arc::new(async_runtime());
                let redlock = runtime.block_on(builder.connect())?;
                let lock: dlock::AnyLock = redlock.mutex_with(&args.lock, options)?.into();
                let on = runtime.clone();
                Locker {
                    acquire: Box::new(move || {
                        Ok(Held::Async(on.handle().clone(), on.block_on(lock.lock())?))
                    }),
                    shutdown: Box::new(move || runtime.block_on(redlock.shutdown())),
                }
            }
            Api::Blocking => {
                let redlock = dlock::blocking::Redlock::connect_with(builder)?;
                let lock = redlock.mutex_with(&args.lock, options)?.into_any();
                Locker {
                    acquire: Box::new(move || Ok(Held::Blocking(lock.lock()?))),
                    shutdown: Box::new(move || redlock.shutdown()),
                }
            }
        })
    }

    pub(super) fn acquire(&self) -> dlock::Result<Held> {
        (self.acquire)()
    }

    pub(super) fn shutdown(self) {
        (self.shutdown)()
    }
}

/// The runtime an async client runs its lock calls on.
fn async_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
