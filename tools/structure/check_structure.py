#!/usr/bin/env python3
"""The structure check of issue 22: reads only the source (no build) and reports

- import cycles between files and between top-level modules of the library crate
  (`crate::`, `super::`, `self::` and child-module paths, in `use` trees and in code;
  a path that names an item re-exported by `use` is followed to the file that defines
  it; a file using one of its own ancestor module files does not count);
- product files over MAX_FILE_LINES lines (inline `#[cfg(test)]` items not counted;
  files that are test modules themselves are not product);
- product functions over MAX_FUNCTION_LINES lines (from the `fn` line to its closing
  brace, found by brace matching on the source with comments, strings and chars blanked);
- README.md over MAX_README_LINES lines;
- the module maps of `module_maps.MAPPED_FILES` against their `mod` lists (issue 44);
- and, not failing, DESIGN's soft signs: product files over SOFT_FILE_LINES lines and
  functions over SOFT_FUNCTION_LINES, listed so the trend is visible between sessions.

Exit status 0 when nothing is found, 1 otherwise. Usage, from the project root:

    python3 tools/structure/check_structure.py [--root DIR] [--edges FILE_OR_MODULE] [--quiet]

Its own tests: python3 -m unittest discover -s tools/structure
"""

import argparse
import os
import re
import sys
from collections import defaultdict

import module_maps

# The limits of issue 22 ("a house a newcomer can walk"): a file a reader can hold in
# mind, a function that fits on two screens, a README that is an introduction.
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
MAX_README_LINES = 400
# DESIGN's soft signs ("a file over ~500 lines, a function over ~80"): places to look at when
# one is there anyway, not failures; the list is printed so a change that grows it is seen.
SOFT_FILE_LINES = 500
SOFT_FUNCTION_LINES = 80


# ---------------------------------------------------------------------------------------
# Lexing: blank out comments, strings and char literals, keep every newline.


def blank_source(text):
    """The source with comments, string, byte-string, raw-string and char literals
    replaced by spaces (newlines kept), so braces and keywords inside them are not seen."""
    out = list(text)
    i, n = 0, len(text)

    def blank(start, end):
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rb" and not _ident_char_before(text, i):
            m = re.match(r'(br|rb|r)(#*)"', text[i:])
            if m and (m.group(1) != "b"):
                hashes = m.group(2)
                close = '"' + hashes
                j = text.find(close, i + m.end())
                j = n if j < 0 else j + len(close)
                blank(i, j)
                i = j
            elif c == "b" and text.startswith('b"', i):
                j = _end_of_quoted(text, i + 2, '"')
                blank(i, j)
                i = j
            elif c == "b" and text.startswith("b'", i):
                j = _end_of_quoted(text, i + 2, "'")
                blank(i, j)
                i = j
            else:
                i += 1
        elif c == '"':
            j = _end_of_quoted(text, i + 1, '"')
            blank(i, j)
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '{') or a lifetime ('a, 'static).
            m = re.match(r"'(\\(u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", text[i:])
            if m:
                blank(i, i + m.end())
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def _ident_char_before(text, i):
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def _end_of_quoted(text, j, quote):
    n = len(text)
    while j < n:
        if text[j] == "\\":
            j += 2
        elif text[j] == quote:
            return j + 1
        else:
            j += 1
    return n


TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|::|->|=>|\$|[{}()\[\];,#!<>=*:&.]|\S")


def tokenize(blanked):
    """(kind, text, line) tuples; kind is 'id' for identifiers, 'p' otherwise."""
    tokens = []
    line = 1
    pos = 0
    for m in TOKEN.finditer(blanked):
        line += blanked.count("\n", pos, m.start())
        pos = m.start()
        t = m.group(0)
        kind = "id" if (t[0].isalpha() or t[0] == "_") else "p"
        tokens.append((kind, t, line))
    return tokens


# ---------------------------------------------------------------------------------------
# One pass over a file: module scopes, test-only items, uses, paths, definitions, fns.

ITEM_DEFINERS = {"struct", "enum", "fn", "trait", "type", "const", "static", "union", "mod"}


class FileInfo:
    def __init__(self, path, module):
        self.path = path  # relative to the root, e.g. src/render/frames.rs
        self.module = module  # tuple, e.g. ("render", "frames")
        self.lines = 0
        self.test_lines = 0  # lines of inline #[cfg(test)] items
        self.uses = []  # (scope module, segments, alias, is_glob, line, in_test)
        self.paths = []  # (scope module, segments, line, in_test)
        self.definitions = defaultdict(set)  # module -> names defined in this file
        self.inline_modules = set()  # modules declared inline here
        self.child_decls = defaultdict(set)  # module -> child module names declared
        self.test_child_decls = set()  # out-of-line children declared under cfg(test)
        self.functions = []  # (name, first line, last line, in_test)


def is_test_cfg(attr_tokens):
    """Does this attribute (tokens between `#[` and `]`) make the item test-only?"""
    texts = [t for _, t, _ in attr_tokens]
    if not texts or texts[0] != "cfg":
        return False
    if "test" not in texts:
        return False
    # cfg(not(test)) or cfg(any(test, ...)) also compile outside tests.
    return "not" not in texts and "any" not in texts


def parse_file(info, text):
    blanked = blank_source(text)
    info.lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    tokens = tokenize(blanked)
    n = len(tokens)

    # Scope stack: one entry per open brace: (module tuple, in_test, closes_item_start_line)
    scopes = [(info.module, False, True)]  # (module, in_test, is a module's own scope)
    groups = 0  # open parentheses and brackets
    pending_test = False  # a #[cfg(test)] attribute waits for its item
    pending_test_line = 0
    pending_mod = None  # `mod NAME {` opens an inline module
    test_item_depth = None  # depth of the scope where the current test item started
    test_item_start = None
    item_brace_pending = False

    def current():
        return scopes[-1]

    def in_test():
        return current()[1] or test_item_depth is not None

    i = 0
    while i < n:
        kind, t, line = tokens[i]
        # Attributes: #[...] or #![...]
        if t == "#" and i + 1 < n and tokens[i + 1][1] in ("[", "!"):
            j = i + 1
            if tokens[j][1] == "!":
                j += 1
            if j < n and tokens[j][1] == "[":
                depth, k = 0, j
                while k < n:
                    if tokens[k][1] == "[":
                        depth += 1
                    elif tokens[k][1] == "]":
                        depth -= 1
                        if depth == 0:
                            break
                    k += 1
                attr = tokens[j + 1 : k]
                if tokens[i + 1][1] != "!" and is_test_cfg(attr) and test_item_depth is None and not current()[1]:
                    if not pending_test:
                        pending_test_line = line  # the item's lines start at its attribute
                    pending_test = True
                i = k + 1
                continue
        if pending_test and test_item_depth is None:
            # The first token of the test-only item.
            test_item_depth = len(scopes)
            test_item_start = pending_test_line
            item_brace_pending = True
            pending_test = False

        if t in ("(", "["):
            groups += 1
        elif t in (")", "]"):
            groups = max(0, groups - 1)
        if t == "{":
            module, test, _ = current()
            opens_module = pending_mod is not None
            if opens_module:
                module = module + (pending_mod,)
                info.inline_modules.add(module)
                pending_mod = None
            scopes.append((module, test or test_item_depth is not None, opens_module))
            item_brace_pending = False
            i += 1
            continue
        if t == "}":
            if len(scopes) > 1:
                scopes.pop()
            if test_item_depth is not None and len(scopes) == test_item_depth and not item_brace_pending:
                info.test_lines += line - test_item_start + 1
                test_item_depth = None
            i += 1
            continue
        if t == ";":
            if test_item_depth is not None and len(scopes) == test_item_depth and groups == 0:
                info.test_lines += line - test_item_start + 1
                test_item_depth = None
            i += 1
            continue

        if kind == "id" and t == "mod" and i + 1 < n and tokens[i + 1][0] == "id":
            name = tokens[i + 1][1]
            module = current()[0]
            if current()[2]:
                info.definitions[module].add(name)
            if i + 2 < n and tokens[i + 2][1] == "{":
                pending_mod = name
            else:
                info.child_decls[module].add(name)
                if in_test():
                    info.test_child_decls.add(module + (name,))
            i += 2
            continue

        if kind == "id" and t in ITEM_DEFINERS and i + 1 < n and tokens[i + 1][0] == "id":
            name = tokens[i + 1][1]
            prev = tokens[i - 1][1] if i else ""
            if current()[2] and prev not in ("::", "&", "*") and not (t == "type" and prev == "<"):
                info.definitions[current()[0]].add(name)
            if t == "fn":
                end_line = _function_end(tokens, i + 2)
                if end_line is not None:
                    info.functions.append((name, line, end_line, in_test()))
        if kind == "id" and t == "macro_rules" and i + 2 < n and tokens[i + 1][1] == "!" and current()[2]:
            info.definitions[current()[0]].add(tokens[i + 2][1])

        if kind == "id" and t == "use" and (i + 1 >= n or tokens[i + 1][1] != "<"):
            j = i + 1
            if j < n and tokens[j][1] == "::":
                j += 1
            trees, j = parse_use_tree(tokens, j, [])
            for segments, alias, glob in trees:
                info.uses.append((current()[0], segments, alias, glob, line, in_test()))
            i = j
            continue

        if kind == "id" and t in ("crate", "super", "self") and i + 1 < n and tokens[i + 1][1] == "::":
            prev = tokens[i - 1][1] if i else ""
            if prev not in ("::", "$"):
                segments, j = read_path(tokens, i)
                info.paths.append((current()[0], segments, line, in_test()))
                i = j
                continue
        if kind == "id" and i + 1 < n and tokens[i + 1][1] == "::" and t not in ("Self",):
            prev = tokens[i - 1][1] if i else ""
            if prev not in ("::", "$", "."):
                segments, j = read_path(tokens, i)
                # Kept only when the first segment turns out to be a child module.
                info.paths.append((current()[0], ["?"] + segments, line, in_test()))
                i = j
                continue
        i += 1


def _function_end(tokens, j):
    """The last line of the function whose signature starts at token j, or None when it
    has no body (a trait method declaration or an extern fn)."""
    n = len(tokens)
    depth = 0
    while j < n:
        t = tokens[j][1]
        if t in ("(", "["):
            depth += 1
        elif t in (")", "]"):
            depth -= 1
        elif depth == 0 and t == ";":
            return None
        elif depth == 0 and t == "{":
            braces = 0
            while j < n:
                if tokens[j][1] == "{":
                    braces += 1
                elif tokens[j][1] == "}":
                    braces -= 1
                    if braces == 0:
                        return tokens[j][2]
                j += 1
            return None
        j += 1
    return None


def read_path(tokens, i):
    segments = [tokens[i][1]]
    j = i + 1
    n = len(tokens)
    while j + 1 < n and tokens[j][1] == "::" and tokens[j + 1][0] == "id":
        segments.append(tokens[j + 1][1])
        j += 2
    return segments, j


def parse_use_tree(tokens, j, prefix):
    """Parse one use tree from token j; returns ([(segments, alias, is_glob)], next index)."""
    n = len(tokens)
    segments = list(prefix)
    results = []
    while j < n:
        kind, t, _ = tokens[j]
        if kind == "id" and t != "as":
            segments.append(t)
            j += 1
            if j < n and tokens[j][1] == "::":
                j += 1
                continue
            alias = None
            if j + 1 < n and tokens[j][1] == "as":
                alias = tokens[j + 1][1]
                j += 2
            results.append((segments, alias, False))
            break
        if t == "*":
            results.append((segments, None, True))
            j += 1
            break
        if t == "{":
            j += 1
            while j < n and tokens[j][1] != "}":
                if tokens[j][1] == ",":
                    j += 1
                    continue
                sub, j = parse_use_tree(tokens, j, segments)
                results.extend(sub)
            j += 1
            break
        break
    # At the top, skip to the `;` that ends the declaration (left for the caller).
    if not prefix:
        while j < n and tokens[j][1] != ";":
            j += 1
    return results, j


# ---------------------------------------------------------------------------------------
# The crate: files, module tree, resolution.


class Crate:
    def __init__(self, root):
        self.root = root
        self.files = {}  # path -> FileInfo
        self.module_file = {}  # module tuple -> path of the file holding it
        self.test_modules = set()

    def load(self):
        src = os.path.join(self.root, "src")
        for dirpath, _, filenames in os.walk(src):
            for name in sorted(filenames):
                if not name.endswith(".rs"):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, self.root)
                if rel == os.path.join("src", "main.rs"):
                    continue  # the binary: its own crate, it only uses the library's paths
                parts = os.path.relpath(full, src)[:-3].split(os.sep)
                module = () if parts == ["lib"] else tuple(parts)
                info = FileInfo(rel, module)
                with open(full, encoding="utf-8") as handle:
                    parse_file(info, handle.read())
                self.files[rel] = info
                self.module_file[module] = rel
        for info in self.files.values():
            for module in info.inline_modules:
                self.module_file.setdefault(module, info.path)
            self.test_modules |= info.test_child_decls
        # A module nested in a test module is test code as well.
        for module, path in self.module_file.items():
            if any(module[:k] in self.test_modules for k in range(1, len(module) + 1)):
                self.test_modules.add(module)
        self.uses_by_module = defaultdict(list)
        self.defs_by_module = defaultdict(set)
        for info in self.files.values():
            for use in info.uses:
                self.uses_by_module[use[0]].append(use)
            for module, names in info.definitions.items():
                self.defs_by_module[module] |= names

    def is_module(self, module):
        return module in self.module_file

    def absolute(self, scope, segments):
        """The absolute segments of a path seen in `scope`, or None for paths outside
        the crate."""
        first = segments[0]
        if first == "?":
            segments = segments[1:]
            if self.is_module(scope + (segments[0],)):
                return list(scope) + list(segments)
            imported = self.imported_module(scope, segments[0])
            if imported is None:
                return None
            return list(imported) + list(segments[1:])
        if first == "crate":
            return list(segments[1:])
        if first in ("self", "super"):
            base = list(scope)
            k = 0
            while k < len(segments) and segments[k] in ("self", "super"):
                if segments[k] == "super":
                    if not base:
                        return None
                    base.pop()
                k += 1
            return base + list(segments[k:])
        # A use path starting at a child module (2018 uniform paths).
        if self.is_module(scope + (first,)):
            return list(scope) + list(segments)
        return None

    def named_uses(self, module, name):
        """The absolute targets of the `use` declarations in `module` that bind `name`."""
        targets = []
        for scope, segments, alias, glob, _, _ in self.uses_by_module.get(module, []):
            if glob:
                continue
            if segments[-1] == "self":
                segments = segments[:-1]
                if not segments:
                    continue
            if (alias or segments[-1]) != name:
                continue
            target = self.absolute(scope, segments)
            if target is not None:
                targets.append(target)
        return targets

    def imported_module(self, scope, name):
        """The module a `use` in `scope` (or an enclosing module) binds to `name`, if any."""
        module = tuple(scope)
        for target in self.named_uses(module, name):
            if self.is_module(tuple(target)):
                return tuple(target)
        return None

    def resolve(self, absolute, seen=None):
        """The files a path (absolute segments) leads to: the file where the longest
        module prefix lives, and, for an item imported there by `use`, the files that
        import leads to."""
        seen = set() if seen is None else seen
        module = ()
        k = 0
        while k < len(absolute) and self.is_module(module + (absolute[k],)):
            module = module + (absolute[k],)
            k += 1
        files = {self.module_file.get(module)} - {None}
        if k == len(absolute):
            return files
        name = absolute[k]
        if (module, name) in seen or name in self.defs_by_module.get(module, set()):
            return files
        seen.add((module, name))
        for target in self.named_uses(module, name):
            return files | self.resolve(target + absolute[k + 1 :], seen)
        for scope, segments, _, glob, _, _ in self.uses_by_module.get(module, []):
            if not glob:
                continue
            source = self.absolute(scope, segments)
            if source is None or not self.is_module(tuple(source)):
                continue
            source = tuple(source)
            if name in self.defs_by_module.get(source, set()) or self.named_uses(source, name):
                return files | self.resolve(list(source) + absolute[k:], seen)
        return files

    def edges(self, include_tests=False):
        """(from file, to file, line) for every reference between two files, the
        references from a file to its own ancestors left out."""
        found = []
        for info in self.files.values():
            if info.module in self.test_modules and not include_tests:
                continue
            refs = [(scope, segs, line, test) for scope, segs, _, _, line, test in info.uses]
            refs += info.paths
            for scope, segments, line, test in refs:
                if test and not include_tests:
                    continue
                if segments[-1:] == ["self"]:
                    segments = segments[:-1]
                absolute = self.absolute(scope, segments)
                if absolute is None:
                    continue
                for target in self.resolve(absolute):
                    if target == info.path:
                        continue
                    target_module = self.files[target].module
                    if info.module[: len(target_module)] == target_module:
                        continue  # a file using its own parent (or further ancestor)
                    if target_module in self.test_modules and not include_tests:
                        continue
                    found.append((info.path, target, line))
        return found


