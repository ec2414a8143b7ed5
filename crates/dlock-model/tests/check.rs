//! The models hold their properties, and every deliberate bug is caught: the checks can
//! fail. (Smaller bounds than `dlock-model check` uses, for a debug build.)

use dlock_model::mutant::Mutant;
use dlock_model::redlock::{Action, RedlockModel, State};
use dlock_model::{
    election_models, force_models, guarded_models, models, multi_models, pair_models,
    redlock_models, Bounds, Verdict,
};
use stateright::{Checker, Expectation, HasDiscoveries, Model, Property};

const BOUNDS: Bounds = Bounds {
    max_time: 4,
    max_holds: 2,
};

/// The properties of `model` that failed: an `always` with a counterexample, or a
/// `sometimes` never reached (not looked for when `hunting` a bug).
fn failures_of<M>(name: &str, model: M, hunting: bool) -> Vec<(String, Expectation)>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: std::hash::Hash + Clone + PartialEq + Send + Sync + 'static,
    M::Action: Clone + PartialEq,
{
    let mut builder = model.clone().checker();
    if hunting {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let mut failed = Vec::new();
    let stopped = Verdict::stopped(&model, |name| checker.discovery(name).is_some());
    for property in model.properties() {
        let found = checker.discovery(property.name).is_some();
        if !Verdict::of(&property.expectation, found, hunting, stopped).passed() {
            failed.push((format!("{name}: {}", property.name), property.expectation));
        }
    }
    failed
}

/// The properties that failed in every model with `mutants` put in.
fn failures(mutants: &[Mutant]) -> Vec<(String, Expectation)> {
    let hunting = !mutants.is_empty();
    let mut failed = Vec::new();
    for model in models(BOUNDS, mutants) {
        // A model none of whose scripts has the bug checks as it does without it.
        if hunting && !mutants.iter().any(|m| model.kind.touched_by(*m)) {
            continue;
        }
        failed.extend(failures_of(model.name, model, hunting));
    }
    for model in redlock_models(BOUNDS, mutants) {
        if hunting && !mutants.iter().any(|m| model.touched_by(*m)) {
            continue;
        }
        failed.extend(failures_of(model.name, model, hunting));
    }
    for model in guarded_models(BOUNDS, mutants) {
        if hunting && !mutants.iter().any(|m| model.touched_by(*m)) {
            continue;
        }
        failed.extend(failures_of(model.name, model, hunting));
    }
    for model in election_models(BOUNDS, mutants) {
        if hunting && !mutants.iter().any(|m| model.touched_by(*m)) {
            continue;
        }
        failed.extend(failures_of(model.name, model, hunting));
    }
    // The operator's forced release, and two look-alike locks side by side.
    for model in force_models(BOUNDS, mutants) {
        if hunting && !mutants.iter().any(|m| model.touched_by(*m)) {
            continue;
        }
        failed.extend(failures_of(model.name, model, hunting));
    }
    for model in pair_models(BOUNDS, mutants) {
        if hunting && !mutants.iter().any(|m| model.touched_by(*m)) {
            continue;
        }
        failed.extend(failures_of(model.name, model, hunting));
    }
    // The multi-lock on one server and across Cluster slots.
    for model in multi_models(BOUNDS, mutants) {
        if hunting && !mutants.iter().any(|m| model.touched_by(*m)) {
            continue;
        }
        failed.extend(failures_of(model.name, model, hunting));
    }
    failed
}

#[test]
fn every_property_holds_and_every_example_is_reached() {
    let failed: Vec<String> = failures(&[]).into_iter().map(|(name, _)| name).collect();
    assert_eq!(failed, Vec::<String>::new());
}

#[test]
fn every_mutant_breaks_the_property_it_targets() {
    for mutant in Mutant::ALL {
        let failed = failures(&[mutant]);
        assert!(
            failed
                .iter()
                .any(|(name, e)| *e == Expectation::Always && name.ends_with(mutant.breaks())),
            "{} did not break \"{}\": {failed:?}",
            mutant.name(),
            mutant.breaks()
        );
    }
}

/// `Kind::touched_by` and `RedlockModel::touched_by` are what let the checks skip a model
/// for a bug: each bug leaves every model it does not touch exactly as it is (same
/// states, same verdicts), so the bugs of the fair mutex's queue and hand-off are caught
/// by its model alone, and a restart's bug is not searched for where no master restarts.
/// (Small bounds: the mutated transitions are reached within them.) Each model is checked
/// once with every bug it is said not to touch put in together, and must come out as it
/// does clean; only when it does not is each of those bugs tried alone, to name the one
/// that changed it (a bug at a time for every model took six minutes on 2 cores).
#[test]
fn a_bug_changes_only_the_models_it_touches() {
    let small = Bounds {
        max_time: 3,
        max_holds: 1,
    };
    fn outcome<M>(model: M) -> (usize, Vec<bool>)
    where
        M: Model + Clone + Send + Sync + 'static,
        M::State: std::hash::Hash + Clone + PartialEq + Send + Sync + 'static,
        M::Action: Clone + PartialEq,
    {
        let checker = model.clone().checker().spawn_bfs().join();
        let verdicts: Vec<bool> = model
            .properties()
            .iter()
            .map(|p| checker.discovery(p.name).is_some())
            .collect();
        (checker.unique_state_count(), verdicts)
    }
    /// Every model `build` makes is left as it is by the bugs `touches` says it is not
    /// touched by; returns the bugs that touch one of them.
    fn untouched_alike<M>(
        build: impl Fn(&[Mutant]) -> Vec<M>,
        touches: impl Fn(&M, Mutant) -> bool,
        name: impl Fn(&M) -> &'static str,
    ) -> Vec<Mutant>
    where
        M: Model + Clone + Send + Sync + 'static,
        M::State: std::hash::Hash + Clone + PartialEq + Send + Sync + 'static,
        M::Action: Clone + PartialEq,
    {
        let mut touching = Vec::new();
        for (at, model) in build(&[]).into_iter().enumerate() {
            let (touched, untouched): (Vec<Mutant>, Vec<Mutant>) =
                Mutant::ALL.into_iter().partition(|m| touches(&model, *m));
            touching.extend(touched);
            let model_name = name(&model);
            let clean = outcome(model);
            if outcome(build(&untouched).remove(at)) != clean {
                let culprits: Vec<&str> = (untouched.iter())
                    .filter(|m| outcome(build(&[**m]).remove(at)) != clean)
                    .map(|m| m.name())
                    .collect();
                panic!("{culprits:?} change {model_name}, which they are said not to touch");
            }
        }
        touching
    }
    let mut touching = Vec::new();
    touching.extend(untouched_alike(
        |mutants| models(small, mutants),
        |model, mutant| model.kind.touched_by(mutant),
        |model| model.name,
    ));
    touching.extend(untouched_alike(
        |mutants| redlock_models(small, mutants),
        |model, mutant| model.touched_by(mutant),
        |model| model.name,
    ));
    touching.extend(untouched_alike(
        |mutants| guarded_models(small, mutants),
        |model, mutant| model.touched_by(mutant),
        |model| model.name,
    ));
    touching.extend(untouched_alike(
        |mutants| election_models(small, mutants),
        |model, mutant| model.touched_by(mutant),
        |model| model.name,
    ));
    // The operator's and the look-alike names' models.
    touching.extend(untouched_alike(
        |mutants| force_models(small, mutants),
        |model, mutant| model.touched_by(mutant),
        |model| model.name,
    ));
    touching.extend(untouched_alike(
        |mutants| pair_models(small, mutants),
        |model, mutant| model.touched_by(mutant),
        |model| model.name,
    ));
    touching.extend(untouched_alike(
        |mutants| multi_models(small, mutants),
        |model, mutant| model.touched_by(mutant),
        |model| model.name,
    ));
    for mutant in Mutant::ALL {
        assert!(
            touching.contains(&mutant),
            "{} touches no model",
            mutant.name()
        );
    }
}

/// Why the Redlock model with a restart has the clock floor: with counters alone, a master
/// restarted empty does break the fence order (its counter starts again, and a majority
/// that meets the last grant's only there draws below it), whatever the settlement does.
#[test]
fn with_counters_alone_a_master_restarted_empty_breaks_the_fence_order() {
    let mut model = redlock_models(BOUNDS, &[])
        .into_iter()
        .find(|m| !m.clock_floor)
        .expect("the counters-only model");
    model.max_restarts = 1;
    let failed = failures_of(model.name, model, true);
    assert!(
        failed
            .iter()
            .any(|(name, _)| name.ends_with("fences follow grants")),
        "{failed:?}"
    );
}

/// The verdicts of the Redlock model named `name` at `bounds`, found whole (no hunt): each
/// property's name and whether a counterexample or an example was found.
fn redlock_discoveries(name: &str, bounds: Bounds) -> Vec<(&'static str, bool)> {
    let model = redlock_models(bounds, &[])
        .into_iter()
        .find(|m| m.name == name)
        .expect("the model");
    let checker = model.clone().checker().spawn_bfs().join();
    model
        .properties()
        .iter()
        .map(|p| (p.name, checker.discovery(p.name).is_some()))
        .collect()
}

/// A master's clock jumping forward by more than a lease: with counters alone and with the
/// clock floor, two clients believe they hold at once (mutual exclusion is not checked
/// there: the lease is the masters' clocks). Both keep the fences of rounds that do not
/// overlap in order: the raise puts the largest fence on a majority, the jumped clock's
/// too. Without that raise (the shortcut `skip-raise-at-clock` restores) a fence goes back
/// with the floor: a grant with the jumped master's clock, then a round that leaves that
/// master out draws from the others' clocks, below it.
#[test]
fn a_jumped_clock_grants_twice_and_the_raise_keeps_later_rounds_in_order() {
    let counters = redlock_discoveries("redlock, counters only, a master's clock jumps", BOUNDS);
    let floor = redlock_discoveries("redlock, clock floor, a master's clock jumps", BOUNDS);
    let double = "two clients believe they hold at once (the jump's double grant)";
    let rounds = "fences follow grants of earlier rounds";
    for (name, verdicts) in [("counters only", &counters), ("clock floor", &floor)] {
        assert!(verdicts.contains(&(double, true)), "{name}: {verdicts:?}");
        assert!(verdicts.contains(&(rounds, false)), "{name}: {verdicts:?}");
        assert!(
            !verdicts.iter().any(|(p, _)| *p == "mutual exclusion"),
            "{name}: {verdicts:?}"
        );
    }
    let skipping = redlock_models(BOUNDS, &[Mutant::SkipRaiseAtClock])
        .into_iter()
        .find(|m| m.name == "redlock, clock floor, a master's clock jumps")
        .expect("the model");
    let failed = failures_of(skipping.name, skipping, true);
    assert!(
        failed.iter().any(|(name, _)| name.ends_with(rounds)),
        "{failed:?}"
    );
}

/// Why the clock floor's models have a master's clock ahead: without an offset between
/// the masters, the shortcut `settle_fence` had before issue 32 (no raise when the largest
/// fence is a master's clock) keeps fences in order, as every later draw reads a later
/// clock; a clock half a lease ahead of the others' (`Offset`) is what breaks it, though
/// it ends no hold.
#[test]
fn only_a_clock_ahead_shows_the_raise_skipped_at_a_clock_fence() {
    let model = |offsets| {
        let mut model = redlock_models(BOUNDS, &[Mutant::SkipRaiseAtClock])
            .into_iter()
            .find(|m| m.max_offsets > 0)
            .expect("the model of a clock ahead");
        model.max_offsets = offsets;
        model
    };
    let in_step = model(0);
    assert!(
        failures_of(in_step.name, in_step, true).is_empty(),
        "without an offset the shortcut is safe"
    );
    let ahead = model(1);
    let failed = failures_of(ahead.name, ahead, true);
    assert!(
        failed
            .iter()
            .any(|(name, _)| name.ends_with("fences follow grants")),
        "{failed:?}"
    );
}

/// The counters-only model of a jumped clock, checked for "fences follow grants" as the
/// models without a jump state it (grants ordered as they are decided).
#[derive(Clone)]
struct DecidedOrder(RedlockModel);

impl Model for DecidedOrder {
    type State = State;
    type Action = Action;
    fn init_states(&self) -> Vec<State> {
        self.0.init_states()
    }
    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.0.actions(state, actions);
    }
    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.0.next_state(last, action)
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always(
            "fences follow grants",
            |_, state: &State| !state.fence_order_broken,
        )]
    }
    fn within_boundary(&self, state: &State) -> bool {
        self.0.within_boundary(state)
    }
}

