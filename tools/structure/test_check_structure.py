"""Tests of the structure check on small crates written into a temporary directory.

    python3 -m unittest discover -s tools/structure
"""

import os
import tempfile
import unittest

import check_structure


def crate(files):
    """A Crate loaded from {relative path: source}."""
    root = tempfile.mkdtemp()
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as handle:
            handle.write(text)
    loaded = check_structure.Crate(root)
    loaded.load()
    return loaded


def edge_pairs(loaded):
    return {(a, b) for a, b, _ in loaded.edges()}


class ImportEdges(unittest.TestCase):
    def test_a_use_between_two_modules_is_an_edge_both_ways_a_cycle(self):
        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\npub mod b;\n",
                "src/a.rs": "use crate::b::Thing;\npub struct Other;\n",
                "src/b.rs": "pub struct Thing;\nfn f() -> crate::a::Other { crate::a::Other }\n",
            }
        )
        self.assertEqual(edge_pairs(loaded), {("src/a.rs", "src/b.rs"), ("src/b.rs", "src/a.rs")})

    def test_a_child_using_its_parent_is_no_edge(self):
        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\n",
                "src/a.rs": "mod child;\nuse child::Inner;\npub struct Outer;\n",
                "src/a/child.rs": "use super::Outer;\npub struct Inner;\nfn f() { crate::a::Outer; }\n",
            }
        )
        self.assertEqual(edge_pairs(loaded), {("src/a.rs", "src/a/child.rs")})

    def test_a_path_through_a_re_export_reaches_the_defining_file(self):
        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\npub mod b;\n",
                "src/a.rs": "mod inner;\npub use inner::Thing;\n",
                "src/a/inner.rs": "pub struct Thing;\n",
                "src/b.rs": "use crate::a::Thing;\n",
            }
        )
        self.assertIn(("src/b.rs", "src/a/inner.rs"), edge_pairs(loaded))

    def test_paths_in_strings_comments_and_test_modules_are_not_edges(self):
        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\npub mod b;\n",
                "src/a.rs": (
                    "// use crate::b::X;\n/* crate::b::X /* nested */ */\n"
                    'const S: &str = "crate::b::X";\nconst R: &str = r#"use crate::b::X;"#;\n'
                    "#[cfg(test)]\nmod tests {\n    use crate::b::X;\n}\n"
                ),
                "src/b.rs": "pub struct X;\n",
            }
        )
        self.assertEqual(edge_pairs(loaded), set())

    def test_a_use_tree_with_braces_and_self_names_every_file(self):
        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
                "src/a.rs": "use crate::{b::{self, X}, c::Y as Z};\n",
                "src/b.rs": "pub struct X;\n",
                "src/c.rs": "pub struct Y;\n",
            }
        )
        self.assertEqual(edge_pairs(loaded), {("src/a.rs", "src/b.rs"), ("src/a.rs", "src/c.rs")})


class Cycles(unittest.TestCase):
    def test_strongly_connected_parts_and_a_shortest_cycle(self):
        graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
        self.assertEqual(check_structure.strongly_connected(set(graph) | {"d"}, graph), [["a", "b", "c"]])
        self.assertEqual(check_structure.shortest_cycle(["a", "b", "c"], graph), ["a", "b", "c", "a"])


class Lengths(unittest.TestCase):
    def test_inline_tests_are_not_counted_in_a_files_lines(self):
        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\n",
                "src/a.rs": "fn f() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n",
            }
        )
        info = loaded.files["src/a.rs"]
        self.assertEqual((info.lines, info.test_lines), (7, 5))

    def test_a_function_runs_from_its_fn_line_to_its_closing_brace(self):
        body = "".join(f'    let s{i} = "}}";\n' for i in range(3))
        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\n",
                "src/a.rs": (
                    "trait T {\n    fn declared(&self);\n}\n"
                    f"fn long(x: [u8; 2]) -> u8 {{\n{body}    let c = '{{';\n    x[0]\n}}\n"
                ),
            }
        )
        functions = {name: (first, last) for name, first, last, _ in loaded.files["src/a.rs"].functions}
        self.assertEqual(functions, {"long": (4, 10)})

    def test_soft_signs_are_listed_apart_from_the_limits(self):
        def function(name, lines):
            return f"fn {name}() {{\n" + "    let x = 1;\n" * (lines - 2) + "}\n"

        loaded = crate(
            {
                "src/lib.rs": "pub mod a;\npub mod b;\n",
                "src/a.rs": function("soft", check_structure.SOFT_FUNCTION_LINES + 1)
                + function("hard", check_structure.MAX_FUNCTION_LINES + 1)
                + function("short", check_structure.SOFT_FUNCTION_LINES),
                "src/b.rs": "// line\n" * (check_structure.SOFT_FILE_LINES + 1),
            }
        )
        findings, signs = check_structure.lengths(loaded)
        self.assertEqual(len(findings), 1)
        self.assertIn("hard", findings[0])
        self.assertEqual(len(signs), 2)
        self.assertTrue(any("a.rs" in s and "soft" in s for s in signs))
        self.assertTrue(any(s.startswith("file over") and "b.rs" in s for s in signs))


if __name__ == "__main__":
    unittest.main()
