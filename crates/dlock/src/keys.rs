//! How lock names map to Redis keys.
//!
//! A lock named `N` (after the optional client prefix `P`) lives in the key `PN` itself, so
//! other Redis lock clients using the same name see the same key. Every companion key of
//! the lock (the fencing counter, queues, guarded data, channels, ...) is built with
//! [`LockKeys::companion`], which keeps it in the same Redis Cluster hash slot as the lock
//! key, so one script may touch them all.
//!
//! Companions of two distinct lock keys never meet, whatever braces and colons the names
//! hold. A key `K` without a hash tag has the companions `{K}:suffix` (whole-key hashing:
//! the braces hash exactly `K`). A key with a tag, `K` = `A{T}B`, has `A{T}/len/B:suffix`,
//! where `len` is the length of `B` in bytes: the tag keeps the slot, the text before it
//! stays in front (so a companion starts with the client's prefix, as an ACL key pattern
//! expects), and the length says where `B` ends. So `{acct}` (`{acct}/0/:fence`) and `acct`
//! (`{acct}:fence`), or `{t}` with guarded data `fence` (`{t}/0/:data:fence`) and
//! `{t}:data` (`{t}/5/:data:fence`), stay apart. The byte after the first tag (`:` or `/`)
//! tells the two forms apart, and a name whose key would read as a companion is refused
//! ([`check_name`]).

use crate::error::{Error, Result};

/// Longest accepted lock name, in bytes (prefix excluded).
pub const MAX_NAME_LEN: usize = 512;

