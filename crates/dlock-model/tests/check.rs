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
