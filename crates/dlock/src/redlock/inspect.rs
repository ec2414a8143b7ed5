//! What each master of a [`Redlock`] holds for a lock: [`Client::inspect`] over
//! independent masters, with the holder a majority agrees on.
//!
//! [`Client::inspect`]: crate::Client::inspect

use std::collections::HashMap;
use std::sync::Mutex as StdMutex;

use futures_util::future::join_all;

use super::Redlock;
use crate::error::{Error, Result};
use crate::inspect::{Holder, LockInfo, LockKind};
use crate::keys::LockKeys;

/// One lock as every master of a [`Redlock`] sees it; made by [`Redlock::inspect`] and
/// [`Redlock::find_locks`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedlockInfo {
    /// The lock name (without prefix).
    pub name: String,
    /// How many masters must agree for a grant.
    pub quorum: usize,
    /// Each master's view, in the order the masters were given.
    pub masters: Vec<MasterView>,
}

/// One master's view of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterView {
    /// The master's URL, without its password.
    pub master: String,
    /// What it holds for the lock, or why it did not say (unreachable, timed out, ...).
    pub info: std::result::Result<LockInfo, String>,
}

impl RedlockInfo {
    /// The holder a majority of all masters agree on (a mutex hold with one token on at
    /// least [`quorum`](RedlockInfo::quorum) of them), and on how many masters it is.
    pub fn majority_holder(&self) -> Option<(&Holder, usize)> {
        let holders: Vec<&Holder> = self
            .answered()
            .filter(|lock| lock.kind == LockKind::Exclusive)
            .flat_map(|lock| lock.holders.first())
            .collect();
        holders.iter().find_map(|holder| {
            let count = holders.iter().filter(|h| h.token == holder.token).count();
            (count >= self.quorum).then_some((*holder, count))
        })
    }

    /// The largest fencing counter among the masters that answered.
    pub fn last_fence(&self) -> u64 {
        self.answered()
            .map(|lock| lock.last_fence)
            .max()
            .unwrap_or(0)
    }

    /// The views of the masters that answered.
    pub fn answered(&self) -> impl Iterator<Item = &LockInfo> {
        self.masters
            .iter()
            .filter_map(|view| view.info.as_ref().ok())
    }
}

/// What one look over the masters learned: the masters that could not be connected to,
/// and why. They are not tried again within the look, so a master that is down costs its
/// connect timeout once per look, not once per lock.
#[derive(Default)]
struct Look {
    down: StdMutex<HashMap<usize, String>>,
}

/// Why a master has no answer, and the request's own error (`None`: not connected).
struct Failure {
    message: String,
    error: Option<Error>,
}

impl Failure {
    fn of(error: Error) -> Failure {
        Failure {
            message: error.to_string(),
            error: Some(error),
        }
    }
}

type Views<T> = Vec<(String, std::result::Result<T, Failure>)>;

impl Redlock {
    /// Describes the lock `name` on every master at once, as
    /// [`Client::inspect`](crate::Client::inspect) does on one, without changing it. A
    /// master that cannot be reached is shown with why; the call fails only when no master
    /// answered (a refusal such as an ACL as the master said it, otherwise
    /// [`Error::NoQuorum`] naming each master's failure), at once for a master that is
    /// misconfigured (credentials, a server too old, not an independent master), and with
    /// [`Error::Closed`] after [`shutdown`](Redlock::shutdown).
    pub async fn inspect(&self, name: &str) -> Result<RedlockInfo> {
        Ok(self.inspect_all(&[name]).await?.remove(0))
    }

    /// [`Redlock::inspect`] for each of `names`, in one look: a master that cannot be
    /// reached is tried once, not once per name.
    pub async fn inspect_all(&self, names: &[&str]) -> Result<Vec<RedlockInfo>> {
        self.open_for_looking()?;
        for name in names {
            LockKeys::new(&self.inner.prefix, name)?;
        }
        let look = Look::default();
        let mut locks = Vec::with_capacity(names.len());
        for name in names {
            locks.push(self.inspect_in(&look, name).await?);
        }
        Ok(locks)
    }

