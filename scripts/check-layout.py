#!/usr/bin/env python3
"""Layout checks of the repository (run by scripts/test.sh, step `layout`):

1. No import cycle between the modules of a crate. Every `crate::a::b` and `super::x`
   path in a module's code (comments and `#[cfg(test)]` modules/files excluded) is an
   edge from that module to the longest existing module the path names. Edges between a
   module and its own ancestors or descendants are not counted (a parent declares its
   children). A strongly connected set of more than one module is a cycle: neither side
   can be read or tested alone.
2. No ticket numbers in code or docs ("issue 12", "(issue 13)"): a reader of the repository
   has no issue tracker; say what and why, or name the spec section or RFC.

Cycles listed in scripts/layout-known-cycles.txt (one line per cycle: the crate, a colon,
the modules in sorted order, comma-separated) are reported as known and do not fail the
check; any other cycle does, and so does a listed cycle that is gone (remove its line), so
the list only shrinks.

Usage: scripts/check-layout.py [REPO]   (exit 1 and a list of findings when a check fails)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
CRATES = ["shared", "dataplane", "ctl", "cli-support", "benches"]
SKIP_DIRS = {"target", "vendor", ".git", "node_modules"}


def module_of(src: str, path: str) -> tuple:
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main") and len(rel) == 1:
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


def strip_code(text: str) -> str:
    """Code without comments, string contents and `#[cfg(test)]` items (brace-matched)."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        j = text.find("{", m.end())
        semi = text.find(";", m.end())
        if semi != -1 and (j == -1 or semi < j):  # `#[cfg(test)] mod tests;`
            i = semi + 1
            continue
        depth, k = 0, j
        while k < len(text):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    out.append(text[i:])
    return "".join(out)


def cycles() -> list:
    findings = []
    for crate in CRATES:
        src = os.path.join(ROOT, crate, "src")
        if not os.path.isdir(src):
            continue
        files = {}
        for d, dirs, names in os.walk(src):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
            for n in names:
                if n.endswith(".rs") and not (n.endswith("_tests.rs") or n in ("tests.rs",) or n.startswith("tests_")):
                    p = os.path.join(d, n)
                    files[module_of(src, p)] = p
        mods = set(files)
        edges = {m: set() for m in mods}

        def resolve(parts):
            for k in range(len(parts), 0, -1):
                if tuple(parts[:k]) in mods:
                    return tuple(parts[:k])
            return None

        for m, p in files.items():
            code = strip_code(open(p, encoding="utf-8").read())
            # `use a::{b, c::d}` groups: take every path inside braces relative to the prefix
            for u in re.finditer(r"\buse\s+([^;]+);", code):
                body = re.sub(r"\s+", "", u.group(1))
                for path in expand(body):
                    add_edge(edges, m, path, resolve)
            for q in re.finditer(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", code):
                add_edge(edges, m, q.group(1).split("::"), resolve)
        for scc in strongly_connected(edges):
            if len(scc) > 1:
                names = sorted("::".join(x) or "crate" for x in scc)
                via = sorted(f"{'::'.join(a)} -> {'::'.join(b)}" for a in scc for b in edges[a] if b in scc)
                findings.append((f"{crate}: {', '.join(names)}", f"{crate}: import cycle between {', '.join(names)} ({'; '.join(via)})"))
    return findings


def expand(body: str) -> list:
    """`a::{b,c::{d,e}}` -> [[a,b],[a,c,d],[a,c,e]] (aliases and `self` dropped)."""
    m = re.match(r"^([^{}]*?)(?:::)?\{(.*)\}$", body)
    if not m:
        return [re.sub(r"as\w+$", "", body).split("::")]
    prefix = [x for x in m.group(1).split("::") if x]
    inner, parts, depth, cur = m.group(2), [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if not part:
            continue
        for sub in expand(part):
            out.append(prefix + [s for s in sub if s != "self"])
    return out


def add_edge(edges, m, parts, resolve):
    if not parts:
        return
    if parts[0] == "crate":
        target = resolve(parts[1:])
    elif parts[0] == "super":
        base = list(m)
        while parts and parts[0] == "super":
            base = base[:-1]
            parts = parts[1:]
        target = resolve(base + parts) if base + parts else ()
    else:
        return
    if target is None or target == m:
        return
    if target[: len(m)] == m or m[: len(target)] == target:  # ancestor / descendant
        return
    edges[m].add(target)


def strongly_connected(edges):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


TICKET = re.compile(r"\b[Ii]ssues?\s+#?\d+\b|\(#\d+\)|\bticket\s+#?\d+", re.I)


def tickets() -> list:
    findings = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")]
        for n in names:
            if not n.endswith((".rs", ".md", ".sh", ".py", ".toml", ".conf", ".service")):
                continue
            p = os.path.join(d, n)
            if p == os.path.abspath(__file__):
                continue
            for i, line in enumerate(open(p, encoding="utf-8", errors="replace"), 1):
                if TICKET.search(line):
                    findings.append(f"{os.path.relpath(p, ROOT)}:{i}: ticket number: {line.strip()[:120]}")
    return findings


def main():
    known_path = os.path.join(ROOT, "scripts", "layout-known-cycles.txt")
    known = set()
    if os.path.exists(known_path):
        known = {l.strip() for l in open(known_path) if l.strip() and not l.startswith("#")}
    found = []
    seen = set()
    for key, text in cycles():
        seen.add(key)
        if key in known:
            print(f"known: {text}")
        else:
            found.append(text)
    found += [f"scripts/layout-known-cycles.txt: {k}: no longer a cycle; remove the line" for k in sorted(known - seen)]
    found += tickets()
    for f in found:
        print(f)
    if found:
        print(f"check-layout: {len(found)} finding(s)")
        sys.exit(1)
    print(f"check-layout: no new import cycle ({len(seen)} known), no ticket number")


if __name__ == "__main__":
    main()
