//! The library's modules keep the workspace's layering rules (docs/decisions.md,
//! "Layering"): no import cycle, and no module names an item through the crate root
//! (each names the module that defines it; `lib.rs` holds no helpers).

#[test]
fn the_modules_are_layered() {
    dlock_testkit::layout::assert_layered(env!("CARGO_MANIFEST_DIR"));
}