    /// Every lock whose name matches the glob `pattern` on any master (`SCAN`, never
    /// `KEYS`), each described on every master, sorted by name, in one look. Fails like
    /// [`Redlock::inspect`].
    pub async fn find_locks(&self, pattern: &str) -> Result<Vec<RedlockInfo>> {
        self.open_for_looking()?;
        let look = Look::default();
        let found = self
            .on_each_master(&look, pattern, |client, pattern| async move {
                client.find_locks(&pattern).await
            })
            .await?;
        let names: std::collections::BTreeSet<String> = found
            .into_iter()
            .flat_map(|(_, answer)| answer.into_iter().flatten())
            .map(|lock| lock.name)
            .collect();
        let mut locks = Vec::with_capacity(names.len());
        for name in names {
            locks.push(self.inspect_in(&look, &name).await?);
        }
        Ok(locks)
    }

    fn open_for_looking(&self) -> Result<()> {
        match self.inner.session.is_closed() {
            true => Err(Error::Closed),
            false => Ok(()),
        }
    }

    async fn inspect_in(&self, look: &Look, name: &str) -> Result<RedlockInfo> {
        let keys = LockKeys::new(&self.inner.prefix, name)?;
        let answers = self
            .on_each_master(look, name, |client, name| async move {
                client.inspect(&name).await
            })
            .await?;
        Ok(RedlockInfo {
            name: keys.name.clone(),
            quorum: self.quorum(),
            masters: answers
                .into_iter()
                .map(|(master, info)| MasterView {
                    master,
                    info: info.map_err(|failure| failure.message),
                })
                .collect(),
        })
    }

    /// Runs `request` with `argument` on every master at once, connecting those not
    /// connected yet (each connect bounded by its connect timeout, each request by its
    /// response timeout): each master's label and answer, or why it has none. Fails at
    /// once for a master that is misconfigured, and when no master answered.
    async fn on_each_master<T, F, Fut>(
        &self,
        look: &Look,
        argument: &str,
        request: F,
    ) -> Result<Views<T>>
    where
        F: Fn(crate::client::Client, String) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let answers = join_all(self.inner.nodes.iter().enumerate().map(|(index, node)| {
            let request = &request;
            async move {
                let known_down = look.down.lock().unwrap().get(&index).cloned();
                let answer = match known_down {
                    Some(message) => Ok(Err(Failure {
                        message,
                        error: None,
                    })),
                    None => match node.client().await {
                        // Misconfiguration is said at once, not shown as one row.
                        Err(err) if !err.is_transient() => Err(err),
                        Err(err) => {
                            look.down.lock().unwrap().insert(index, err.to_string());
                            Ok(Err(Failure::of(err)))
                        }
                        Ok(client) => Ok(request(client, argument.to_string())
                            .await
                            .map_err(Failure::of)),
                    },
                };
                (node.label.clone(), answer)
            }
        }))
        .await;
        let mut views = Vec::with_capacity(answers.len());
        for (label, answer) in answers {
            match answer {
                Err(misconfigured) => return Err(misconfigured),
                Ok(answer) => views.push((label, answer)),
            }
        }
        if views.iter().all(|(_, answer)| answer.is_err()) {
            return Err(self.nobody_answered(views));
        }
        Ok(views)
    }

    /// The error for a request no master answered: a refusal (an ACL, a wrong type) as it
    /// is, otherwise "no quorum" naming every master and its failure.
    fn nobody_answered<T>(&self, views: Views<T>) -> Error {
        let mut whys = Vec::with_capacity(views.len());
        for (label, answer) in views {
            match answer {
                Err(Failure {
                    error: Some(err), ..
                }) if !err.is_transient() => return err,
                Err(failure) => whys.push(format!("{label}: {}", failure.message)),
                Ok(_) => {}
            }
        }
        Error::NoQuorum {
            name: None,
            needed: self.quorum(),
            reached: 0,
            nodes: self.nodes(),
            failures: whys,
        }
    }
}
