//! Looking at locks from outside: who holds a lock, for how long, what is queued; finding
//! locks by pattern; and an operator's forced release.

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::queue::QueueKeys;
use crate::script::ScriptCall;

pub(crate) mod scripts;
use scripts::{ForceRelease, Inspect};

/// What holds a lock's key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// Nothing: the lock is free.
    Free,
    /// A token string: a mutex, fair mutex or write lock (they share the format), or
    /// another client's `SET NX` lock.
    Exclusive,
    /// A reentrant mutex.
    Reentrant,
    /// Read holds of a read-write lock.
    Read,
    /// Semaphore permits.
    Semaphore,
    /// A value dlock did not write (its Redis type).
    Other(String),
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LockKind::Free => "free",
            LockKind::Exclusive => "exclusive",
            LockKind::Reentrant => "reentrant",
            LockKind::Read => "read",
            LockKind::Semaphore => "semaphore",
            LockKind::Other(kind) => kind,
        })
    }
}

/// One holder of a lock, as [`Client::inspect`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The hold's token.
    pub token: String,
    /// The holder label in front of the token, if its client set one
    /// ([`ClientBuilder::holder_label`](crate::ClientBuilder::holder_label)); the `dlock`
    /// CLI's is `dlock@host:pid:start`.
    pub label: Option<String>,
    /// The owner id of a read hold or reentrant hold.
    pub owner: Option<String>,
    /// How long its lease still runs (`None`: no expiry).
    pub remaining: Option<Duration>,
    /// How many permits a semaphore permit is worth (more than 1 when taken by
    /// [`Semaphore::lock_many`](crate::Semaphore::lock_many)); 1 for every other hold.
    pub weight: u32,
}

/// A snapshot of one lock, from [`Client::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock name (without prefix).
    pub name: String,
    /// The Redis key.
    pub key: String,
    /// What holds the key.
    pub kind: LockKind,
    /// The holders (one per hold: a reentrant owner's nested holds are listed each).
    pub holders: Vec<Holder>,
    /// The key's own remaining lease (`None` when free or without expiry).
    pub remaining: Option<Duration>,
    /// The last fencing token drawn for this name (0 if never).
    pub last_fence: u64,
    /// Waiters in the queue (fair mutex, write lock, semaphore).
    pub queued: u64,
}

fn millis(text: &str) -> Option<Duration> {
    text.parse::<i64>()
        .ok()
        .filter(|ms| *ms >= 0)
        .map(|ms| Duration::from_millis(ms as u64))
}

