"""Module maps that stay true (issue 44, item 6): the `//!` map at the head of a module file
names each of its child modules, and names nothing else, so a module added without a line
in the map, or a line left behind by a module removed or moved, fails `./dev structure`.

A map is the bullets (`//! - `) of the file's leading `//!` block. Each bullet starts with the
module or modules it is about, in backticks (linked or not: a private module cannot be
linked), then a colon: `//! - [`lottie`]: ...`, `//! - `sync`: ...`, or several at once,
`//! - [`gradients`], [`easing`]: ...`. Child modules are the `mod name;` declarations of the
file (any visibility), test modules (`#[cfg(test)]`) aside.
"""

import os
import re

# The files whose `//!` holds a module map: the crate's and the rooms of `lottie`.
MAPPED_FILES = (
    "src/lib.rs",
    "src/lottie.rs",
    "src/lottie/reading.rs",
    "src/lottie/lowering.rs",
)

_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*;")
_BULLET_HEAD = re.compile(r"^((?:\[?`[A-Za-z_]\w*`\]?\s*(?:,\s*|\band\s+)?)+):")
_NAME = re.compile(r"`([A-Za-z_]\w*)`")


def declared_modules(source):
    """The names of the file modules `source` declares (`mod name;`), test modules aside."""
    names = set()
    attributes = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#["):
            attributes.append(stripped)
            continue
        match = _MOD.match(line)
        if match and not any(a.replace(" ", "") == "#[cfg(test)]" for a in attributes):
            names.add(match.group(1))
        if stripped and not stripped.startswith("//"):
            attributes = []
    return names


def map_bullets(source):
    """The first line of each bullet of the leading `//!` block, without `//! - `."""
    bullets = []
    for line in source.splitlines():
        if not line.startswith("//!"):
            break
        text = line[3:]
        if text.startswith(" - "):
            bullets.append(text[3:].strip())
    return bullets


def check_map(path, source):
    """What is wrong with the map of `source` (the file at `path`), one line each."""
    findings = []
    mapped = set()
    bullets = map_bullets(source)
    if not bullets:
        return [f"{path}: no module map in its `//!` (bullets `//! - [`module`]: ...`)"]
    for bullet in bullets:
        head = _BULLET_HEAD.match(bullet)
        if not head:
            findings.append(f"{path}: a map bullet does not start with the modules it is about: {bullet[:60]}")
            continue
        mapped |= set(_NAME.findall(head.group(1)))
    declared = declared_modules(source)
    for name in sorted(declared - mapped):
        findings.append(f"{path}: module `{name}` is missing from the `//!` module map")
    for name in sorted(mapped - declared):
        findings.append(f"{path}: the `//!` module map names `{name}`, which is no module of this file")
    return findings


def check(root, files=MAPPED_FILES):
    """Every finding of the mapped files under `root`."""
    findings = []
    for path in files:
        full = os.path.join(root, path)
        if not os.path.exists(full):
            findings.append(f"{path}: a mapped file is missing (module_maps.MAPPED_FILES)")
            continue
        with open(full, encoding="utf-8") as handle:
            findings.extend(check_map(path, handle.read()))
    return findings
