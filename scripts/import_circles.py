#!/usr/bin/env python3
"""Fails when src/ has an import circle: source files that reach each other through `crate::`
paths (a `use` or a path in code). One file is one node (a directory's mod.rs is the directory);
test code (`tests.rs`, files under a `tests/` directory, `#[cfg(test)] mod tests { ... }` at a
file's end) does not count, nor a module reaching its ancestors (`super::Api`); `super::` paths
to siblings count as `crate::` paths do.
    scripts/import_circles.py [SRC]     (default src; scripts/test.sh runs it)
Prints every circle, its files and one import on each step, and exits 1 when there is one."""
import re
import sys
from pathlib import Path

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else "src")


def module_of(path: Path) -> tuple:
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[:-1] if parts[-1] in ("mod", "lib") else parts


FILES = {module_of(f): f for f in SRC.rglob("*.rs")}


def is_test(path: Path) -> bool:
    rel = path.relative_to(SRC).parts
    return path.name == "tests.rs" or "tests" in rel[:-1] or path.name.endswith("_tests.rs")


def target(segments: list) -> tuple | None:
    """The file a `crate::a::b::c` path names: the longest prefix that is a module file."""
    for n in range(len(segments), 0, -1):
        if tuple(segments[:n]) in FILES:
            return tuple(segments[:n])
    return None


def paths(text: str, parent: tuple):
    """Every `crate::...` path, and every `super::...` path as the crate path it is (`parent`:
    the module `super` names), a `{...}` group expanded one level (`crate::a::{b, c::d}`)."""
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)(::\{([^{}]*)\})?", text):
        head = m.group(2).strip(":").split("::")
        if m.group(1) == "super":
            head = list(parent) + head
        if m.group(4) is None:
            yield head
            continue
        for item in m.group(4).split(","):
            item = item.strip().split(" as ")[0]
            if item and item not in ("self", "*"):
                yield head + item.split("::")
            else:
                yield head


edges: dict = {}
for mod, f in FILES.items():
    if is_test(f):
        continue
    text = f.read_text()
    text = re.split(r"\n#\[cfg\(test\)\]\s*\nmod tests \{", text)[0]
    text = re.sub(r"//[^\n]*", "", text)  # comments and doc comments name paths too
    for segs in paths(text, mod[:-1]):
        to = target(segs)
        # A module reaching its own ancestors (`super::Api`) is no circle of files.
        if to is not None and to != mod[:len(to)] and not is_test(FILES[to]):
            edges.setdefault(mod, {}).setdefault(to, "crate::" + "::".join(segs))

# Tarjan's strongly connected components.
index, low, stack, on, circles = {}, {}, [], set(), []
counter = [0]


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, {}):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            circles.append(sorted(comp))


sys.setrecursionlimit(10000)
for v in sorted(FILES):
    if v not in index:
        visit(v)

name = lambda m: str(FILES[m].relative_to(SRC.parent))  # noqa: E731
for comp in circles:
    print(f"import circle of {len(comp)} files:")
    for v in comp:
        for w, via in sorted(edges.get(v, {}).items()):
            if w in comp:
                print(f"  {name(v)} -> {name(w)}  ({via})")
if circles:
    sys.exit(1)
print(f"import_circles: no circle among {len(FILES)} source files")
