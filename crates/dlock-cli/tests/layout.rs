//! The CLI's modules keep the workspace's layering rules (docs/decisions.md, "Layering"):
//! no import cycle, no module using a helper of the crate root (`main.rs`).

#[test]
fn the_modules_are_layered() {
    dlock_testkit::layout::assert_layered(env!("CARGO_MANIFEST_DIR"));
}
