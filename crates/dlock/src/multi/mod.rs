//! The multi-lock: one guard over several named locks, held all together or not at all
//! (Redisson's `MultiLock`).
//!
//! Each name's lock key gets the string hold the mutex, the fair mutex and the write lock
//! share (the bare token), so a multi-lock and those holders of the same names exclude
//! each other, and each name draws its own fence from its own counter.
//!
//! On one server (a single node, a Sentinel master), and for the names of one Cluster
//! slot, one script (`acquire.lua`) takes every name or none. Across Cluster slots, where
//! no script may reach, the names are taken one slot at a time in one canonical order (by
//! key), and a slot found busy gives back every slot granted before it within the same
//! attempt: no attempt ever waits while holding a part, so two multi-locks over
//! overlapping names never wait for each other until a lease runs out. Across slots the
//! grant is not atomic (another client may see some names taken for a moment), but the
//! outcome is all or nothing.
//!
//! Waiting: a busy attempt listens on every name's release channel and tries the whole
//! set again at the first release. It does not queue in the names' fair queues: a fair
//! waiter of one of the names may be served first.

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::LockKeys;
use crate::lock::Lock;
use crate::notifier::WakeSet;
use crate::options::LockOptions;
use crate::raw::private::{HandleForms, KindProtocol, Placement, Queueing, RawProtocol, Watching};
use crate::raw::{held_on, linger_on, Lingered, Waiting};
use crate::raw::{Attempt, HoldKind, LockCore};
use crate::renew::Renewer;
use crate::renew::{Renew, Renewal};
use crate::script::ScriptCall;
use crate::session::Session;

pub(crate) mod scripts;
use scripts::{MultiAcquire, MultiRelease};

/// The most names one multi-lock takes (one script's keys stay few).
pub const MAX_MULTI_NAMES: usize = 64;

/// A handle on several named locks taken together: the one [`Lock`] handle over
/// [`RawMulti`]. Made by [`Client::multi_lock`]; cheap to clone.
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// // Moving money: both accounts' locks, in any order the callers name them.
/// let both = client.multi_lock(&["account:17", "account:42"])?;
/// let guard = both.lock().await?;
/// for (name, fence) in guard.fences().await? {
///     // ... pass each account's fence to the storage that keeps it ...
///     # let _ = (name, fence);
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type MultiLock = Lock<RawMulti>;

/// Proof of holding every name of a [`MultiLock`]. See [`Guard`] for what every guard
/// does: [`Guard::fence`] is the first name's fence, [`Guard::fences`] every name's.
pub type MultiGuard = Guard<RawMulti>;

/// The protocol of a multi-lock: the kind of a [`MultiLock`] handle and its
/// [`MultiGuard`].
#[derive(Debug, Clone)]
pub struct RawMulti {
    /// The first name's lock, and the client, options and validation every lock has.
    core: LockCore,
    /// Every name's keys, in the order given (the first is `core`'s).
    names: Arc<[Arc<LockKeys>]>,
    /// The names after the first, whose keys hold the hold too (renewal, fences).
    others: Arc<[LockKeys]>,
    /// Indices into `names`, one group per script call, in the order they are taken: one
    /// group of all names except on a Cluster, where each group is one slot's names and
    /// the groups follow their smallest keys.
    groups: Arc<[Vec<usize>]>,
}

impl RawMulti {
    fn new(client: Client, names: &[&str], options: LockOptions) -> Result<RawMulti> {
        if names.len() < 2 || names.len() > MAX_MULTI_NAMES {
            return Err(Error::InvalidArgument(format!(
                "a multi-lock takes 2 to {MAX_MULTI_NAMES} names, not {}; for one name use a mutex",
                names.len()
            )));
        }
        let core = LockCore::new(client, names[0], options)?;
        let mut all = vec![core.keys.clone()];
        for name in &names[1..] {
            all.push(Arc::new(LockKeys::new(core.client.prefix(), name)?));
        }
        let mut keys: Vec<&str> = all.iter().map(|keys| keys.key.as_str()).collect();
        keys.sort_unstable();
        if let Some(twice) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(Error::InvalidArgument(format!(
                "a multi-lock's names must be distinct: {:?} is named twice",
                twice[0]
            )));
        }
        let sharded = crate::script::Target::backend(&core.client).sharded_pubsub();
        let groups = groups_of(&all, sharded);
        Ok(RawMulti {
            others: all[1..].iter().map(|keys| (**keys).clone()).collect(),
            names: all.into(),
            groups: groups.into(),
            core,
        })
    }

    /// The names, in the order given.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|keys| keys.name.as_str())
    }

    /// The keys of `group`'s names.
    fn group_names(&self, group: &[usize]) -> Vec<&LockKeys> {
        group.iter().map(|&index| &*self.names[index]).collect()
    }

    /// Gives back what `token` holds of `group`; how many of its names it held.
    async fn release_group(&self, token: &str, group: &[usize]) -> Result<usize> {
        let names = self.group_names(group);
        let released = MultiRelease {
            names: &names,
            token,
        }
        .run(&self.core.client)
        .await?;
        usize::try_from(released).map_err(|_| Error::unexpected_reply(released))
    }

    /// Takes `group` for `token`: its fences (in the group's order), or the busy reply.
    async fn acquire_group(
        &self,
        token: &str,
        group: &[usize],
    ) -> Result<Result<Vec<u64>, Attempt>> {
        let names = self.group_names(group);
        let reply = MultiAcquire {
            names: &names,
            token,
            lease_ms: self.core.options.kept_ms(),
        }
        .run(&self.core.client)
        .await?;
        match reply.split_first() {
            Some((1, fences)) if fences.len() == group.len() && fences.iter().all(|f| *f > 0) => {
                Ok(Ok(fences.iter().map(|f| *f as u64).collect()))
            }
            Some((0, _)) => Ok(Err(Attempt::from_reply(&reply)?)),
            _ => Err(Error::unexpected_reply(reply)),
        }
    }
}