/// Checks a lock name (with the prefix it will get) the way every lock constructor does,
/// without a client: not empty, at most [`MAX_NAME_LEN`] bytes, no control characters (in
/// the prefix neither), no `}` outside a hash tag.
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
    /// The keys of the lock `name` under `prefix`; refused names are refused here.
    pub fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        // The prefix is part of every key, as the name is: held to the same characters.
        if prefix.chars().any(|c| c.is_control()) {
            return Err(Error::InvalidArgument(
                "key prefix contains control characters; use printable characters only".into(),
            ));
        }
        let key = format!("{prefix}{name}");
        if !has_hash_tag(&key) && key.contains('}') {
            return Err(Error::InvalidArgument(format!(
                "lock key {key:?} contains '}}' outside a Redis hash tag; remove it or use a tag like \"{{tenant}}-job\""
            )));
        }
        if is_companion(&key) {
            return Err(Error::InvalidArgument(format!(
                "lock key {key:?} reads as a key dlock keeps beside another lock (its fence, queue, data or records), so the two locks would share it; after a hash tag, choose a name that does not end in :fence, :fenced, :forced, :queue…, :leader or :expiry, contain :data: or :applied:, or go on with /<length>/ and then that many bytes and a ':'"
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

/// True for the keys dlock keeps beside a lock key (see the module docs): `{K}:suffix`
/// for a key `K` without a tag, `A{T}/len/B:…` for the key `A{T}B`, where `suffix`
/// is one of the fixed companions (fence, queues, expiry index, leader, …) or starts with
/// `data:` or `applied:` (guarded writes). Also the tagged form that dlock wrote before
/// companions carried the key's length (`K:suffix` for a tagged `K`): such a key is no
/// lock, and `find_locks` skips it, whichever version left it. Such a key is never a lock
/// of its own: a name whose key would be one is refused.
pub(crate) fn is_companion(key: &str) -> bool {
    companion_owner(key).is_some() || is_legacy_tagged_companion(key)
}

/// The fixed suffixes of companion keys, and the families of guarded writes.
/// The plain mutex's record of its lazily drawn fence (`{K}:fenced`).
pub(crate) const FENCE_RECORD: &str = "fenced";
/// The record of the last forced releases of a name (`{K}:forced`).
pub(crate) const FORCED_RECORD: &str = "forced";
/// An election's leader record (`{K}:leader`).
pub(crate) const LEADER_RECORD: &str = "leader";

const COMPANIONS: [&str; 8] = [
    "fence",
    FENCE_RECORD,
    FORCED_RECORD,
    LEADER_RECORD,
    "queue",
    "queue-leases",
    // Written by dlock before waiters' tokens named their ttl; expires by itself.
    "queue-ttls",
    EXPIRY_INDEX,
];
const COMPANION_FAMILIES: [&str; 2] = ["data:", "applied:"];

fn is_companion_suffix(suffix: &str) -> bool {
    COMPANIONS.contains(&suffix)
        || COMPANION_FAMILIES
            .iter()
            .any(|family| suffix.len() > family.len() && suffix.starts_with(family))
}

/// Which of the two forms a companion has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `{K}:suffix`
    Untagged,
    /// `A{T}/len/B:suffix`
    Tagged,
}

/// The lock key and suffix `key` would be a companion of, and its form: the inverse of
/// `companion_of`. The suffix is not checked here.
fn split_companion(key: &str) -> Option<(String, &str, Form)> {
    let open = key.find('{')?;
    let close = open + 1 + key[open + 1..].find('}')?;
    let tag = &key[open + 1..close];
    if tag.is_empty() {
        return None;
    }
    let after = &key[close + 1..];
    if open == 0 {
        if let Some(suffix) = after.strip_prefix(':') {
            // The braces hold the whole key, which has no '}' (so no tag) of its own.
            return Some((tag.to_string(), suffix, Form::Untagged));
        }
    }
    let (len, rest) = after.strip_prefix('/')?.split_once('/')?;
    // Written in decimal without leading zeros: only one spelling per length.
    let canonical = !len.is_empty()
        && len.bytes().all(|b| b.is_ascii_digit())
        && (len == "0" || !len.starts_with('0'));
    let len: usize = len.parse().ok().filter(|_| canonical)?;
    if rest.len() <= len || !rest.is_char_boundary(len) {
        return None;
    }
    let (after_tag, tail) = rest.split_at(len);
    let suffix = tail.strip_prefix(':')?;
    let lock_key = format!("{}{{{tag}}}{after_tag}", &key[..open]);
    Some((lock_key, suffix, Form::Tagged))
}

/// The lock key whose companion `key` is (its fence, queue, expiry index, guarded data,
/// records, ...), when `key` is one in the form dlock writes; `None` for any other key.
/// For tools that clean up after a lock or group keys by lock, such as `dlock bench`.
///
/// ```
/// assert_eq!(dlock::companion_owner("{job}:fence").as_deref(), Some("job"));
/// assert_eq!(dlock::companion_owner("app:{t}/4/:job:queue").as_deref(), Some("app:{t}:job"));
/// assert_eq!(dlock::companion_owner("job"), None);
/// ```
pub fn companion_owner(key: &str) -> Option<String> {
    match split_companion(key)? {
        (lock_key, suffix, Form::Untagged) if is_companion_suffix(suffix) => Some(lock_key),
        (lock_key, _, Form::Tagged) => Some(lock_key),
        _ => None,
    }
}

/// `K:suffix` for a tagged `K`: the companions of tagged keys before they carried a
/// length.
fn is_legacy_tagged_companion(key: &str) -> bool {
    let tagged = |base: &str| hash_tag(base).is_some();
    let family = COMPANION_FAMILIES.iter().any(|family| {
        key.match_indices(&format!(":{family}"))
            .any(|(at, _)| tagged(&key[..at]))
    });
    family
        || COMPANIONS.iter().any(|suffix| {
            key.strip_suffix(suffix)
                .and_then(|base| base.strip_suffix(':'))
                .is_some_and(tagged)
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
    match hash_tag(key) {
        // Whole-key hashing: wrapping the key in braces hashes exactly the same bytes.
        // Keys without a tag and with a '}' cannot be wrapped; `LockKeys::new` refuses them.
        None => format!("{{{key}}}:{suffix}"),
        // The tag keeps the slot; the length says where the rest of the key ends.
        Some(tag) => {
            let open = key.find('{').expect("a tagged key has a '{'");
            let after_tag = &key[open + tag.len() + 2..];
            format!(
                "{}{{{tag}}}/{}/{after_tag}:{suffix}",
                &key[..open],
                after_tag.len()
            )
        }
    }
}

/// The part of `key` Redis Cluster hashes when it has a hash tag: the bytes between the
/// first `{` and the first `}` after it, when not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// True when Redis Cluster would hash only part of `key` (a non-empty `{...}` section).
fn has_hash_tag(key: &str) -> bool {
    hash_tag(key).is_some()
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

    /// A prefix is part of every key, as the name is: no control characters in either.
    #[test]
    fn control_characters_are_refused_in_the_prefix_as_in_the_name() {
        assert!(LockKeys::new("app:", "job").is_ok());
        for (prefix, name) in [("a\nb:", "job"), ("app:", "jo\tb"), ("\u{7f}", "job")] {
            assert!(
                matches!(LockKeys::new(prefix, name), Err(Error::InvalidArgument(_))),
                "{prefix:?} {name:?}"
            );
        }
    }

    /// A name whose key would be another lock's companion (its fence, queue or data) is
    /// refused: the two would overwrite each other. Untagged names cannot collide.
    #[test]
    fn names_that_are_another_locks_companions_are_refused() {
        for name in [
            "{t}:fence",
            "{t}:queue",
            "{t}:data:x",
            "{t}-job:applied:tok",
            "{t}/0/:fence",
            "a{t}/2/:b:data:x",
            "{t}/0/:anything",
        ] {
            assert!(LockKeys::new("", name).is_err(), "{name}");
        }
        assert!(LockKeys::new("{app}:", "x:data:y").is_err());
        for name in [
            "t:fence",
            "data:x",
            "{t}:database",
            "{t}:reports",
            "{t}:data",
            "{t}/x/:job",
            "{t}/9/:job",
            "{t}/04/:job",
        ] {
            assert!(LockKeys::new("", name).is_ok(), "{name}");
        }
        let keys = LockKeys::new("", "{t}").unwrap();
        assert!(is_companion(&keys.companion("data:x")));
        // A tag anywhere: job{x}'s companions are job{x}/0/:fence, …:data:…
        let keys = LockKeys::new("", "job{x}").unwrap();
        assert_eq!(keys.fence, "job{x}/0/:fence");
        assert!(is_companion(&keys.companion("data:a")) && is_companion(&keys.fence));
        assert!(LockKeys::new("", "job{x}:data:a").is_err());
    }

    /// Every companion of every look-alike key (issue 32: `acct` and `{acct}` shared their
    /// fence, queue, data and channels; `{t}`'s guarded key `fence` was `{t}:data`'s fence)
    /// is distinct from every other lock's key and companions, and reads as a companion.
    #[test]
    fn look_alike_names_share_no_key_or_channel() {
        let names = [
            "acct",
            "{acct}",
            "{acct}:x",
            "acct}",
            "{acct}}",
            "{t}",
            "{t}:data",
            "t",
            "{t}:data:x",
            "a{t}",
            "a{t}:b",
            "{t}:b",
            "a:b",
            "a",
            "{a:b}",
            "{a}:b",
            "x{",
            "{x",
            "é{ü}",
            "{t}:fenced",
            "{t}/3/",
        ];
        let prefixes = ["", "app:", "{app}:", "{app}/4/", "a{", "{", "}"];
        // Every fixed companion, the channels, and guarded writes' families.
        let more = [
            "released",
            "wake:c1",
            "data:fence",
            "data:x",
            "data:x:fence",
            "applied:tok",
        ];
        let suffixes: Vec<&str> = COMPANIONS.iter().copied().chain(more).collect();
        let mut owner: std::collections::HashMap<String, String> = Default::default();
        for prefix in prefixes {
            for name in names {
                let Ok(keys) = LockKeys::new(prefix, name) else {
                    continue;
                };
                let lock = keys.key.clone();
                let mut mine = vec![keys.key.clone(), expiry_index_of(&keys.key)];
                for &suffix in &suffixes {
                    let companion = keys.companion(suffix);
                    assert_eq!(slot(&companion), slot(&lock), "{companion}");
                    if !suffix.starts_with("wake:") && suffix != "released" {
                        assert!(is_companion(&companion), "{companion} of {lock}");
                        assert_eq!(companion_owner(&companion).as_deref(), Some(&*lock));
                    }
                    mine.push(companion);
                }
                for key in mine {
                    if let Some(other) = owner.insert(key.clone(), lock.clone()) {
                        assert_eq!(other, lock, "{key} is shared by {other} and {lock}");
                    }
                }
            }
        }
        assert!(owner.len() > 500);
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
        // A tagged key's companions name the key with its length.
        let keys = LockKeys::new("", "{acct}").unwrap();
        assert_eq!(keys.fence, "{acct}/0/:fence");
        // The prefix stays in front (an ACL's key pattern for it covers the companions).
        let keys = LockKeys::new("app:", "{t}:job").unwrap();
        assert_eq!(keys.companion("queue"), "app:{t}/4/:job:queue");
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
