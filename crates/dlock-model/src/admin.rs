//! The scripts that look at a lock or act on it from outside its holder, as transitions
//! and queries on one lock name's keys ([`Server`]), each written from its script (named
//! on it): whether a hold is still held (renew/held.lua), a release by token whatever
//! kind took it (release_token.lua), what holds the lock (inspect/inspect.lua), what a key
//! holds (describe.lua), the live read holds or permits (entries_live.lua), and an
//! operator's forced release (inspect/force_release.lua) with the record that makes its
//! resend evict nobody. `tests/conformance/admin.rs` and `tokens.rs` run the real scripts
//! beside these.

use crate::mutant::Mutant;
use crate::scripts::{Server, Time, Token};

/// How a hold is recorded at the lock key (renew/holds.lua's kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// 's': the key is a string holding the token (mutex, fair mutex, write lock).
    String,
    /// 'r': the key is a reentrant hash with a field for the hold.
    Reentrant,
    /// 'e': the key is a hash of leased entries (read holds, permits).
    Entry,
}

impl Form {
    /// The code the scripts take.
    pub fn code(self) -> &'static str {
        match self {
            Form::String => "s",
            Form::Reentrant => "r",
            Form::Entry => "e",
        }
    }
}

/// Which kind a hash of leased entries is (its `~kind` field): the model's
/// [`Server::entries`] does not say, the caller does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Entries {
    /// Read holds of a read-write lock.
    Read,
    /// Semaphore permits.
    Semaphore,
}

impl Entries {
    /// The `~kind` field's value.
    pub fn name(self) -> &'static str {
        match self {
            Entries::Read => "read",
            Entries::Semaphore => "semaphore",
        }
    }
}

/// A DLOCKTYPE error: the key holds another kind than the script can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongKind;

/// What renew/linger.lua did with a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lingered {
    /// Not held: nothing touched (0).
    NotHeld,
    /// Held until the rest ends (1).
    Held,
    /// A reentrant hold whose owner has others, given back at once (2).
    GivenBack,
}

impl Lingered {
    /// The script's reply.
    pub fn code(self) -> i64 {
        match self {
            Lingered::NotHeld => 0,
            Lingered::Held => 1,
            Lingered::GivenBack => 2,
        }
    }
}

/// What inspect.lua answers, in the model's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// Its first word: 'free', 'string', 'reentrant', 'read', 'semaphore'.
    pub kind: &'static str,
    /// The holders it lists, sorted: a string's token, every hold of a reentrant hash,
    /// the live entries of a hash of leased entries (ended ones are left out).
    pub holders: Vec<Token>,
    /// The last fence drawn (0: none).
    pub last_fence: u64,
    /// The waiters in the queue, lapsed ones not yet purged included (ZCARD).
    pub queued: usize,
}

/// One call in the record of the last forced releases (`<name>:forced`, a line
/// `<request id>|<fence>` each, newest first): a resend with the same request id answers
/// its fence and evicts nobody.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Forced {
    /// The request id of the call that wrote it.
    pub request: u8,
    /// What that call answered (0: nothing held the name).
    pub fence: u64,
}

/// How many calls the record of forced releases keeps (force_release.lua `RECORDS`).
pub const FORCED_RECORDS: usize = 16;

impl Server {
    /// Whether a hash lives at the lock key: a reentrant hash, or leased entries of which
    /// one has not ended (the hash expires with its latest lease).
    pub fn hash_at(&self, now: Time) -> bool {
        self.reentrant_at(now).is_some() || self.entries.values().any(|&(end, _)| end > now)
    }

    /// Whether the lock key exists at all.
    pub fn key_exists(&self, now: Time) -> bool {
        self.holder(now).is_some() || self.hash_at(now)
    }

    /// renew/held.lua with renew/holds.lua `hold_state`: whether the hold `token` of
    /// `form` is held now. Another kind at the key is "not held" (its type error is
    /// caught). A reentrant hold ('r') is a field of the hash, which a hash of entries
    /// also has for an entry not yet purged. (An entry's form asked of a reentrant hash is
    /// not modelled: a hold is asked with its own kind's form.)
    pub fn held(&self, form: Form, token: Token, now: Time) -> bool {
        match form {
            Form::String => self.holder(now) == Some(token),
            Form::Reentrant => {
                self.reentrant_at(now)
                    .is_some_and(|r| r.holds.contains(&token))
                    || (self.hash_at(now) && self.entries.contains_key(&token))
            }
            Form::Entry => self.live_entries(now).any(|t| t == token),
        }
    }

