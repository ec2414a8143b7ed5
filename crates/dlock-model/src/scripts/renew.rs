//! renew/renew.lua, the one renewal every kind sends, per hold form: a string ('s'), a
//! reentrant hold ('r'), a leased entry ('e').

use crate::mutant::Mutant;
use crate::scripts::{Server, Time, Token};

impl Server {
    /// renew/renew.lua for a string hold ('s'): restarts the lease if the key still holds
    /// our token. True if renewed.
    pub fn renew_string(&mut self, token: Token, now: Time, ttl: Time) -> bool {
        if self.holder(now) == Some(token) {
            self.lock = Some((token, now + ttl));
            true
        } else {
            false
        }
    }

    /// `renew_string`, or with the mutant `renew-recreates-key`, a renewal that sets a key
    /// gone with its token.
    pub fn renew_string_mutated(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        mutants: &[Mutant],
    ) -> bool {
        if mutants.contains(&Mutant::RenewRecreatesKey)
            && self.holder(now).is_none()
            && self.entries.is_empty()
            && self.reentrant.is_none()
        {
            self.lock = Some((token, now + ttl));
            return true;
        }
        self.renew_string(token, now, ttl)
    }

    /// renew/renew.lua for a reentrant hold ('r'): while the hash has the hold's field,
    /// its lease restarts, never shortened (the holds share it).
    pub fn renew_reentrant(&mut self, token: Token, now: Time, ttl: Time) -> bool {
        match self.reentrant.as_mut().filter(|r| r.expires > now) {
            Some(hash) if hash.holds.contains(&token) => {
                hash.expires = hash.expires.max(now + ttl);
                true
            }
            _ => false,
        }
    }

    /// renew/renew.lua for a leased entry ('e'): restarts a live entry's lease.
    pub fn renew_entry(&mut self, token: Token, now: Time, ttl: Time) -> bool {
        match self.entries.get_mut(&token) {
            Some((end, _)) if *end > now => {
                *end = now + ttl;
                true
            }
            _ => false,
        }
    }
}
