//! How lock names map to Redis keys.
//!
//! A lock named `N` (after the optional client prefix `P`) lives in the key `PN` itself, so
//! other Redis lock clients using the same name see the same key. Every companion key of
//! the lock (the fencing counter, queues, ...) is built with [`LockKeys::companion`], which
//! keeps it in the same Redis Cluster hash slot as the lock key, so one script may touch
//! them all.

use crate::error::{Error, Result};

/// Longest accepted lock name, in bytes (prefix excluded).
pub const MAX_NAME_LEN: usize = 512;

/// Checks a lock name (with the prefix it will get) the way every lock constructor does,
/// without a client: not empty, at most [`MAX_NAME_LEN`] bytes, no control characters, no
/// `}` outside a hash tag.
pub fn check_name(prefix: &str, name: &str) -> Result<()> {
    LockKeys::new(prefix, name).map(drop)
}

/// The keys and channel of one named lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    /// The user-facing lock name (without prefix).
    pub name: String,
    /// The main key: prefix + name.
    pub key: String,
    /// The never-expiring fencing counter of this lock.
    pub fence: String,
    /// The pub/sub channel on which releases of this lock are announced: in the lock's
    /// hash slot like a companion key (`{N}:released`), so a cluster can carry it over
    /// sharded pub/sub on the lock's own shard.
    pub channel: String,
}

impl LockKeys {
    pub fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        let key = format!("{prefix}{name}");
        if !has_hash_tag(&key) && key.contains('}') {
            return Err(Error::InvalidArgument(format!(
                "lock key {key:?} contains '}}' outside a Redis hash tag; remove it or use a tag like \"{{tenant}}-job\""
            )));
        }
        if is_companion(&key) {
            return Err(Error::InvalidArgument(format!(
                "lock key {key:?} is the name of a key dlock keeps beside another lock (its fence, queue or data); choose a name that does not end in :fence, :queue…, :leader, :expiry or contain :data: or :applied: after a hash tag"
            )));
        }
        let mut keys = LockKeys {
            name: name.to_string(),
            fence: String::new(),
            channel: String::new(),
            key,
        };
        // Computed once: every acquire names the fence key, every release the channel.
        keys.fence = keys.companion("fence");
        keys.channel = keys.companion("released");
        Ok(keys)
    }

    /// A key in the same hash slot as the lock key, e.g. `{orders}:fence` for `orders`.
    pub fn companion(&self, suffix: &str) -> String {
        companion_of(&self.key, suffix)
    }
}

/// True for the keys dlock keeps beside a lock key: `{K}:fence`, the queues, the expiry
/// index, the data of guarded writes `{K}:data:…` and their records `{K}:applied:…`.
/// Such a key is never a lock of its own (a name that would be one is refused), so
/// `find_locks` skips it.
pub(crate) fn is_companion(key: &str) -> bool {
    // The base is a lock key whose companions keep its slot: one with a hash tag
    // (an untagged key's companions are `{key}:…`, which has one).
    let in_a_slot = has_hash_tag;
    let beside = ["data", "applied"].iter().any(|infix| {
        key.match_indices(&format!(":{infix}:"))
            .any(|(at, _)| in_a_slot(&key[..at]))
    });
    beside
        || [
            "fence",
            "fenced",
            "forced",
            "leader",
            "queue",
            "queue-leases",
            // Written by dlock before waiters' tokens named their ttl; expires by itself.
            "queue-ttls",
            EXPIRY_INDEX,
        ]
        .iter()
        .any(|suffix| {
            key.strip_suffix(suffix)
                .and_then(|base| base.strip_suffix(':'))
                .is_some_and(in_a_slot)
        })
}

/// The suffix of the expiry index kept beside a hash of leased holds (read holds,
/// semaphore permits; see `entries.lua`).
pub(crate) const EXPIRY_INDEX: &str = "expiry";

/// The expiry index of the leased holds at lock key `key`.
pub(crate) fn expiry_index_of(key: &str) -> String {
    companion_of(key, EXPIRY_INDEX)
}

