#!/usr/bin/env python3
"""check_design.py -- the design rules `make test` keeps true (docs/design.md
"Design check").

Reads which file defines and which file uses every global symbol from the
objects of the last build (nm on build/obj/**/*.o; an object whose source file
is gone is ignored) and greps the sources. Checks:

  calls     a file calls only files of its own component or of a component
            below it (COMPONENTS), and no call circle spans two components
  circles   inside a component, no call circle of more than 2 files (those
            that remain are listed in the allow-list with the reason);
            --cycles lists every cycle, 2-file ones too, with the symbols that
            close it (`make check-cycles`)
  includes  no relative include reaches across folders
  encoders  libps builds each PS.* command in exactly one function; the tools
            (train, relay, ...) build none themselves
  facts     each protocol fact is written once: optimizer and wire-format
            names appear as string literals only in common/protocol.h, no
            error reply is matched by its text outside common/protocol.c,
            clocks are read only in common/clock.h, which the module never
            includes, and libps casts no format enum into another

Components are the top-level folders; COMPONENTS names the known ones and
what each may call. A folder that is not there (and not in NOT_COMPONENTS)
counts as a component of its own, with a warning. Files may move between
folders or be renamed: the checks look at whatever the build and the tree
hold.

Exceptions live in scripts/design_allow.txt, one per line with its reason:
    circle <component> <file> <file> ... -- reason   (a circle within those files)
    encoder <PS.CMD> <function> ... -- reason        (built in those functions)
    outside <PS.CMD> -- reason                       (a tool builds it itself)
    literal <optimizer|format> <file> -- reason      (names as literals in that file)
Files are named by base name (robust to moving folders). An entry that
matches nothing any more is reported as a note; a violation that no entry
covers fails the check and prints the line that would allow it.

Exit status 0 when every check passes, 1 otherwise."""

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

# folder -> components it may call (besides itself). Below-to-above order:
# common < module, libps, ml < train, tools, relay.
COMPONENTS = {
    "common": [],
    "module": ["common"],
    "libps": ["common"],
    "ml": ["common"],
    "train": ["common", "libps", "ml"],
    "tools": ["common", "ml", "libps"],
    "relay": ["common", "libps"],
}
# Top-level folders that are not components (they may see every component).
NOT_COMPONENTS = {"tests", "bench", "fuzz", "python_tests", "examples", "build", "python",
                  "scripts", "docs", "examples", ".git"}
# Components that answer commands rather than send them.
SERVER_SIDE = {"module", "common"}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTOCOL_H = "common/protocol.h"
PROTOCOL_C = "common/protocol.c"
CLOCK_H = "common/clock.h"

failures = []
notes = []


def fail(section, msg, allow_line=None):
    failures.append((section, msg, allow_line))


# ---------------------------------------------------------------- sources

def component_of(rel):
    top = rel.split("/", 1)[0]
    if "/" not in rel or top in NOT_COMPONENTS or top.startswith("."):
        return None
    return top


def source_files():
    """Every .c/.h under a component folder, relative to ROOT."""
    out = []
    for top in sorted(os.listdir(ROOT)):
        if top in NOT_COMPONENTS or top.startswith(".") or not os.path.isdir(os.path.join(ROOT, top)):
            continue
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return sorted(out)