/// The groups `names` are taken in: all in one on one server; on a Cluster (`sharded`)
/// one per slot, the groups ordered by their smallest key, so every multi-lock over
/// overlapping names takes their slots in the same order.
fn groups_of(names: &[Arc<LockKeys>], sharded: bool) -> Vec<Vec<usize>> {
    if !sharded {
        return vec![(0..names.len()).collect()];
    }
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|a, b| names[*a].key.cmp(&names[*b].key));
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for index in order {
        let slot = crate::keys::hash_slot(&names[index].key);
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(index),
            None => groups.push((slot, vec![index])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

impl KindProtocol for RawMulti {
    fn kind_name(&self) -> &'static str {
        crate::kind::MULTI
    }

    /// The first name's channel: [`Watching::watch`] listens on every name's.
    fn waiting(&self) -> Waiting<'_> {
        Waiting::Channel(&self.core.keys.channel)
    }

    async fn attempt(&self, token: &str, _join_queue: bool) -> Result<Attempt> {
        let mut fences = vec![0u64; self.names.len()];
        for (taken, group) in self.groups.iter().enumerate() {
            match self.acquire_group(token, group).await? {
                Ok(drawn) => {
                    for (&index, fence) in group.iter().zip(drawn) {
                        fences[index] = fence;
                    }
                }
                Err(busy) => {
                    // All or nothing across slots too: the slots granted before this one
                    // are given back before the wait, never held while waiting. (If this
                    // fails the wait's clean-up gives them back by the token.)
                    for group in self.groups[..taken].iter().rev() {
                        self.release_group(token, group).await?;
                    }
                    return Ok(busy);
                }
            }
        }
        Ok(Attempt::GrantedAll { fences })
    }

    async fn release(&self, token: &str) -> Result<()> {
        let mut released = 0;
        let mut failed = None;
        // Every group is tried, whatever an earlier one answered.
        for group in self.groups.iter() {
            match self.release_group(token, group).await {
                Ok(count) => released += count,
                Err(err) => failed = Some(err),
            }
        }
        if let Some(err) = failed {
            return Err(err);
        }
        if released == self.names.len() {
            Ok(())
        } else {
            // Some name was not ours any more (its lease ended, or it was taken).
            Err(self.lost())
        }
    }
}

impl RawMulti {
    fn lost(&self) -> Error {
        Error::Lost {
            name: self.core.keys.name.clone(),
        }
    }
}

impl RawProtocol for RawMulti {
    async fn extend(&self, token: &str, ttl: Duration) -> Result<()> {
        crate::lease::validate_ttl(ttl)?;
        let kept = self.core.options.kept_for(ttl);
        let mut lost = false;
        for group in self.groups.iter() {
            let holds: Vec<Renewal> = group
                .iter()
                .map(|&index| Renewal {
                    key: &self.names[index].key,
                    kind: HoldKind::String,
                    token,
                    lease_ms: kept.as_millis() as u64,
                })
                .collect();
            let renewed = match (Renew { holds: &holds }).run(&self.core.client).await {
                Err(err @ Error::NotReplicated { .. }) => {
                    // As any kind's extend: never keep a hold the replicas do not have.
                    let _ = self.release(token).await;
                    return Err(err);
                }
                renewed => renewed?,
            };
            lost |= renewed.iter().any(|status| *status != 1);
        }
        if lost {
            return Err(self.lost());
        }
        Ok(())
    }

