"""Determinism guards at load (issue 11 item 6): on a normal server the module's OnLoad
checks (FPU mode, no fused multiply-adds in the kernels) pass silently and the module loads."""


def test_module_loads_without_a_determinism_warning(server, r):
    log = server.log()
    assert "refusing to load" not in log
    assert "bit-identical" not in log
    # The module answers: the checks did not leave it half loaded.
    assert r.execute_command("PS.CREATE", "t", "SHAPE", 2) is not None
