//! The plain mutex's scripts (mutex/acquire.lua, release.lua, fence.lua) as transitions.

use crate::mutant::Mutant;
use crate::scripts::{Grant, Server, Time, Token};

impl Server {
    /// mutex/acquire.lua (with the fast path's `SET NX PX` in front, mutex/mod.rs): our own
    /// token restarts the lease (a resend whose first reply was lost), another's is busy,
    /// a free key is granted; `eager` draws the fence with the grant.
    pub fn mutex_acquire(
        &mut self,
        token: Token,
        now: Time,
        ttl: Time,
        eager: bool,
        mutants: &[Mutant],
    ) -> Grant {
        if self.resend_of_own(token, now, ttl, mutants) {
            // The last fence drawn: no other grant can have drawn since.
            return Grant::Granted(eager.then_some(self.counter));
        }
        if self.holder(now).is_some() {
            return Grant::Busy;
        }
        let fence = eager.then(|| self.draw_fence(mutants));
        self.lock = Some((token, now + ttl));
        Grant::Granted(fence)
    }

    /// mutex/release.lua: deletes the key only if it holds our token. True if released.
    pub fn mutex_release(&mut self, token: Token, now: Time, mutants: &[Mutant]) -> bool {
        if mutants.contains(&Mutant::ReleaseWithoutOwnerCheck) {
            let had = self.lock.is_some();
            self.lock = None;
            return had;
        }
        if self.holder(now) == Some(token) {
            self.lock = None;
            true
        } else {
            false
        }
    }

    /// mutex/fence.lua: the plain mutex's lazily drawn fence, only while the hold is held;
    /// a resend answers the recorded fence. `None`: not held any more (nothing drawn).
    pub fn mutex_fence(&mut self, token: Token, now: Time, mutants: &[Mutant]) -> Option<u64> {
        if !mutants.contains(&Mutant::FenceOutsideGrant) && self.holder(now) != Some(token) {
            return None;
        }
        if let Some((recorded, fence, expires)) = self.fenced {
            if recorded == token && expires > now {
                return Some(fence);
            }
        }
        let fence = self.draw_fence(mutants);
        if let Some((_, expires)) = self.lock.filter(|&(t, e)| t == token && e > now) {
            // Recorded for the rest of the lease (SET .. PX pttl).
            self.fenced = Some((token, fence, expires));
        }
        Some(fence)
    }
}