def strip_comments(text):
    """The text with comments blanked (string literals kept; newlines kept so
    line numbers stay)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


_code_cache = {}


def code_of(rel):
    if rel not in _code_cache:
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            _code_cache[rel] = strip_comments(f.read())
    return _code_cache[rel]


LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def literals(rel):
    """(line number, literal text, line) of every string literal of a file."""
    lines = code_of(rel).split("\n")
    for no, line in enumerate(lines, 1):
        for m in LITERAL.finditer(line):
            yield no, m.group(1), line


# ---------------------------------------------------------------- allow-list

class Allow:
    def __init__(self, path):
        self.entries = []  # (kind, args, reason, line)
        self.used = set()
        if not os.path.exists(path):
            return
        with open(path, encoding="utf-8") as f:
            for no, raw in enumerate(f, 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                head, _, reason = line.partition(" -- ")
                parts = head.split()
                if len(parts) < 2 or not reason.strip():
                    fail("allow-list", "%s:%d: needs '<kind> <args> -- <reason>'" % (path, no))
                    continue
                self.entries.append((parts[0], parts[1:], reason.strip(), no))

    def find(self, kind, pred):
        for i, (k, args, _, _) in enumerate(self.entries):
            if k == kind and pred(args):
                self.used.add(i)
                return True
        return False

    def stale(self):
        for i, (k, args, reason, no) in enumerate(self.entries):
            if i not in self.used:
                notes.append("design_allow.txt:%d: '%s %s' matches nothing any more: remove it"
                             % (no, k, " ".join(args)))


# ---------------------------------------------------------------- symbols

DEFINED = set("TDBRCVGSWI")


def read_objects(objroot):
    """{source rel path: (defined globals, undefined globals)} of the objects
    under objroot whose source file exists."""
    objs = {}
    for d, _, files in os.walk(objroot):
        for f in files:
            if not f.endswith(".o"):
                continue
            obj = os.path.join(d, f)
            rel = os.path.relpath(obj, objroot)[:-2] + ".c"
            if component_of(rel) is None or not os.path.exists(os.path.join(ROOT, rel)):
                continue
            out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
            defs, uses = set(), set()
            for line in out.splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue
                name, typ = parts[0], parts[1]
                if name.startswith("RedisModule_"):
                    # The Redis module API: function pointers that the file
                    # including redismodule.h with REDISMODULE_MAIN defines.
                    # Using one calls Redis, not that file.
                    continue
                if typ in ("U", "w", "v"):
                    uses.add(name)
                elif typ in DEFINED:
                    defs.add(name)
            objs[rel] = (defs, uses)
    return objs


def call_graph(objs):
    """{file: {file: [symbols]}}: who calls (or reads) whom."""
    definers = defaultdict(list)
    for rel, (defs, _) in objs.items():
        for s in defs:
            definers[s].append(rel)
    g = {rel: defaultdict(list) for rel in objs}
    for rel, (_, uses) in objs.items():
        for s in uses:
            ds = definers.get(s, [])
            same = [d for d in ds if component_of(d) == component_of(rel)]
            for d in (same or ds):
                if d != rel:
                    g[rel][d].append(s)
    return g


def sccs(nodes, edges):
    """Strongly connected components (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
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
                out.append(sorted(comp))
    return out


def check_calls(g, allow):
    comps = sorted({component_of(f) for f in g})
    for c in comps:
        if c not in COMPONENTS:
            notes.append("component '%s/' is not in COMPONENTS (scripts/check_design.py): "
                         "its calls are checked for circles only" % c)
    # Direction: a file calls its own component or one below.
    for a in sorted(g):
        ca = component_of(a)
        if ca not in COMPONENTS:
            continue
        for b, syms in sorted(g[a].items()):
            cb = component_of(b)
            if cb != ca and cb in COMPONENTS and cb not in COMPONENTS[ca]:
                fail("calls", "%s calls %s (%s): %s may call only %s" % (
                    a, b, ", ".join(sorted(set(syms))[:4]), ca,
                    ", ".join(COMPONENTS[ca]) or "itself"))
    # Circles.
    edges = {a: set(bs) for a, bs in g.items()}
    circles = []
    for comp in sccs(sorted(g), edges):
        if len(comp) < 2:
            continue
        cs = sorted({component_of(f) for f in comp})
        if len(cs) > 1:
            fail("calls", "call circle across components %s: %s" % ("/".join(cs), " ".join(comp)))
            continue
        if len(comp) > 2:
            circles.append((cs[0], comp))
    for c, comp in circles:
        names = sorted({os.path.basename(f) for f in comp})
        ok = allow.find("circle", lambda args: args[0] == c and set(names) <= set(args[1:]))
        line = "circle %s %s -- <why it stays>" % (c, " ".join(names))
        if ok:
            notes.append("allowed circle in %s/ (%d files): %s" % (c, len(comp), " ".join(names)))
        else:
            fail("circles", "call circle of %d files in %s/: %s" % (len(comp), c, " ".join(comp)),
                 line)
    return circles


def print_cycles(g, only=None):
    """Every call cycle (a strongly connected set of 2 or more files), with the symbols
    that close it, of the files of the components 'only' (all when empty). What `make
    check-cycles` prints: a cycle of 2 files inside a component is allowed, any other is
    one of the failures check_calls reports."""
    keep = {f for f in g if not only or component_of(f) in only}
    edges = {a: {b for b in bs if b in keep} for a, bs in g.items() if a in keep}
    n = 0
    for comp in sccs(sorted(keep), edges):
        if len(comp) < 2:
            continue
        n += 1
        across = len({component_of(f) for f in comp}) > 1
        print("  %s: cycle of %d files: %s" % (
            "FAIL" if across or len(comp) > 2 else "allowed", len(comp), " ".join(comp)))
        for a in comp:
            for b in sorted(edges[a] & set(comp)):
                print("      %s -> %s: %s" % (a, b, " ".join(sorted(set(g[a][b]))[:5])))
    print("check-design: %d call cycle(s) among the files of %s" % (
        n, ", ".join(sorted(only)) if only else "every component"))


# ---------------------------------------------------------------- includes

REL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]*\.\./[^"]*)"', re.M)
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def check_includes(files):
    for rel in files:
        code = code_of(rel)
        for m in REL_INCLUDE.finditer(code):
            fail("includes", "%s includes \"%s\" (a relative include across folders)"
                 % (rel, m.group(1)))
        if component_of(rel) == "module":
            for m in INCLUDE.finditer(code):
                if os.path.basename(m.group(1)) == os.path.basename(CLOCK_H):
                    fail("facts", "%s includes clock.h: nothing replicated may read a clock" % rel)


# ---------------------------------------------------------------- encoders

CMD_LITERAL = re.compile(r"^PS\.[A-Z_]+( (%s|%b|%d|%u|%lld|%llu|%zu|[A-Z0-9_]+))*$")
MESSAGE_CALL = re.compile(r"\b(\w*set_error|\w*printf|say|tr_err|perror|\w*errstr)\b")
FUNC_HEAD = re.compile(r"^[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(")


def functions_by_line(rel):
    """{line number: enclosing function name} (top-level brace tracking)."""
    owner, depth, last_head, cur = {}, 0, None, None
    for no, line in enumerate(code_of(rel).split("\n"), 1):
        if depth == 0:
            m = FUNC_HEAD.match(line)
            if m and not line.rstrip().endswith(";"):
                last_head = m.group(1)
            elif re.search(r"=\s*\{", line) or line.rstrip().endswith("="):
                last_head = "(data)"  # a top-level initializer
        seen = cur
        for ch in LITERAL.sub('""', line):
            if ch == "{":
                if depth == 0:
                    cur = seen = last_head
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    cur = None
        owner[no] = seen
    return owner


def check_encoders(files, allow):
    built = defaultdict(set)   # command -> {(file, function)}
    outside = defaultdict(set)  # command -> {file}
    for rel in files:
        comp = component_of(rel)
        if comp in SERVER_SIDE or not rel.endswith(".c"):
            continue
        owner = functions_by_line(rel) if comp == "libps" else {}
        for no, lit, line in literals(rel):
            if not CMD_LITERAL.match(lit) or MESSAGE_CALL.search(line):
                continue
            cmd = lit.split()[0]
            if comp == "libps":
                built[cmd].add((rel, owner.get(no) or "?"))
            else:
                outside[cmd].add(rel)
    for cmd, where in sorted(built.items()):
        funcs = sorted({f for _, f in where})
        if len(funcs) > 1:
            ok = allow.find("encoder", lambda args: args[0] == cmd and set(funcs) <= set(args[1:]))
            if not ok:
                fail("encoders", "%s is built in %d libps functions: %s" % (
                    cmd, len(funcs), ", ".join("%s (%s)" % (f, r) for r, f in sorted(where))),
                    "encoder %s %s -- <why>" % (cmd, " ".join(funcs)))
    for cmd, where in sorted(outside.items()):
        ok = allow.find("outside", lambda args: args[0] == cmd)
        if not ok:
            fail("encoders", "%s is built outside libps, in %s (add an encoder to libps)"
                 % (cmd, ", ".join(sorted(where))), "outside %s -- <why>" % cmd)
    return built


# ---------------------------------------------------------------- facts

def protocol_facts():
    text = code_of(PROTOCOL_H)
    optims = re.findall(r'\bX\((\w+),\s*"(\w+)",', text)
    m = re.search(r"#define PS_PROTO_FORMATS\(X1, X\)(.*?)\n\n", text, re.S)
    formats = re.findall(r"\bX1?\((\w+),", m.group(1)) if m else []
    errtexts = re.findall(r'#define PS_PROTO_ERRTEXT_\w+ "([^"]+)"', text)
    if not optims or not formats or not errtexts:
        fail("facts", "%s: cannot read the optimizer, format or error tables" % PROTOCOL_H)
    return [name for _, name in optims], formats, errtexts


COMPARE_CALL = re.compile(r"\b(strstr|strcasestr|strcmp|strncmp|strcasecmp|strncasecmp|memcmp)\s*\(")


def call_args(line, start):
    """The text of a call's arguments from the '(' at 'start' (same line)."""
    depth, i = 0, start
    while i < len(line):
        if line[i] == "(":
            depth += 1
        elif line[i] == ")":
            depth -= 1
            if depth == 0:
                return line[start + 1:i]
        i += 1
    return line[start + 1:]


def check_facts(files, allow):
    optims, formats, errtexts = protocol_facts()
    codes = {t for t in errtexts if " " not in t} | {"ERR"}
    # The fixed parts of the multi-word templates, placeholders cut out.
    fixed = [p.strip() for t in errtexts if " " in t
             for p in re.split(r"%[a-z]+", t.split(" ", 1)[1]) if len(p.strip()) >= 5]
    facts = [("optimizer", {o.lower() for o in optims}), ("format", {f.lower() for f in formats})]
    for rel in files:
        comp = component_of(rel)
        base = os.path.basename(rel)
        code = code_of(rel)
        if rel != PROTOCOL_H:
            hits = defaultdict(list)
            for no, lit, _ in literals(rel):
                for fact, names in facts:
                    if lit.lower() in names:
                        hits[fact].append("%d:\"%s\"" % (no, lit))
            for fact, where in sorted(hits.items()):
                if not allow.find("literal", lambda a: a[0] == fact and a[1:] == [base]):
                    fail("facts", "%s names %s %ss as literals (%s): take them from %s"
                         % (rel, len(where), fact, " ".join(where[:6]), PROTOCOL_H),
                         "literal %s %s -- <why>" % (fact, base))
        if rel != PROTOCOL_C:
            for no, line in enumerate(code.split("\n"), 1):
                for m in COMPARE_CALL.finditer(line):
                    args = call_args(line, line.index("(", m.start()))
                    # A code word anywhere; a piece of a message when the
                    # call looks at a reply's text (->str).
                    for lit in LITERAL.findall(args):
                        if lit in codes or ("->str" in args and len(lit) >= 5 and
                                            any(lit in f for f in fixed)):
                            fail("facts", "%s:%d matches an error reply by its text (\"%s\"): "
                                 "classify it with ps_proto_error_class (libps: psi_reply_error)"
                                 % (rel, no, lit))
        if rel != CLOCK_H:
            for no, line in enumerate(code.split("\n"), 1):
                if re.search(r"\b(clock_gettime|gettimeofday)\s*\(", line):
                    fail("facts", "%s:%d reads a clock: use common/clock.h" % (rel, no))
        if comp == "libps":
            for no, line in enumerate(code.split("\n"), 1):
                if re.search(r"\(\s*(ps_format|psWireFormat)\s*\)\s*[A-Za-z_(]", line):
                    fail("facts", "%s:%d casts into a format enum: map formats with psi_format"
                         % (rel, no))


# ---------------------------------------------------------------- main

def main():
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=ROOT, help="the source tree (default: this checkout)")
    ap.add_argument("--obj", help="the build's object folder (default ROOT/build/obj)")
    ap.add_argument("--allow", help="the allow-list (default ROOT/scripts/design_allow.txt)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print the notes")
    ap.add_argument("--cycles", nargs="*", metavar="COMPONENT",
                    help="also list every call cycle (with the symbols closing it) among the "
                         "files of these components (none named: all)")
    a = ap.parse_args()
    ROOT = os.path.abspath(a.root)
    a.obj = a.obj or os.path.join(ROOT, "build", "obj")
    a.allow = a.allow or os.path.join(ROOT, "scripts", "design_allow.txt")
    if not os.path.isdir(a.obj):
        print("check-design: no objects in %s (build first: make all)" % a.obj)
        return 1
    allow = Allow(a.allow)
    files = source_files()
    objs = read_objects(a.obj)
    g = call_graph(objs)
    circles = check_calls(g, allow)
    if a.cycles is not None:
        print_cycles(g, set(a.cycles))
    check_includes(files)
    check_encoders(files, allow)
    check_facts(files, allow)
    allow.stale()

    ncomp = len({component_of(f) for f in objs})
    nedges = sum(len(v) for v in g.values())
    print("check-design: %d objects in %d components, %d file-to-file calls; "
          "%d circle(s) of more than 2 files inside a component" % (len(objs), ncomp, nedges,
                                                                 len(circles)))
    for c, comp in circles:
        print("  circle in %s/: %s" % (c, " ".join(os.path.basename(f) for f in comp)))
    if a.verbose or failures:
        for n in notes:
            print("  note: " + n)
    else:
        for n in notes:
            if "matches nothing" in n or "not in COMPONENTS" in n:
                print("  note: " + n)
    if failures:
        print("check-design: FAILED (%d)" % len(failures))
        for section, msg, line in failures:
            print("  [%s] %s" % (section, msg))
        lines = sorted({line for _, _, line in failures if line})
        if lines:
            print("  Fix the code, or (with a reason) add to %s:" % os.path.relpath(a.allow, ROOT))
            for line in lines:
                print("    " + line)
        return 1
    print("check-design: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
