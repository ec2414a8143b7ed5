//! The models hold their properties, and every deliberate bug is caught: the checks can
//! fail. (Smaller bounds than `dlock-model check` uses, for a debug build.)

use dlock_model::mutant::Mutant;
use dlock_model::{models, Bounds};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

const BOUNDS: Bounds = Bounds {
    max_time: 4,
    max_holds: 2,
};

/// The properties that failed: an `always` with a counterexample, or a `sometimes` never
/// reached.
fn failures(mutants: &[Mutant]) -> Vec<(String, Expectation)> {
    let mut failed = Vec::new();
    for model in models(BOUNDS, mutants) {
        // A model none of whose scripts has the bug checks as it does without it.
        if !mutants.is_empty() && !mutants.iter().any(|m| m.touches(model.kind)) {
            continue;
        }
        let mut builder = model.clone().checker();
        if !mutants.is_empty() {
            builder = builder.finish_when(HasDiscoveries::AnyFailures);
        }
        let checker = builder.spawn_bfs().join();
        for property in model.properties() {
            let found = checker.discovery(property.name).is_some();
            let holds = match property.expectation {
                Expectation::Sometimes => found || !mutants.is_empty(),
                Expectation::Always | Expectation::Eventually => !found,
            };
            if !holds {
                failed.push((
                    format!("{}: {}", model.name, property.name),
                    property.expectation,
                ));
            }
        }
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

/// `Mutant::touches` is what lets the checks skip a model for a bug: each bug leaves every
/// model it does not touch exactly as it is (same states, same verdicts), so the bugs of
/// the fair mutex's queue and hand-off are caught by its model alone. (Small bounds: the
/// mutated transitions are reached within them.)
#[test]
fn a_bug_changes_only_the_models_it_touches() {
    let small = Bounds {
        max_time: 3,
        max_holds: 1,
    };
    let outcome = |model: dlock_model::system::LockModel| {
        let checker = model.clone().checker().spawn_bfs().join();
        let verdicts: Vec<bool> = model
            .properties()
            .iter()
            .map(|p| checker.discovery(p.name).is_some())
            .collect();
        (checker.unique_state_count(), verdicts)
    };
    let clean: Vec<_> = models(small, &[]).into_iter().map(outcome).collect();
    for mutant in Mutant::ALL {
        let mut touched = 0;
        for (model, clean) in models(small, &[mutant]).into_iter().zip(&clean) {
            if mutant.touches(model.kind) {
                touched += 1;
                continue;
            }
            let name = model.name;
            assert_eq!(&outcome(model), clean, "{} changes {name}", mutant.name());
        }
        assert!(touched > 0, "{} touches no model", mutant.name());
    }
}