/// Why the jump's counters-only model states the fence order over rounds: "fences follow
/// grants", which orders grants as they are decided, is broken by the double grant itself
/// (a round that drew before the jump decides after the contender's grant, with the
/// smaller fence: the stale one, whose writes a fenced store refuses), though the order of
/// rounds that do not overlap holds.
#[test]
fn with_a_jumped_clock_the_double_grant_decides_in_either_order() {
    let mut model = redlock_models(BOUNDS, &[])
        .into_iter()
        .find(|m| m.max_jumps > 0 && !m.clock_floor)
        .expect("the counters-only model of a jumped clock");
    model.max_rounds = 1;
    let checker = model.clone().checker().spawn_bfs().join();
    assert!(checker
        .discovery("fences follow grants of earlier rounds")
        .is_none());
    let checker = DecidedOrder(model).checker().spawn_bfs().join();
    assert!(checker.discovery("fences follow grants").is_some());
}

/// Why the guarded writes' model bounds the resend by the record's life: the record of a
/// batch is kept a lease (guarded/mod.rs `record_ms`), and the hold may be renewed past
/// it. A resend that comes later than that (a reconnection that took longer than the
/// lease: `resent_once` set no limit until the model found this; a writing batch now
/// carries `Call::resend_within`) finds no record: while the hold still holds (it
/// was renewed), the batch applies a second time; once it ended, the resend answers "not
/// held", though the first send applied.
#[test]
fn a_resend_after_the_record_expired_applies_again() {
    let mut model = guarded_models(BOUNDS, &[]).remove(0);
    model.resend_within_record = false;
    let failed: Vec<String> = failures_of(model.name, model, true)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert!(
        failed
            .iter()
            .any(|name| name.ends_with("a resent batch applies once")),
        "{failed:?}"
    );
    // Each counterexample on its own: both need a resend beyond the record's life.
    let mut model = guarded_models(BOUNDS, &[]).remove(0);
    model.resend_within_record = false;
    let checker = model.clone().checker().spawn_bfs().join();
    for property in [
        "a resent batch applies once",
        "a resent batch is answered as it ran",
    ] {
        assert!(checker.discovery(property).is_some(), "{property}");
    }
    assert!(checker
        .discovery("a batch applies only while its hold holds")
        .is_none());
}

