//! The models hold their properties, and every deliberate bug is caught: the checks can
//! fail. (Smaller bounds than `dlock-model check` uses, for a debug build.)

use dlock_model::mutant::Mutant;
use dlock_model::{models, redlock_models, Bounds, Verdict};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

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
/// (Small bounds: the mutated transitions are reached within them.)
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
    let clean: Vec<_> = models(small, &[]).into_iter().map(outcome).collect();
    let clean_redlock: Vec<_> = redlock_models(small, &[])
        .into_iter()
        .map(outcome)
        .collect();
    for mutant in Mutant::ALL {
        let mut touched = 0;
        for (model, clean) in models(small, &[mutant]).into_iter().zip(&clean) {
            if model.kind.touched_by(mutant) {
                touched += 1;
                continue;
            }
            let name = model.name;
            assert_eq!(&outcome(model), clean, "{} changes {name}", mutant.name());
        }
        for (model, clean) in redlock_models(small, &[mutant])
            .into_iter()
            .zip(&clean_redlock)
        {
            if model.touched_by(mutant) {
                touched += 1;
                continue;
            }
            let name = model.name;
            assert_eq!(&outcome(model), clean, "{} changes {name}", mutant.name());
        }
        assert!(touched > 0, "{} touches no model", mutant.name());
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
