//! The run of one scenario: its servers and client processes started, its fault injected
//! round after round, everything stopped, and the records judged.

pub(crate) mod clients;
pub(crate) mod process;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use dlock_testkit::RedisServer;

use crate::catalogue::Scenario;
use crate::check::Faults;
use crate::client::Primitive;
pub use crate::config::Config;
use crate::fault::Setup;
use crate::judge::{judge, Outcome};
use crate::record::{self, mono_ns};
use clients::Run;
pub use process::{catch_interrupts, interrupted};
use process::{sleep, KillLive};

/// Runs one scenario; `progress` is told each step (the calm start, each fault round, the
/// clients stopping, the judging) with its length set to their number.
pub fn run(scenario: &Scenario, config: &Config, progress: &indicatif::ProgressBar) -> Outcome {
    let started = mono_ns();
    if let Some(pending) = scenario.pending {
        return Outcome::unjudged(scenario, 0.0, Some(pending));
    }
    let kinds = scenario.kinds_of(&config.primitives);
    if kinds.is_empty() {
        let names: Vec<_> = scenario.kinds().iter().map(|k| k.name()).collect();
        let which = if scenario.runs.is_some() {
            "all of"
        } else {
            "one of"
        };
        return Outcome {
            skipped: Some(format!(
                "the chosen kinds are not what it runs ({which} {})",
                names.join(", ")
            )),
            ..Outcome::unjudged(scenario, 0.0, None)
        };
    }
    let dir = tempfile::Builder::new()
        .prefix("dlock-torture-")
        .tempdir()
        .expect("a temp dir for the records");
    std::fs::create_dir_all(dir.path().join("holding")).expect("the holding dir");
    let ttl = scenario.fault.ttl(config.ttl);
    let config = &Config {
        ttl,
        primitives: kinds,
        ..config.clone()
    };
    let setup = Setup {
        durable: scenario.durable,
        dir: dir.path(),
    };
    let mut servers = match scenario.fault.servers(&setup) {
        Ok(servers) => servers,
        Err(why) => {
            return Outcome {
                ok: Some(false),
                problems: vec![why],
                ..Outcome::unjudged(scenario, 0.0, None)
            }
        }
    };
    let store = RedisServer::start();
    // Each round: a fault, then calm for the lock to pass around; plus a calm start.
    let round = scenario.fault.round(ttl);
    let until_ns = mono_ns() + (ttl * 2 + round * config.rounds).as_nanos() as u64;
    let run = Run {
        dir: dir.path(),
        topology: servers.topology(),
        acknowledged: scenario.acknowledged,
        durable: scenario.durable,
        raise_fences: scenario.fault.raises_fences(),
        work_ms: scenario.fault.work_ms(ttl),
        store_url: store.url(),
        ttl,
        until_ns,
        config,
        live: Arc::new(Mutex::new(HashSet::new())),
        extra: Mutex::new(Vec::new()),
        paused: Mutex::new(Vec::new()),
    };
    let cleanup = KillLive(run.live.clone());
    let mut slots = Vec::new();
    for &primitive in &config.primitives {
        for (kind, slot) in scenario.fault.clients(primitive) {
            slots.push(run.spawn_slot(primitive, kind, slot));
        }
    }
    progress.set_length(u64::from(config.rounds) + 3);
    progress.set_message("calm start");
    sleep(ttl * 2);
    progress.inc(1);
    let mut faults = Faults::default();
    for index in 0..config.rounds {
        if interrupted().is_some() {
            break;
        }
        progress.set_message(format!("round {}/{}", index + 1, config.rounds));
        let round_start = mono_ns();
        scenario
            .fault
            .inject(index, &run, &mut servers, &mut faults);
        let spent = Duration::from_nanos(mono_ns() - round_start);
        sleep(round.saturating_sub(spent));
        progress.inc(1);
    }
    progress.set_message("clients stopping");
    // The clients stop by themselves (library clients at `until_ns`, each `dlock run`
    // within its wait); past a generous bound, whatever still runs is killed.
    slots.append(&mut run.extra.lock().unwrap());
    let bound = mono_ns() + (ttl * 10).as_nanos() as u64;
    while slots.iter().any(|s| !s.is_finished()) && mono_ns() < bound && interrupted().is_none() {
        thread::sleep(Duration::from_millis(50));
    }
    drop(cleanup);
    for slot in slots {
        let _ = slot.join();
    }
    if interrupted().is_some() {
        // Nothing to judge (a Ctrl-C reached the servers too); the caller exits 128+N.
        return Outcome::unjudged(scenario, (mono_ns() - started) as f64 / 1e9, None);
    }
    progress.inc(1);
    progress.set_message("judging");
    let events = record::read_all(dir.path()).expect("read the records");
    let counters = final_counters(&store, &config.primitives);
    let guarded = servers.guarded_counters(&config.primitives);
    let outcome = judge(
        scenario,
        config,
        &events,
        &faults,
        &counters,
        guarded.as_ref(),
    );
    drop(servers);
    if config.keep {
        let timeline = serde_json::json!({
            "clock": "CLOCK_MONOTONIC nanoseconds, as in every record",
            "pauses": faults.pauses.iter().map(|p| serde_json::json!({"pids": p.pids, "from": p.from})).collect::<Vec<_>>(),
            "kills": faults.kills.iter().map(|k| serde_json::json!({"lock": k.primitive.name(), "pids": k.pids, "at": k.at})).collect::<Vec<_>>(),
            "servers": faults.outages.iter().map(|o| serde_json::json!({"port": o.port, "how": o.how, "from": o.from, "to": o.to})).collect::<Vec<_>>(),
        });
        let _ = std::fs::write(dir.path().join("faults.json"), format!("{timeline:#}\n"));
        eprintln!(
            "    records kept in {} (faults.json: what the harness did when)",
            dir.keep().display()
        );
    }
    Outcome {
        seconds: (mono_ns() - started) as f64 / 1e9,
        ..outcome
    }
}

/// The unfenced counters in the store at the end, per kind.
fn final_counters(store: &RedisServer, primitives: &[Primitive]) -> HashMap<String, u64> {
    primitives
        .iter()
        .map(|p| {
            let value: Option<u64> = store.cmd(&["GET", &format!("torture:{}:counter", p.name())]);
            (p.name().to_string(), value.unwrap_or(0))
        })
        .collect()
}
