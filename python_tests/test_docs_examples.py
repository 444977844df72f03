"""Every `redis>` example in docs/commands.md, docs/reference.md and README.md, run
against a real server and compared exactly.

How the document is read:
- A session is one `## ` section of one file (with its `### ` sub-sections). Each session
  gets a fresh redis-server with the module and one connection, and runs the section's
  examples in document order, so a later block of the same section sees the keys an earlier
  one made.
- In a fenced code block, a line `redis> COMMAND ...` is a command; the lines after it, up to
  the next `redis>` line or the end of the block, are its expected reply as interactive
  redis-cli prints it: `OK` / `QUEUED` (status), `(integer) n`, `(nil)`, `(error) MSG`, a
  quoted string with redis-cli's escapes, numbered arrays (nested ones indented), and INFO
  printed raw. Command lines are split as redis-cli splits them, so blobs are written as
  "..." strings with \\xHH escapes.
- A block preceded by the line `<!-- docs-examples: skip -->` is not run (keep these few, and
  say in the text why its output cannot be reproduced). No block is skipped today.

A new section or example in these files is picked up without touching this file.
"""

import os
import re

import pytest

import psserver

DOCS = [os.path.join(psserver.REPO_ROOT, "docs", "commands.md"),
        os.path.join(psserver.REPO_ROOT, "docs", "reference.md"),
        os.path.join(psserver.REPO_ROOT, "README.md")]
SKIP_MARK = "<!-- docs-examples: skip -->"
PROMPT = "redis> "


_TOKEN = re.compile(r"""\s*(?:"((?:\\.|[^"\\])*)"|'((?:\\'|[^'])*)'|([^\s"']+))(?=\s|$)""")
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|.)")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "a": "\a"}


def _unescape(m):
    e = m.group(1)
    return chr(int(e[1:], 16)) if len(e) == 3 else _SIMPLE_ESCAPES.get(e, e)


def split_args(line):
    """Split a command line the way redis-cli does (sdssplitargs): words separated by blanks,
    "double quotes" with \\xHH \\n \\r \\t \\b \\a and \\<c> escapes, 'single quotes' with
    \\'. Returns a list of bytes; raises ValueError on unbalanced quotes."""
    args, pos, line = [], 0, line.rstrip()
    while pos < len(line):
        m = _TOKEN.match(line, pos)
        if not m:
            raise ValueError("unbalanced quotes in %r" % line)
        dq, sq, word = m.groups()
        if dq is not None:
            arg = _ESCAPE.sub(_unescape, dq)
        elif sq is not None:
            arg = sq.replace("\\'", "'")
        else:
            arg = word
        args.append(arg.encode("latin-1"))
        pos = m.end()
    return args


def repr_bulk(b):
    """A bulk string as redis-cli quotes it (sdscatrepr)."""
    out = ['"']
    for ch in b:
        c = chr(ch)
        if c in '\\"':
            out.append("\\" + c)
        elif c in "\n\r\t\a\b":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b"}[c])
        elif 32 <= ch < 127:
            out.append(c)
        else:
            out.append("\\x%02x" % ch)
    out.append('"')
    return "".join(out)


def format_reply(rep, prefix=""):
    """A RawClient reply as interactive redis-cli prints it (cliFormatReplyTTY), as a list of
    lines."""
    if isinstance(rep, psserver.RespError):
        return ["(error) %s" % rep]
    if isinstance(rep, int):
        return ["(integer) %d" % rep]
    if rep is None:
        return ["(nil)"]
    if isinstance(rep, str):
        return rep.split("\n")
    if isinstance(rep, bytes):
        return [repr_bulk(rep)]
    if not rep:
        return ["(empty array)"]
    width = len(str(len(rep)))
    inner = prefix + " " * (width + 2)
    lines = []
    for i, el in enumerate(rep):
        sub = format_reply(el, inner)
        head = "%s%*d) " % ("" if i == 0 else prefix, width, i + 1)
        lines.append(head + sub[0])
        lines.extend(sub[1:])
    return lines


