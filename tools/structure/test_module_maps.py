"""Tests of the module-map check on small sources, and of the project's own maps.

    python3 -m unittest discover -s tools/structure
"""

import os
import unittest

import module_maps

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

TRUE_MAP = """//! The crate.
//!
//! - [`lottie`]: templates, on two
//!   lines.
//! - `sync`: a private module, not linked.
//! - [`gradients`], [`easing`] and [`corners`]: three in one bullet.

pub mod lottie;
mod sync;
pub(crate) mod gradients;
pub mod easing;
#[allow(unsafe_code)]
pub mod corners;
#[cfg(test)]
mod tests;
"""


class ModuleMaps(unittest.TestCase):
    def test_a_map_naming_every_module_and_nothing_else_is_true(self):
        self.assertEqual(module_maps.check_map("src/lib.rs", TRUE_MAP), [])

    def test_a_module_missing_from_the_map_fails(self):
        source = TRUE_MAP + "pub mod webhooks;\n"
        self.assertEqual(
            module_maps.check_map("src/lib.rs", source),
            ["src/lib.rs: module `webhooks` is missing from the `//!` module map"],
        )

    def test_a_map_entry_with_no_module_fails(self):
        source = TRUE_MAP.replace("mod sync;\n", "")
        self.assertEqual(
            module_maps.check_map("src/lib.rs", source),
            ["src/lib.rs: the `//!` module map names `sync`, which is no module of this file"],
        )

    def test_a_bullet_that_does_not_start_with_its_modules_fails(self):
        source = TRUE_MAP.replace("//! - `sync`: a private", "//! - the lock, `sync`: a private")
        findings = module_maps.check_map("src/lib.rs", source)
        self.assertIn("src/lib.rs: a map bullet does not start with the modules it is about", findings[0])
        self.assertIn("src/lib.rs: module `sync` is missing from the `//!` module map", findings)

    def test_a_file_without_a_map_fails(self):
        self.assertEqual(
            module_maps.check_map("src/a.rs", "//! Only prose.\n\npub mod b;\n"),
            ["src/a.rs: no module map in its `//!` (bullets `//! - [`module`]: ...`)"],
        )

    def test_bullets_past_the_leading_doc_block_are_not_the_map(self):
        source = TRUE_MAP + "\n//! - [`later`]: not the head of the file.\n"
        self.assertEqual(module_maps.check_map("src/lib.rs", source), [])

    def test_the_projects_own_maps_are_true(self):
        self.assertEqual(module_maps.check(ROOT), [])


if __name__ == "__main__":
    unittest.main()