    async fn linger(&self, token: &str, rest: Duration) -> Result<()> {
        let mut held = true;
        for keys in self.names.iter() {
            let lingered =
                linger_on(&self.core.client, keys, HoldKind::String, token, rest).await?;
            held &= lingered != Lingered::NotHeld;
        }
        if held {
            Ok(())
        } else {
            Err(self.lost())
        }
    }

    async fn is_held(&self, token: &str) -> Result<bool> {
        for keys in self.names.iter() {
            if !held_on(&self.core.client, &keys.key, HoldKind::String, token).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn draw_fence(&self, _token: &str) -> Result<u64> {
        Err(Error::unexpected_reply("a fence missing from a grant"))
    }
}

impl Placement for RawMulti {
    fn session(&self) -> &Session {
        self.core.client.session()
    }

    fn keys(&self) -> &Arc<LockKeys> {
        &self.core.keys
    }

    fn options(&self) -> &LockOptions {
        &self.core.options
    }

    fn renewer(&self) -> &Renewer {
        self.core.client.renewer()
    }

    fn hold_key(&self) -> (&str, HoldKind) {
        (&self.core.keys.key, HoldKind::String)
    }

    fn other_holds(&self) -> &[LockKeys] {
        &self.others
    }

    fn one_server(&self) -> Option<&Client> {
        // Guarded writes check one lock key: a multi-lock's hold is at several.
        None
    }
}

impl Watching for RawMulti {
    async fn watch(&self, _channel: &str, _token: Option<&str>, _budget: Duration) -> WakeSet {
        // A release of any of the names may free the whole set: every channel, any one
        // word wakes (bounded by each subscription's own acknowledgement timeout).
        let notifier = self.core.client.notifier();
        let mut watches = Vec::with_capacity(self.names.len());
        for keys in self.names.iter() {
            watches.push(notifier.watch(&keys.channel, None).await);
        }
        WakeSet::quorum(watches, 1)
    }

    fn watch_if_live(&self, _channel: &str, _token: Option<&str>) -> Option<WakeSet> {
        let notifier = self.core.client.started_notifier()?;
        let watches = (self.names.iter())
            .map(|keys| notifier.watch_if_live(&keys.channel, None))
            .collect::<Option<Vec<_>>>()?;
        Some(WakeSet::quorum(watches, 1))
    }
}

impl Queueing for RawMulti {}

impl HandleForms for RawMulti {
    fn fence_at_grant(&self) -> Self {
        // Every name's fence is drawn with the grant already.
        self.clone()
    }
}

impl Client {
    /// A multi-lock over `names` (2 to [`MAX_MULTI_NAMES`], distinct) with default
    /// options: one guard that holds every name or none, each name with the mutex's
    /// string hold (so it excludes and is excluded by a mutex, a fair mutex or a write
    /// lock of that name) and its own fence. One lease for all, renewed together; the
    /// lost signal fires when any name is lost.
    ///
    /// On one server, and for names in one Cluster slot, all names are taken by one
    /// script. Across Cluster slots they are taken slot by slot in one canonical order,
    /// and a busy slot gives back what was taken before it, so multi-locks over
    /// overlapping names never deadlock; a reader may then see some names taken for a
    /// moment. A waiter wakes at the release of any name and tries them all again; it
    /// does not queue in the names' fair queues (a fair waiter may be served first).
    ///
    /// ```no_run
    /// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
    /// // Two transfers naming the accounts in opposite orders never deadlock.
    /// let guard = client.multi_lock(&["account:42", "account:17"])?.lock().await?;
    /// let fences = guard.fences().await?; // [("account:42", f1), ("account:17", f2)]
    /// # let _ = fences;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock(&self, names: &[&str]) -> Result<MultiLock> {
        self.multi_lock_with(names, LockOptions::default())
    }

    /// A multi-lock over `names` with the given options (see [`Client::multi_lock`]).
    pub fn multi_lock_with(&self, names: &[&str], options: LockOptions) -> Result<MultiLock> {
        Ok(Lock::of(RawMulti::new(self.clone(), names, options)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<Arc<LockKeys>> {
        (names.iter())
            .map(|name| Arc::new(LockKeys::new("", name).unwrap()))
            .collect()
    }

    #[test]
    fn one_server_takes_every_name_in_one_group() {
        assert_eq!(
            groups_of(&keys(&["b", "a", "c"]), false),
            vec![vec![0, 1, 2]]
        );
    }

    #[test]
    fn cluster_groups_follow_the_keys_in_one_order_whatever_order_names_come_in() {
        let one = groups_of(&keys(&["{t}b", "x", "{t}a"]), true);
        assert_eq!(one, vec![vec![1], vec![2, 0]]);
        let other = groups_of(&keys(&["{t}a", "x", "{t}b"]), true);
        assert_eq!(other, vec![vec![1], vec![0, 2]]);
    }
}
