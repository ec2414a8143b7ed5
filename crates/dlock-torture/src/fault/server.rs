//! The faults on the one lock server: paused (`server-pause`), `kill -9`ed and restarted
//! (`server-restart-aof`, `server-restart-nopersist`), or its replies delayed by a proxy
//! (`network-delay`).

use std::time::Duration;

use super::{Fault, Setup};
use crate::check::Faults;
use crate::run::clients::Run;
use crate::run::process::sleep;
use crate::servers::LockServers;

/// The lock server SIGSTOPped for 1.5 leases, then resumed.
#[derive(Debug)]
pub struct ServerPause;

impl Fault for ServerPause {
    fn inject(&self, _: u32, run: &Run, servers: &mut LockServers, _: &mut Faults) {
        let ttl = run.ttl;
        if let LockServers::Single { server, .. } = servers {
            server.pause();
            sleep(ttl * 3 / 2);
            server.resume();
        }
    }
}

/// The lock server `kill -9`ed and restarted (on its AOF if the scenario is durable).
#[derive(Debug)]
pub struct ServerRestart;

impl Fault for ServerRestart {
    fn inject(&self, _: u32, _: &Run, servers: &mut LockServers, _: &mut Faults) {
        if let LockServers::Single { server, .. } = servers {
            server.restart();
        }
    }
}

/// Every reply of the lock server delayed by 1.5 leases (a TCP proxy), then not.
#[derive(Debug)]
pub struct NetworkDelay;

impl Fault for NetworkDelay {
    fn servers(&self, setup: &Setup) -> Result<LockServers, String> {
        Ok(LockServers::single(setup.durable, true))
    }

    fn inject(&self, _: u32, run: &Run, servers: &mut LockServers, _: &mut Faults) {
        let ttl = run.ttl;
        if let LockServers::Single {
            proxy: Some(proxy), ..
        } = servers
        {
            proxy.delay_replies(ttl * 3 / 2);
            sleep(ttl * 2);
            proxy.delay_replies(Duration::ZERO);
        }
    }
}
