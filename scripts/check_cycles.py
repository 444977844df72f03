#!/usr/bin/env python3
"""Call cycles between C files, from the symbols of their objects (nm).

usage: check_cycles.py OBJDIR COMPONENT [COMPONENT ...]

Each COMPONENT is a folder of OBJDIR (e.g. build/obj train ml). A file calls
another when its object uses a symbol (function or data) the other defines.
Fails (exit 1) on a cycle between files of different components, or a cycle of
more than 2 files inside one; prints every cycle it finds with the symbols
that close it. Files of other folders are not looked at."""

import glob
import os
import subprocess
import sys


def symbols(obj):
    """(defined, used) global symbols of one object file."""
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRCV":
            defined.add(parts[2])
    return defined, used


def strongly_connected(edges):
    """Tarjan's algorithm, iterative. Returns the components (lists of nodes)."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    objdir, comps = argv[1], argv[2:]
    owner, uses = {}, {}
    for comp in comps:
        for obj in sorted(glob.glob(os.path.join(objdir, comp, "*.o"))):
            name = os.path.join(comp, os.path.basename(obj)[:-2])
            defined, used = symbols(obj)
            uses[name] = used
            for s in defined:
                owner.setdefault(s, name)
    edges = {f: {owner[s] for s in u if s in owner and owner[s] != f} for f, u in uses.items()}
    bad = 0
    for comp in strongly_connected(edges):
        if len(comp) < 2:
            continue
        folders = {f.rsplit("/", 1)[0] for f in comp}
        fail = len(folders) > 1 or len(comp) > 2
        bad += fail
        print("%s: cycle of %d files: %s" % ("FAIL" if fail else "allowed", len(comp),
                                             " ".join(comp)))
        for a in comp:
            for b in sorted(edges[a] & set(comp)):
                syms = sorted(s for s in uses[a] if owner.get(s) == b)
                print("    %s -> %s: %s" % (a, b, " ".join(syms[:5])))
    if bad:
        print("check_cycles: %d forbidden cycle(s) among %s" % (bad, " ".join(comps)))
        return 1
    print("check_cycles: %d files of %s, no cycle across components, none of more than 2 "
          "files" % (len(uses), " ".join(comps)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
