#!/usr/bin/env bash
# The integration tests as `make pytest` runs them: run_pytest.sh [pytest args...]
#
# Two passes over the selection the arguments make:
#   parallel  every test not marked serial or slow (conftest.py is_serial), on PYTEST_JOBS
#             pytest-xdist workers (each draws server ports from its own slice)
#   serial    the serial and slow ones (kill/freeze timing, speed ratios, fault injection,
#             whole-document runs), one at a time, so they see the machine they were tuned on
# A pass that fails with exit status 1 runs its failed tests once more, alone (--lf), loudly:
# asynchronous training has a run-to-run spread, and a real regression fails twice.
# Exit status 9 (a sanitizer report or a server crash, conftest.py) never gets a second try.
#
# Environment: PYTHON (/usr/bin/python3), PS_MODULE (the module under test),
#   PYTEST_JOBS (2; 0 runs everything in one serial pass, as does a missing pytest-xdist),
#   PYTEST_RERUN (1; 0 turns the second try off), PYTEST_DURATIONS (15: each pass ends with its
#   that many slowest test phases, so every CI log shows where the minutes went; 0 lists all).
# Exit status: 0 when both passes passed (or their reruns did), else the first failure's.
cd "$(dirname "$0")" || exit 2
PY=${PYTHON:-/usr/bin/python3}
JOBS=${PYTEST_JOBS:-2}
RERUN=${PYTEST_RERUN:-1}
DURATIONS=${PYTEST_DURATIONS:-15}

# run_pass NAME [xdist args] -- runs one pass (NAME: parallel, serial or all), reruns its failures.
run_pass() {
    local name=$1 rc
    shift
    echo "== pytest: $name pass"
    PS_PYTEST_PASS=$name "$PY" -m pytest -q --durations="$DURATIONS" "$@" "${ARGS[@]}"
    rc=$?
    if [ "$RERUN" = 1 ] && [ $rc = 1 ]; then
        echo "== pytest: running the failed tests of the $name pass once more (see the failures above)"
        PS_PYTEST_PASS=$name "$PY" -m pytest -q --lf --last-failed-no-failures none "${ARGS[@]}"
        rc=$?
    fi
    return $rc
}

ARGS=("$@")
if [ "$JOBS" = 0 ] || ! "$PY" -c "import xdist" 2>/dev/null; then
    [ "$JOBS" = 0 ] || echo "== pytest: pytest-xdist missing (make deps): one serial pass"
    run_pass all
    exit $?
fi
run_pass parallel -n "$JOBS"
rc1=$?
run_pass serial
rc2=$?
# 5: the selection left no test in that pass; fine as long as the other pass ran some.
if [ $rc1 = 5 ] && [ $rc2 = 5 ]; then exit 5; fi
[ $rc1 = 5 ] && rc1=0
[ $rc2 = 5 ] && rc2=0
[ $rc1 = 9 ] || [ $rc2 = 9 ] && exit 9
[ $rc1 != 0 ] && exit $rc1
exit $rc2