def format_command_reply(args, rep):
    """Like format_reply, but INFO's bulk reply is printed raw, as redis-cli does."""
    if args and args[0].upper() == b"INFO" and isinstance(rep, bytes):
        return rep.decode().replace("\r\n", "\n").rstrip("\n").split("\n")
    return format_reply(rep)


def parse_doc(path):
    """-> list of (section title, [(doc line number, command line, [expected lines])]) of
    the sections of 'path' that have examples."""
    sections, cur, block = [], None, None
    skip_next = False
    cmd = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for no, line in enumerate(lines, 1):
        if line.startswith("```"):
            if block is None:
                block = "skip" if skip_next else "run"
                skip_next = False
            else:
                block, cmd = None, None
            continue
        if block is None:
            if line.startswith("## "):
                cur = (line[3:].strip(), [])
                sections.append(cur)
            skip_next = line.strip() == SKIP_MARK or (skip_next and not line.strip())
            continue
        if block == "skip" or cur is None:
            continue
        if line.startswith(PROMPT):
            cmd = (no, line[len(PROMPT):], [])
            cur[1].append(cmd)
        elif cmd is not None:
            cmd[2].append(line)
    return [s for s in sections if s[1]]


SECTIONS = [(os.path.basename(path), title, examples)
            for path in DOCS for title, examples in parse_doc(path)]


def test_the_docs_have_examples_and_the_parser_finds_them():
    titles = [(doc, t) for doc, t, _ in SECTIONS]
    assert ("commands.md", "PS.CREATE") in titles and ("README.md", "Quick start") in titles, titles
    assert ("reference.md", "Embedding tables from redis-cli") in titles, titles
    assert sum(len(ex) for _, _, ex in SECTIONS) >= 50


def test_parse_doc_splits_sessions_by_section_and_honours_the_skip_mark(tmp_path):
    md = tmp_path / "doc.md"
    md.write_text("## A\n```\nredis> PING\nPONG\n```\n### A.1\n```\nredis> ECHO x\n\"x\"\n"
                  "redis> ECHO y\n\"y\"\n```\n## B\n" + SKIP_MARK + "\n\n```\nredis> PING\nnot run\n"
                  "```\n## C\n```\nPS.PULL key  (a syntax block)\n```\n")
    assert parse_doc(str(md)) == [("A", [(3, "PING", ["PONG"]), (8, "ECHO x", ['"x"']),
                                         (10, "ECHO y", ['"y"'])])]


def test_split_args_follows_redis_cli_quoting():
    assert split_args('PS.SET k "\\x00<\\x00@" FORMAT F16') == [b"PS.SET", b"k", b"\x00<\x00@",
                                                                  b"FORMAT", b"F16"]
    assert split_args("SET k 'a b' \"\"") == [b"SET", b"k", b"a b", b""]
    with pytest.raises(ValueError):
        split_args('SET k "abc')


def test_format_reply_matches_redis_cli_layout():
    rep = [1, [b"0.5", None], psserver.RespError("ERR x"), "OK"] + [0] * 7
    lines = format_reply(rep)
    assert lines[:5] == [" 1) (integer) 1", " 2) 1) \"0.5\"", "    2) (nil)",
                         " 3) (error) ERR x", " 4) OK"]
    assert lines[-1] == "11) (integer) 0"
    assert format_reply(b"\x80?\"\n") == ['"\\x80?\\"\\n"']


@pytest.mark.parametrize("doc,title,examples", SECTIONS,
                         ids=["%s:%s" % (doc, t) for doc, t, _ in SECTIONS])
def test_docs_examples_give_the_documented_replies(make_server, doc, title, examples):
    """The replies of a section's examples, run in order on a fresh server, are those the
    document shows, line for line."""
    srv = make_server()
    mismatches = []
    with srv.raw() as c:
        for no, line, expected in examples:
            args = split_args(line)
            got = format_command_reply(args, c.call(*args))
            while expected and not expected[-1].strip():
                expected = expected[:-1]
            if got != expected:
                mismatches.append("%s:%d redis> %s\n  documented:\n    %s\n  server:\n    %s"
                                  % (doc, no, line, "\n    ".join(expected), "\n    ".join(got)))
    assert not mismatches, "section %r:\n%s" % (title, "\n".join(mismatches))
