#!/usr/bin/env python3
"""The gateway's structure, counted from its own source: rooms (src/'s top-level folders and
files), the imports between them (`crate::<room>` paths, `use super::` stays inside), the loops
between rooms (strongly connected groups) and the arrows inside them (each loop needs at least
one of those cut), `Gateway`'s pub fields, request-path functions over 60 lines, functions over 80 and files over 600 lines in src/ (issue 39).

It also holds the rooms' intended order, bottom first (`LAYERS`): a room may import the rooms below
it. Every import of a room above is an arrow pointing up, listed with its file and the names it
takes (`--up`).

Run from the repository: `python3 scripts/structure.py` (add `--edges` to list every arrow,
`--up` to list the arrows pointing up).
Counts are of text, not of rustc's resolution: a `crate::x` in a comment or string counts too.
"""
import os
import re
import sys
from collections import defaultdict

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
# The files a request passes through, for the function-length rule.
REQUEST_PATH = (
    "http/",
    "pipeline/",
    "web/",
    "auth/",
    "policy/",
    "http/rewrite.rs",
    "upstream/mod.rs",
    "upstream/pool.rs",
    "upstream/endpoint.rs",
    "upstream/redact.rs",
    "inbox/reply.rs",
)
# Bottom first. support knows nothing of the gateway; config is raw settings; the running gateway
# sits above everything it holds; the pipeline above the pages it serves; the front doors above
# the pipeline; the CLI on top.
LAYERS = (
    "support",
    "config",
    "reach",
    "store",
    "metrics",
    "audit",
    # The meter knows only the config's budgets: the inbox feeds it, the pipeline asks it.
    "budget",
    "policy",
    "ratelimit",
    "auth",
    "upstream",
    # The inbox below the notifier: the inbox only queues its new cards (`inbox::Queue`); the
    # notifier takes them and says so to a webhook or ntfy, so it names the inbox's cards, never
    # the other way round. Below oidc too, which uses the notifier's HTTPS client.
    "inbox",
    "notify",
    "oidc",
    "gateway",
    "http",
    "web",
    "pipeline",
    "front",
    "cli",
)


def room_of(rel):
    head = rel.split("/")[0]
    return head[:-3] if head.endswith(".rs") else head


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def main():
    files = []
    for root, _, names in os.walk(SRC):
        for n in names:
            if n.endswith(".rs"):
                path = os.path.join(root, n)
                files.append((os.path.relpath(path, SRC), path))
    rooms = sorted({room_of(rel) for rel, _ in files} - {"main", "lib"})
    edges = defaultdict(set)
    up = []
    for rel, path in files:
        src_room = room_of(rel)
        if src_room in ("main", "lib"):
            continue
        text = strip_comments(open(path, encoding="utf-8").read())
        for m in re.finditer(r"\bcrate::([a-z_][a-z0-9_]*)", text):
            dst = m.group(1)
            if dst in rooms and dst != src_room:
                edges[src_room].add(dst)
                if rank(dst) > rank(src_room):
                    up.append(f"{rel} -> {m.group(0)}")
        # `use crate::{a, b::c}` groups
        for m in re.finditer(r"\bcrate::\{([^}]*)\}", text):
            for part in m.group(1).split(","):
                dst = part.strip().split("::")[0]
                if dst in rooms and dst != src_room:
                    edges[src_room].add(dst)
    sccs = tarjan(rooms, edges)
    loops = [c for c in sccs if len(c) > 1]
    inside = sum(1 for a in edges for b in edges[a] for c in loops if a in c and b in c)
    arrows = sum(len(v) for v in edges.values())
    print(f"rooms: {len(rooms)}")
    print(f"arrows between rooms: {arrows}")
    print(f"loops between rooms: {len(loops)}")
    for c in loops:
        print(f"  loop of {len(c)}: {', '.join(sorted(c))}")
    print(f"arrows inside loops: {inside}")
    up_rooms = {(a, b) for a in edges for b in edges[a] if rank(b) > rank(a)}
    print(f"arrows pointing up (room to room, by LAYERS): {len(up_rooms)}")
    if "--up" in sys.argv:
        for line in sorted(set(up)):
            print(f"  {line}")
    print(f"Gateway pub fields: {gateway_pub_fields()}")
    # Issue 39's must-show: request-path functions over 60 lines, any function in src/ over 80
    # (test modules included), any file in src/ over 600.
    for label, found in (
        ("request-path functions over 60 lines", long_functions(files, 60, REQUEST_PATH, skip_tests=True)),
        ("functions in src/ over 80 lines", long_functions(files, 80, ("",), skip_tests=False)),
        ("files in src/ over 600 lines", long_files(files, 600)),
    ):
        print(f"{label}: {len(found)}")
        for n, where in sorted(found, reverse=True):
            print(f"  {n:4} {where}")
    if "--edges" in sys.argv:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(sorted(edges[a]))}")


def rank(room):
    # A room not in LAYERS (a new one) counts as the top, so its imports never point up unnoticed.
    return LAYERS.index(room) if room in LAYERS else len(LAYERS)


def tarjan(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def gateway_pub_fields():
    for rel in ("gateway/mod.rs",):
        path = os.path.join(SRC, rel)
        if os.path.exists(path):
            text = open(path, encoding="utf-8").read()
            m = re.search(r"pub struct Gateway \{(.*?)\n\}", text, flags=re.S)
            if m:
                return len(re.findall(r"^\s*pub [a-z_0-9]+:", m.group(1), flags=re.M))
    return 0


def long_files(files, limit):
    out = []
    for rel, path in files:
        n = open(path, encoding="utf-8").read().count("\n")
        if n > limit:
            out.append((n, rel))
    return out


def long_functions(files, limit, under, skip_tests):
    out = []
    for rel, path in files:
        if not rel.startswith(under):
            continue
        lines = open(path, encoding="utf-8").read().split("\n")
        in_tests = False
        i = 0
        while i < len(lines):
            line = lines[i]
            # A test module ends the file's request path; a single `#[cfg(test)]` item does not.
            if re.match(r"\s*#\[cfg\(test\)\]", line) and i + 1 < len(lines) and re.match(r"\s*mod ", lines[i + 1]):
                in_tests = skip_tests
            m = re.match(r"\s*(pub(\([a-z]+\))? )?(async )?fn ([a-z_0-9]+)", line)
            if m and not in_tests:
                depth, j, started = 0, i, False
                while j < len(lines):
                    code = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'', "", lines[j])
                    depth += code.count("{") - code.count("}")
                    started = started or "{" in lines[j]
                    if started and depth <= 0:
                        break
                    j += 1
                length = j - i + 1
                if length > limit:
                    out.append((length, f"{rel}:{i + 1} {m.group(4)}"))
                i = j
            i += 1
    return out


if __name__ == "__main__":
    main()
