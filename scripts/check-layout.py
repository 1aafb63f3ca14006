#!/usr/bin/env python3
"""Layout checks of the repository (run by scripts/test.sh, step `layout`):

1. No import cycle between the modules of a crate. Every `crate::a::b` and `super::x`
   path in a module's code (comments, `#[cfg(test)]` items and test files: `tests*`,
   `*_tests.rs` and anything under a `tests*` folder, excluded) is an
   edge from that module to the longest existing module the path names. Edges between a
   module and its own ancestors or descendants are not counted (a parent declares its
   children). A strongly connected set of more than one module is a cycle: neither side
   can be read or tested alone.
2. No ticket numbers in code or docs ("issue 12", "(issue 13)"): a reader of the repository
   has no issue tracker; say what and why, or name the spec section or RFC.
3. No back arrow in the daemon crate: docs/architecture.md "Layers" numbers its layers,
   each a list of modules in backticks (`fastpath::stats`; a module's descendants are in
   its layer unless listed themselves); every module of dataplane/src is in one, and no
   import (the edges of check 1) goes from a module to one of a higher layer, except the
   arrows the section lists as "- `a` -> `b`: why".
4. The tree tables of docs/architecture.md match the crates: a table follows a line
   `<!-- layout: CRATE/src -->`; every file and folder under that directory (tests and
   `mod.rs` excepted) is named in backticks in the first two cells of the row of its
   top-level file or folder (`v6.rs` and `worker/` in the row of `fastpath/`), every
   top-level one has a row, and every `name.rs` or `name/` a row names exists there.

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
        if not os.path.isdir(os.path.join(ROOT, crate, "src")):
            continue
        edges = module_edges(crate)
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


DOC = os.path.join(ROOT, "docs", "architecture.md")
MOD = re.compile(r"`([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)`")


def is_test(rel: str) -> bool:
    return any(x.startswith("tests") or x.endswith("_tests.rs") for x in rel.split(os.sep))


def module_edges(crate: str):
    src = os.path.join(ROOT, crate, "src")
    files = {}
    for d, dirs, names in os.walk(src):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for n in names:
            p = os.path.join(d, n)
            if n.endswith(".rs") and not is_test(os.path.relpath(p, src)):
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
        for u in re.finditer(r"\buse\s+([^;]+);", code):
            for path in expand(re.sub(r"\s+", "", u.group(1))):
                add_edge(edges, m, path, resolve)
        for q in re.finditer(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", code):
            add_edge(edges, m, q.group(1).split("::"), resolve)
    return edges


def section(text: str, title: str) -> str:
    m = re.search(r"^#+ " + re.escape(title) + r"\s*$(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def back_arrows() -> list:
    text = section(open(DOC, encoding="utf-8").read(), "Layers")
    if not text:
        return ["docs/architecture.md: no section \"Layers\""]
    layer, allowed = {}, set()
    for line in text.splitlines():
        n = re.match(r"^(\d+)\. (.*)", line)
        if n:
            head = re.split(r":\s", n.group(2))[0]
            for mod in MOD.findall(head):
                layer[tuple(mod.split("::"))] = int(n.group(1))
        a = re.match(r"^- `([\w:]+)` -> `([\w:]+)`:", line)
        if a:
            allowed.add((a.group(1), a.group(2)))

    def of(m):
        for k in range(len(m), 0, -1):
            if m[:k] in layer:
                return layer[m[:k]]
        return None

    findings, edges = [], module_edges("dataplane")
    for m in sorted(edges):
        if m and of(m) is None:
            findings.append(f"dataplane: module {'::'.join(m)} is in no layer of docs/architecture.md \"Layers\"")
    for a in sorted(edges):
        for b in sorted(edges[a]):
            la, lb = of(a), of(b)
            if None in (la, lb) or lb <= la:
                continue
            name = ("::".join(a), "::".join(b))
            if name not in allowed:
                findings.append(f"dataplane: back arrow {name[0]} (layer {la}) -> {name[1]} (layer {lb}): move the shared item down, or list the arrow with its reason in docs/architecture.md \"Layers\"")
    return findings


def tree_tables() -> list:
    findings, text = [], open(DOC, encoding="utf-8").read()
    for m in re.finditer(r"<!-- layout: ([\w./-]+) -->\s*\n((?:\|.*\n)+)", text):
        base = m.group(1).rstrip("/")
        src = os.path.join(ROOT, base)
        rows = {}
        for line in m.group(2).splitlines()[2:]:
            cells = line.strip().strip("|").split("|")
            keys = re.findall(r"`([\w.-]+/?)`", cells[0])
            named = set(re.findall(r"`([\w.-]+/?)`", " ".join(cells[:2])))
            for k in keys:
                rows[k] = (keys, named)
        top = sorted(os.listdir(src)) if os.path.isdir(src) else []
        if not top:
            findings.append(f"docs/architecture.md: layout table of {base}: no such directory")
        for t in top:
            p = os.path.join(src, t)
            key = t + "/" if os.path.isdir(p) else t
            if is_test(t) or not (key.endswith("/") or t.endswith(".rs")):
                continue
            if key not in rows:
                # a file's tests folder (`quic_lb/` beside `quic_lb.rs`) goes with the file
                if key.endswith("/") and key[:-1] + ".rs" in rows:
                    continue
                findings.append(f"docs/architecture.md: layout table of {base}: no row for `{key}`")
                continue
            named, under = rows[key][1], []
            if os.path.isdir(p):
                for d, dirs, names in os.walk(p):
                    dirs[:] = sorted(x for x in dirs if not is_test(x))
                    under += [x for x in names if x.endswith(".rs") and x != "mod.rs" and not is_test(x)]
                    if d != p and any(x.endswith(".rs") and not is_test(x) for x in names):
                        under.append(os.path.basename(d) + "/")  # a folder of tests only is its module's
            for u in under:
                if u not in named:
                    findings.append(f"docs/architecture.md: layout table of {base}: row `{key}` does not name `{u}`")
        for key, (keys, named) in rows.items():
            if key != keys[0]:
                continue
            here = [k[:-1] if k.endswith("/") else k for k in keys] + [k[:-3] for k in keys if k.endswith(".rs")]
            exist = {t + "/" if os.path.isdir(os.path.join(src, t)) else t for t in top}  # other rows named
            for h in here:
                hp = os.path.join(src, h)
                exist.add(os.path.basename(hp) + ("/" if os.path.isdir(hp) else ""))
                for d, dirs, names in os.walk(hp):
                    exist.update(x + "/" for x in dirs)
                    exist.update(names)
            for n in named:
                if (n.endswith(".rs") or n.endswith("/")) and n not in exist:
                    findings.append(f"docs/architecture.md: layout table of {base}: row `{key}` names `{n}`, which is not there")
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
    found += back_arrows()
    found += tree_tables()
    for f in found:
        print(f)
    if found:
        print(f"check-layout: {len(found)} finding(s)")
        sys.exit(1)
    print(f"check-layout: no new import cycle ({len(seen)} known), no ticket number, no back arrow, layout tables match the tree")


if __name__ == "__main__":
    main()
