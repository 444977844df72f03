"""The module's routing of the shared verbs (issue 21, docs/design.md "Routing a command"):
tensor or table by the key's type, arguments read by position, and the type faults answered
before any other fault, as they were when PS.PULL/PS.PUSHGRAD were routed by looking for IDS.
Each case answers exactly the error the module answered before issue 21."""

import struct

import numpy as np
import pytest

from psserver import RespError

WT = "WRONGTYPE Operation against a key holding the wrong kind of value"


def f32(a):
    return np.asarray(a, dtype=np.float32).tobytes()


def ids(*x):
    return struct.pack("<%dQ" % len(x), *x)


G4 = f32(np.ones(4))

CASES = [
    # IDS on a key that holds no table: a type fault, before the other faults.
    (["PS.PULL", "t", "IDS", ids(1)], WT),
    (["PS.PULL", "t", "IDS"], WT),
    (["PS.PULL", "t", "FORMAT", "BOGUS", "IDS", ids(1)], WT),
    (["PS.PULL", "t", "BOGUS", "x", "IDS", ids(1)], WT),
    (["PS.PUSHGRAD", "t", "VALUES", "IDS", ids(1)], WT),
    (["PS.PUSHGRAD", "t", G4, "FORMAT", "BOGUS", "IDS", ids(1)], WT),
    (["PS.PUSHGRAD", "s", G4, "IDS", ids(1)], WT),
    (["PS.PUSHGRAD", "nokey", G4, "IDS", ids(1)], "ERR no such key"),
    (["PS.PULL", "nokey", "FORMAT", "BOGUS", "IDS", ids(1)], "ERR no such key"),
    # A table's option list without IDS is a tensor's: its faults, then WRONGTYPE.
    (["PS.PULL", "e"], WT),
    (["PS.PULL", "e", "FORMAT", "I8"], WT),
    (["PS.PULL", "e", "AT", "x"], WT),
    (["PS.PULL", "e", "MINVERSION", "0"], WT),
    (["PS.PULL", "e", "TIMEOUT", "5"], "ERR TIMEOUT needs MINVERSION"),
    (["PS.PULL", "e", "FORMAT", "TOPK"], "ERR FORMAT TOPK is not allowed here"),
    (["PS.PUSHGRAD", "e", G4, "SCALE", "2"], WT),
    (["PS.PUSHGRAD", "e", "VALUES"], "ERR VALUES needs numbers"),
    (["PS.PUSHGRAD", "e", "VALUES", "1", "2", "3", "4", "BOGUS"],
     "ERR VALUES: 'BOGUS' is not a valid float or option"),
    # With IDS a table's grammar: the tensor's keywords are unknown there, ROWS a type fault.
    (["PS.PULL", "e", "IDS", ids(1), "AT", "x"], "ERR unknown option 'AT'"),
    (["PS.PULL", "e", "IDS", ids(1), "FORMAT", "I8"], "ERR FORMAT I8 is not allowed here"),
    (["PS.PULL", "e", "IDS", ids(1), "ROWS", b"\0\0\0\0"], WT),
    (["PS.PULL", "e", "IDS"], "ERR option 'IDS' needs a value"),
    (["PS.PUSHGRAD", "e", "VALUES", "1", "2", "3", "4", "BOGUS", "IDS", ids(1)],
     "ERR unknown option 'BOGUS'"),
    (["PS.PUSHGRAD", "e", G4, "IDS", ids(1), "SCALE", "2"], "ERR unknown option 'SCALE'"),
    (["PS.PUSHGRAD", "e", G4, "IDS", b"123"],
     "ERR IDS must be a non-empty blob of little-endian uint64 ids (a multiple of 8 bytes, "
     "at most 16777216 ids)"),
    # A missing key after a syntax fault of the tensor grammar: the syntax fault.
    (["PS.PULL", "nokey", "FORMAT", "BOGUS"], "ERR unknown FORMAT 'BOGUS' (F32, F16, BF16, I8, TOPK, VALUES)"),
    (["PS.PULL", "nokey"], "ERR no such key"),
    (["PS.INFO", "s"], WT),
    (["PS.CONFIG", "nokey", "LR", "1"], "ERR no such key"),
]


@pytest.fixture
def keys(raw):
    assert raw.call("PS.CREATE", "t", "SHAPE", "4") == "OK"
    assert raw.call("PS.CREATE", "e", "EMBEDDING", "DIM", "4") == "OK"
    assert raw.call("SET", "s", "x") == "OK"
    return raw


@pytest.mark.parametrize("cmd,err", CASES, ids=lambda c: None)
def test_type_faults_come_first(keys, cmd, err):
    rep = keys.call(*cmd)
    assert isinstance(rep, RespError) and str(rep) == err, (cmd, rep)
    # Nothing changed: both values are still at version 0.
    assert keys.call("PS.PULL", "t")[0] == 0
    assert keys.call("PS.PULL", "e", "IDS", ids(1))[0] == 0


def test_one_route_per_verb_by_the_key_type(keys):
    """The same verbs serve both types; INFO and CONFIG by the key's type alone."""
    assert keys.call("PS.PUSHGRAD", "t", G4) == 1
    assert keys.call("PS.PUSHGRAD", "e", G4, "IDS", ids(7)) == 1
    assert keys.call("PS.PULL", "t")[0] == 1
    assert keys.call("PS.PULL", "e", "IDS", ids(7))[0] == 1
    assert keys.call("PS.CONFIG", "t", "LR", "0.5") == "OK"
    assert keys.call("PS.CONFIG", "e", "LR", "0.5") == "OK"
    ti = keys.call("PS.INFO", "t")
    ei = keys.call("PS.INFO", "e")
    assert ti[0] == b"shape" and ei[:2] == [b"type", b"embedding"]