    /// renew/linger.lua (`LockOptions::hold_at_least`): the hold `token` of `form`, if
    /// held, stays until `rest` from now, its lease set to end then (shorter or longer);
    /// but a reentrant hold whose owner has other holds is given back at once, as its
    /// release would. Another kind at the key is a type error. (An entry's form is not
    /// asked of a reentrant hash, nor a reentrant hold's of a hash of entries: the library
    /// never does.)
    pub fn linger(
        &mut self,
        form: Form,
        token: Token,
        now: Time,
        rest: Time,
    ) -> Result<Lingered, WrongKind> {
        let wrong_kind = match form {
            Form::String => self.hash_at(now),
            Form::Reentrant | Form::Entry => self.holder(now).is_some(),
        };
        if wrong_kind {
            return Err(WrongKind);
        }
        let lingered = match form {
            Form::String if self.holder(now) == Some(token) => {
                self.lock = Some((token, now + rest));
                Lingered::Held
            }
            Form::Entry => match self.entries.get_mut(&token) {
                Some((end, _)) if *end > now => {
                    *end = now + rest;
                    Lingered::Held
                }
                _ => Lingered::NotHeld,
            },
            Form::Reentrant => match self.reentrant.as_mut().filter(|r| r.expires > now) {
                Some(hash) if hash.holds.contains(&token) && hash.count > 1 => {
                    hash.holds.remove(&token);
                    hash.count -= 1;
                    Lingered::GivenBack
                }
                Some(hash) if hash.holds.contains(&token) => {
                    hash.expires = now + rest;
                    Lingered::Held
                }
                _ => Lingered::NotHeld,
            },
            Form::String => Lingered::NotHeld,
        };
        Ok(lingered)
    }

    /// release_token.lua: a string hold released by its token whatever kind took it
    /// (queue.lua `release_exclusive`, as the fair mutex's release: handed to the first
    /// live waiter in line, if any). A hash at the key is a type error. Returns whether it
    /// released, and the waiter handed the lock with its fence.
    pub fn release_by_token(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> Result<(bool, Option<(Token, u64)>), WrongKind> {
        if self.hash_at(now) {
            return Err(WrongKind);
        }
        Ok(self.fair_release(token, now, ttl, mutants))
    }

    /// inspect/inspect.lua: what holds the lock key, changing nothing. A hash of entries
    /// is of kind `entries`.
    pub fn inspect(&self, now: Time, entries: Entries) -> Inspection {
        let (kind, mut holders): (&'static str, Vec<Token>) = if let Some(holder) = self.holder(now)
        {
            ("string", vec![holder])
        } else if let Some(hash) = self.reentrant_at(now) {
            ("reentrant", hash.holds.iter().copied().collect())
        } else if self.hash_at(now) {
            (entries.name(), self.live_entries(now).collect())
        } else {
            ("free", Vec::new())
        };
        holders.sort();
        Inspection {
            kind,
            holders,
            last_fence: self.counter,
            queued: self.queue.len(),
        }
    }

    /// describe.lua on the lock key: its Redis type, or the kind of a dlock hash ('none'
    /// when it does not exist).
    pub fn describe_lock(&self, now: Time, entries: Entries) -> &'static str {
        if self.holder(now).is_some() {
            "string"
        } else if self.reentrant_at(now).is_some() {
            "reentrant"
        } else if self.hash_at(now) {
            entries.name()
        } else {
            "none"
        }
    }

    /// describe.lua on the fencing counter, asked as a 'counter': 'string' for a counter
    /// that counts, 'none' before the first fence (the model's counter never holds text).
    pub fn describe_counter(&self) -> &'static str {
        if self.counter > 0 {
            "string"
        } else {
            "none"
        }
    }

    /// entries_live.lua: the live entries of a hash of kind `wanted` at the lock key (the
    /// hash here is of kind `entries`), sorted; none when the key does not exist, nor when
    /// it holds a string and `string_is_empty`; anything else is a type error.
    pub fn list_holders(
        &self,
        now: Time,
        entries: Entries,
        wanted: Entries,
        string_is_empty: bool,
    ) -> Result<Vec<Token>, WrongKind> {
        if !self.key_exists(now) || (self.holder(now).is_some() && string_is_empty) {
            return Ok(Vec::new());
        }
        if self.holder(now).is_some() || self.reentrant_at(now).is_some() || entries != wanted {
            return Err(WrongKind);
        }
        let mut live: Vec<Token> = self.live_entries(now).collect();
        live.sort();
        Ok(live)
    }

    /// inspect/force_release.lua: a call whose request id the record holds answers the
    /// recorded fence and changes nothing (a resend whose first reply was lost); otherwise
    /// whatever holds the key (a string, a reentrant hash, read holds or permits, and
    /// their expiry index) is deleted, whoever holds it, a fence is drawn, lapsed waiters
    /// leave the line (the first live one is woken, not handed the lock), and the outcome
    /// is recorded under the request id (0 when nothing held the name, nothing drawn).
    /// The record keeps the last [`FORCED_RECORDS`] calls for a minute, which the model
    /// takes as longer than any resend waits.
    pub fn force_release(
        &mut self,
        record: &mut Vec<Forced>,
        request: u8,
        now: Time,
        mutants: &[Mutant],
    ) -> u64 {
        if let Some(forced) = record.iter().find(|r| r.request == request) {
            if !mutants.contains(&Mutant::ForceEvictsTwice) {
                return forced.fence;
            }
        }
        let fence = if self.key_exists(now) {
            let fence = self.draw_fence(mutants);
            // DEL KEYS[1], KEYS[6]
            if !mutants.contains(&Mutant::ForceKeepsLockKey) {
                self.lock = None;
            }
            self.reentrant = None;
            self.entries.clear();
            self.queue_purge(now, mutants);
            fence
        } else {
            0
        };
        record.insert(0, Forced { request, fence });
        record.truncate(FORCED_RECORDS);
        fence
    }
}