fn companion_of(key: &str, suffix: &str) -> String {
    if has_hash_tag(key) {
        // The existing tag already decides the slot; any suffix keeps it.
        format!("{key}:{suffix}")
    } else {
        // Whole-key hashing: wrapping the key in braces hashes exactly the same bytes.
        // Keys without a tag and with a '}' cannot be wrapped; validate_name forbids them.
        format!("{{{key}}}:{suffix}")
    }
}

/// True when Redis Cluster would hash only part of `key` (a non-empty `{...}` section).
fn has_hash_tag(key: &str) -> bool {
    let bytes = key.as_bytes();
    match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) => len > 0,
            None => false,
        },
        None => false,
    }
}

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(
            "lock name is empty; give the lock a name such as \"nightly-report\"".into(),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "lock name is {} bytes long; the maximum is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(Error::InvalidArgument(
            "lock name contains control characters; use printable characters only".into(),
        ));
    }
    Ok(())
}

/// The Redis Cluster slot of a key (CRC16/XMODEM of the hashed part, mod 16384): the
/// renewer groups its batches by it, since one script may not touch two slots.
pub(crate) fn hash_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let part = match b.iter().position(|&c| c == b'{') {
        Some(o) => match b[o + 1..].iter().position(|&c| c == b'}') {
            Some(l) if l > 0 => &b[o + 1..o + 1 + l],
            _ => b,
        },
        None => b,
    };
    let mut crc: u16 = 0;
    for &byte in part {
        crc ^= (byte as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::hash_slot as slot;
    use super::*;

    /// A name whose key would be another lock's companion (its fence, queue or data) is
    /// refused: the two would overwrite each other. Untagged names cannot collide.
    #[test]
    fn names_that_are_another_locks_companions_are_refused() {
        for name in [
            "{t}:fence",
            "{t}:queue",
            "{t}:data:x",
            "{t}-job:applied:tok",
        ] {
            assert!(LockKeys::new("", name).is_err(), "{name}");
        }
        assert!(LockKeys::new("{app}:", "x:data:y").is_err());
        for name in ["t:fence", "data:x", "{t}:database", "{t}:reports"] {
            assert!(LockKeys::new("", name).is_ok(), "{name}");
        }
        let keys = LockKeys::new("", "{t}").unwrap();
        assert!(is_companion(&keys.companion("data:x")));
        // A tag anywhere: job{x}'s companions are job{x}:fence, job{x}:data:…
        let keys = LockKeys::new("", "job{x}").unwrap();
        assert!(is_companion(&keys.companion("data:a")) && is_companion(&keys.fence));
        assert!(LockKeys::new("", "job{x}:data:a").is_err());
    }

    #[test]
    fn crc16_matches_redis_reference_value() {
        // From the Redis Cluster specification: CRC16("123456789") = 0x31C3.
        assert_eq!(slot("123456789"), 0x31C3);
    }

    #[test]
    fn companion_keys_share_the_lock_slot() {
        for name in ["orders", "a{b}c", "{tenant}", "a{", "job:42", "é"] {
            let keys = LockKeys::new("app:", name).unwrap();
            assert_eq!(slot(&keys.key), slot(&keys.fence), "name {name:?}");
            assert_eq!(
                slot(&keys.key),
                slot(&keys.companion("queue")),
                "name {name:?}"
            );
            assert_eq!(slot(&keys.key), slot(&expiry_index_of(&keys.key)));
            // Channels too: sharded pub/sub routes a channel by the same slot rule.
            assert_eq!(slot(&keys.key), slot(&keys.channel), "name {name:?}");
            assert_eq!(
                slot(&keys.key),
                slot(&format!("{}token", keys.companion("wake:"))),
                "name {name:?}"
            );
        }
    }

    #[test]
    fn default_key_is_the_name_itself() {
        let keys = LockKeys::new("", "nightly").unwrap();
        assert_eq!(keys.key, "nightly");
        assert_eq!(keys.fence, "{nightly}:fence");
        assert_eq!(keys.channel, "{nightly}:released");
    }

    #[test]
    fn invalid_names_are_rejected() {
        for bad in ["", "a}b", "{}x", "x{}", "line\nbreak"] {
            assert!(
                matches!(LockKeys::new("", bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(
            LockKeys::new("", &long),
            Err(Error::InvalidArgument(_))
        ));
        assert!(LockKeys::new("", &"x".repeat(MAX_NAME_LEN)).is_ok());
    }
}
