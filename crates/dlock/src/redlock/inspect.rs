//! What each master of a [`Redlock`] holds for a lock: [`Client::inspect`] over
//! independent masters, with the holder a majority agrees on.
//!
//! [`Client::inspect`]: crate::Client::inspect

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

impl Redlock {
    /// Describes the lock `name` on every master at once, as
    /// [`Client::inspect`](crate::Client::inspect) does on one, without changing it. A
    /// master that cannot be reached is shown with why; the call fails only when no master
    /// answered (a refusal such as an ACL as the master said it, otherwise
    /// [`Error::NoQuorum`] naming each master's failure), or at once for a master that is
    /// misconfigured (credentials, a server too old, not a master).
    pub async fn inspect(&self, name: &str) -> Result<RedlockInfo> {
        let keys = LockKeys::new(&self.inner.prefix, name)?;
        let answers = self
            .on_each_master(
                name,
                |client, name| async move { client.inspect(&name).await },
            )
            .await?;
        Ok(self.across(keys.name.clone(), answers))
    }

    /// Every lock whose name matches the glob `pattern` on any master (`SCAN`, never
    /// `KEYS`), each described on every master; sorted by name. Fails like
    /// [`Redlock::inspect`].
    pub async fn find_locks(&self, pattern: &str) -> Result<Vec<RedlockInfo>> {
        let found = self
            .on_each_master(pattern, |client, pattern| async move {
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
            locks.push(self.inspect(&name).await?);
        }
        Ok(locks)
    }

    /// Runs `request` with `argument` on every master at once (connecting those not
    /// connected yet), each within its connect and response timeouts: each master's label
    /// and answer, or why it has none. Fails at once for a master that is misconfigured,
    /// and when no master answered.
    async fn on_each_master<T, F, Fut>(
        &self,
        argument: &str,
        request: F,
    ) -> Result<Vec<(String, std::result::Result<T, Error>)>>
    where
        F: Fn(crate::Client, String) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let answers = join_all(self.inner.nodes.iter().map(|node| {
            let request = &request;
            async move {
                let bound = node.builder.request_bound();
                let answer = tokio::time::timeout(bound, async {
                    match node.client().await {
                        // Misconfiguration is said at once, not shown as one row.
                        Err(err) if !err.is_transient() => Err(err),
                        Err(err) => Ok(Err(err)),
                        Ok(client) => Ok(request(client, argument.to_string()).await),
                    }
                })
                .await
                .unwrap_or_else(|_| Ok(Err(super::node_timed_out(bound))));
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
    fn nobody_answered<T>(&self, views: Vec<(String, std::result::Result<T, Error>)>) -> Error {
        let mut whys = Vec::with_capacity(views.len());
        for (label, answer) in views {
            match answer {
                Err(err) if !err.is_transient() => return err,
                Err(err) => whys.push(format!("{label}: {err}")),
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

    fn across(
        &self,
        name: String,
        answers: Vec<(String, std::result::Result<LockInfo, Error>)>,
    ) -> RedlockInfo {
        RedlockInfo {
            name,
            quorum: self.quorum(),
            masters: answers
                .into_iter()
                .map(|(master, info)| MasterView {
                    master,
                    info: info.map_err(|err| err.to_string()),
                })
                .collect(),
        }
    }
}