# ---------------------------------------------------------------------------------------
# Cycles.


def strongly_connected(nodes, graph):
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return result


def shortest_cycle(component, graph):
    """One shortest cycle through the component's first node, as a list of nodes."""
    members = set(component)
    start = component[0]
    parents = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while parents[path[-1]] is not None:
                        path.append(parents[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in parents:
                    parents[w] = v
                    following.append(w)
        frontier = following
    return [start]


def report_cycles(title, edges, describe):
    graph = defaultdict(set)
    evidence = {}
    nodes = set()
    for a, b, where in edges:
        if a == b:
            continue
        graph[a].add(b)
        nodes |= {a, b}
        evidence.setdefault((a, b), where)
    components = strongly_connected(nodes, graph)
    for component in components:
        print(f"{title} cycle among {len(component)}: {', '.join(describe(c) for c in component)}")
        cycle = shortest_cycle(component, graph)
        for a, b in zip(cycle, cycle[1:]):
            print(f"    {describe(a)} -> {describe(b)}  ({evidence[(a, b)]})")
    return len(components)


def top_module(info):
    return "crate" if not info.module else info.module[0]


# ---------------------------------------------------------------------------------------
# Main.


def lengths(crate):
    """(findings, soft signs): product files and functions over the hard limits (failures)
    and over the soft signs only (listed, not failing), each as one line of text."""
    findings, signs = [], []
    for path in sorted(crate.files):
        info = crate.files[path]
        if info.module in crate.test_modules:
            continue
        product_lines = info.lines - info.test_lines
        if product_lines > MAX_FILE_LINES:
            findings.append(f"file over {MAX_FILE_LINES} lines: {path} ({product_lines} without tests)")
        elif product_lines > SOFT_FILE_LINES:
            signs.append(f"file over {SOFT_FILE_LINES} lines: {path} ({product_lines} without tests)")
        for name, first, last, test in info.functions:
            if test:
                continue
            length = last - first + 1
            if length > MAX_FUNCTION_LINES:
                findings.append(f"function over {MAX_FUNCTION_LINES} lines: {path}:{first} {name} ({length})")
            elif length > SOFT_FUNCTION_LINES:
                signs.append(f"function over {SOFT_FUNCTION_LINES} lines: {path}:{first} {name} ({length})")
    return findings, signs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="the project root (default: .)")
    parser.add_argument("--edges", help="print the edges from and to this file or top-level module")
    parser.add_argument("--include-tests", action="store_true", help="count #[cfg(test)] code in the import graph")
    parser.add_argument("--quiet", action="store_true", help="print only what is found")
    args = parser.parse_args()

    crate = Crate(args.root)
    crate.load()
    problems = 0

    edges = crate.edges(include_tests=args.include_tests)
    file_edges = [(a, b, f"{a}:{line}") for a, b, line in edges]
    problems += report_cycles("file", file_edges, lambda p: p)
    module_edges = []
    for a, b, line in edges:
        ma, mb = top_module(crate.files[a]), top_module(crate.files[b])
        if ma != mb and "crate" not in (ma, mb):
            module_edges.append((ma, mb, f"{a}:{line}"))
    problems += report_cycles("module", module_edges, lambda m: m)

    if args.edges:
        wanted = args.edges
        for a, b, line in sorted(set(edges)):
            ma, mb = top_module(crate.files[a]), top_module(crate.files[b])
            if wanted in (a, b, ma, mb):
                print(f"edge {a}:{line} -> {b}")

    limits, signs = lengths(crate)
    for line in limits:
        print(line)
    problems += len(limits)

    maps = module_maps.check(args.root)
    for line in maps:
        print(line)
    problems += len(maps)

    readme = os.path.join(args.root, "README.md")
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as handle:
            readme_lines = sum(1 for _ in handle)
        if readme_lines > MAX_README_LINES:
            print(f"README.md over {MAX_README_LINES} lines ({readme_lines})")
            problems += 1

    if not args.quiet:
        for line in signs:
            print(f"soft sign: {line}")
        print(f"structure: {len(signs)} soft signs (not failures)")
        print(f"structure: {len(crate.files)} files, {len(set((a, b) for a, b, _ in edges))} file edges, {problems} found")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