impl Client {
    /// Describes the lock `name`: kind, holders with their remaining leases, the last
    /// fencing token, queued waiters. Changes nothing.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let keys = LockKeys::new(self.prefix(), name)?;
        let queue = QueueKeys::new(&keys);
        // Another client's value need not be text: read bytes, show them lossily.
        let reply = Inspect {
            keys: &keys,
            queue: &queue,
        }
        .run(self)
        .await?;
        let reply: Vec<String> = reply
            .iter()
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .collect();
        if reply.len() < 4 || !(reply.len() - 4).is_multiple_of(4) {
            return Err(Error::unexpected_reply(reply));
        }
        let kind = match reply[0].as_str() {
            "free" => LockKind::Free,
            "string" => LockKind::Exclusive,
            "reentrant" => LockKind::Reentrant,
            "read" => LockKind::Read,
            "semaphore" => LockKind::Semaphore,
            other => LockKind::Other(other.to_string()),
        };
        let holders = reply[4..]
            .chunks_exact(4)
            .map(|h| Holder {
                // A label only in front of a token of dlock's form: another client's token
                // may contain '/', and the part before it is no label but secret.
                label: crate::session::token_tag_and_random(&h[0])
                    .and(h[0].rsplit_once('/'))
                    .map(|(label, _)| label.to_string()),
                token: h[0].clone(),
                remaining: millis(&h[1]),
                owner: (!h[2].is_empty()).then(|| h[2].clone()),
                weight: match kind {
                    LockKind::Semaphore => crate::semaphore::permit_weight(&h[0]),
                    _ => 1,
                },
            })
            .collect();
        Ok(LockInfo {
            name: name.to_string(),
            key: keys.key,
            kind,
            holders,
            remaining: millis(&reply[1]),
            last_fence: reply[2].parse().unwrap_or(0),
            queued: reply[3].parse().unwrap_or(0),
        })
    }

    /// The locks whose name matches the glob `pattern` (Redis `MATCH` syntax: `*`, `?`,
    /// `[...]`), found with `SCAN` (never `KEYS`), the client prefix applied and stripped,
    /// each described as by [`Client::inspect`]. Companion keys (fencing counters, queues),
    /// values of other types and keys that are not UTF-8 text (no lock's: lock names are
    /// text; how many is logged at info level) are left out; sorted by name.
    pub async fn find_locks(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let escaped: String = self
            .prefix()
            .chars()
            .flat_map(|c| {
                let special = matches!(c, '*' | '?' | '[' | ']' | '\\');
                special
                    .then_some('\\')
                    .into_iter()
                    .chain(std::iter::once(c))
            })
            .collect();
        let pattern = format!("{escaped}{pattern}");
        // Keys that are not UTF-8 are skipped (and counted in the log) by the scan.
        let mut keys = self
            .inner
            .backend
            .scan(&pattern)
            .await
            .map_err(|e| Error::from_redis("SCAN", e))?
            .keys;
        keys.sort();
        keys.dedup();
        let mut locks = Vec::new();
        for key in keys {
            let Some(name) = key.strip_prefix(self.prefix()) else {
                continue;
            };
            if crate::keys::is_companion(&key) {
                continue;
            }
            let Ok(info) = self.inspect(name).await else {
                continue;
            };
            if !matches!(info.kind, LockKind::Other(_) | LockKind::Free) {
                locks.push(info);
            }
        }
        Ok(locks)
    }

    /// An operator's forced release of `name`, whoever holds it: deletes the lock and
    /// draws a new fencing token, so storage that checks fences refuses the evicted
    /// holder's late writes; waiters are woken. Returns that fencing token, or `None` when
    /// nothing held the name. The evicted holder learns of it at its next renewal (its
    /// lost signal fires) — until then it may believe it holds the lock, which is why the
    /// fence is bumped.
    pub async fn force_release(&self, name: &str) -> Result<Option<u64>> {
        let keys = LockKeys::new(self.prefix(), name)?;
        let queue = QueueKeys::new(&keys);
        // A resend finds this call's outcome in the record only while the record lives
        // (a minute after the last forced release of the name): not resent later, or it
        // could evict a holder granted since (as a guarded batch is not: script.rs).
        let record_life = Duration::from_secs(60);
        let request = crate::session::random_token();
        let fence: u64 = ForceRelease {
            keys: &keys,
            queue: &queue,
            request: &request,
        }
        .call()
        .resend_within(record_life)
        .run(self)
        .await?;
        if fence > 0 {
            tracing::warn!(target: crate::observe::OUTCOME_TARGET, lock = name, fence, "lock released by force");
        }
        Ok((fence > 0).then_some(fence))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn companions_are_recognised() {
        assert!(crate::keys::is_companion("{job}:fence"));
        assert!(crate::keys::is_companion("{job}:queue-leases"));
        assert!(crate::keys::is_companion("{job}:expiry"));
        assert!(crate::keys::is_companion("{tenant}-job:queue"));
        assert!(crate::keys::is_companion("{job}:data:balance"));
        assert!(crate::keys::is_companion("{tenant}-job:data:a:b"));
        assert!(crate::keys::is_companion("{job}:applied:a1b2c3d4.0123"));
        assert!(!crate::keys::is_companion("job:data:balance"));
        assert!(!crate::keys::is_companion("job"));
        assert!(!crate::keys::is_companion("reports:fence"));
    }
}