/// The election's terms are the mutex's fences: a counter that stops counting
/// (`fence-reused`) gives two leaderships one term, which an observer sees.
#[test]
fn a_reused_fence_makes_the_election_terms_stall() {
    let model = election_models(BOUNDS, &[Mutant::FenceReused]).remove(0);
    let failed = failures_of(model.name, model, true);
    assert!(
        failed.iter().any(|(name, _)| name.ends_with("terms rise")),
        "{failed:?}"
    );
}

/// The queue's bugs are caught by the semaphore's and the writers' queued models on their
/// own, not only by the fair mutex's: a release (or a grant) past the first in line breaks
/// "grants follow the line" in each, and a downgrade that does not check its writer breaks
/// mutual exclusion in the rwlock's.
#[test]
fn the_queued_semaphore_and_rwlock_models_catch_their_bugs() {
    let cases = [
        (Mutant::QueueSkipsHead, "semaphore of 2, waiting in line"),
        (Mutant::QueueSkipsHead, "semaphore of 1, waiting in line"),
        (Mutant::QueueSkipsHead, "rwlock, writers in line"),
        (
            Mutant::DowngradeWithoutOwnerCheck,
            "rwlock, writers in line",
        ),
    ];
    for (mutant, name) in cases {
        let model = models(BOUNDS, &[mutant])
            .into_iter()
            .find(|m| m.name.starts_with(name))
            .expect("the model");
        let failed = failures_of(model.name, model, true);
        assert!(
            failed
                .iter()
                .any(|(p, e)| *e == Expectation::Always && p.ends_with(mutant.breaks())),
            "{} did not break \"{}\" in {name}: {failed:?}",
            mutant.name(),
            mutant.breaks()
        );
    }
}

/// The weighted semaphore's bugs are caught by its own model: counting permits instead of
/// their weights lets two requests of 2 hold a semaphore of 3 (Redis's count and the
/// clients' beliefs both exceed N), and judging a request's own weight alone lets the
/// request of 1 pass a request of 2 first in line.
#[test]
fn the_weighted_semaphore_model_catches_its_bugs() {
    let name = "semaphore of 3, weights";
    let cases = [
        (
            Mutant::PermitsCountedNotWeighed,
            "held weights never exceed N",
        ),
        (Mutant::PermitsCountedNotWeighed, "mutual exclusion"),
        (Mutant::WeightedGrantPassesTheLine, "grants follow the line"),
    ];
    for (mutant, property) in cases {
        let model = models(BOUNDS, &[mutant])
            .into_iter()
            .find(|m| m.name.starts_with(name))
            .expect("the model");
        let failed = failures_of(model.name, model, false);
        assert!(
            failed
                .iter()
                .any(|(p, e)| *e == Expectation::Always && p.ends_with(property)),
            "{} did not break \"{property}\" in {name}: {failed:?}",
            mutant.name(),
        );
    }
}
