#!/bin/sh
# Runs the namespace integration tests (root only). Extra arguments go to pytest,
# e.g. tests/integration/run.sh -k transfer -x
# SLOT_BUILD (default build/) names the tree holding slot-relayd and tests/slot-testclient.
#
# Two phases (README, "Running the integration tests"): the modules run in
# parallel, one module per pytest-xdist worker at a time (--dist loadfile, so
# a module's fixtures stay in one process), then the tests marked `serial`
# (they measure, or run under valgrind) alone. SLOT_TEST_JOBS sets the number of workers (default 3);
# SLOT_TEST_JOBS=1 runs everything in one process, in file order, as before.
# Each test prints one line as it finishes (tests/integration/slotprogress.py).
set -eu
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
	echo "integration: must run as root (network namespaces, iptables)" >&2
	exit 1
fi
# Debian's python3 carries pytest; a python3 earlier on PATH (pyenv) may not.
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest' 2>/dev/null; then
	echo "integration: $PY has no pytest (apt-get install python3-pytest, or make deps)" >&2
	exit 1
fi
jobs=${SLOT_TEST_JOBS:-3}
case $jobs in
''|*[!0-9]*|0)
	echo "integration: SLOT_TEST_JOBS=$jobs: want a number of workers, 1 or more" >&2
	exit 1 ;;
esac
if [ "$jobs" -gt 1 ] && ! "$PY" -c 'import xdist' 2>/dev/null; then
	echo "integration: no pytest-xdist (apt-get install python3-pytest-xdist, or make deps):" \
	    "running serially" >&2
	jobs=1
fi
# Our phases select with -m: a -m of the caller's runs in one process.
for a in "$@"; do
	case $a in -m|-m*) jobs=1 ;; esac
done
# The progress plugin is imported before the conftest puts its folder on the path.
PYTHONPATH=tests/integration${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH

pytest() {
	"$PY" -m pytest -q -p no:cacheprovider -p slotprogress -o console_output_style=classic \
	    tests/integration "$@"
}

start=$(date +%s)
SLOT_TEST_T0=$start
export SLOT_TEST_T0
rc=0
if [ "$jobs" -eq 1 ]; then
	pytest "$@" || rc=$?
else
	echo "integration: phase 1: modules in parallel, $jobs workers (SLOT_TEST_JOBS=1: serially)"
	rc1=0
	pytest -n "$jobs" --dist loadfile -m "not serial" "$@" || rc1=$?
	# pytest's exits: 1 a test failed, 2 interrupted, 3 and 4 its own or the
	# caller's error, 5 no test selected (one phase may meet it under -k).
	go=1
	case $rc1 in 2|3|4) go=0 ;; esac
	for a in "$@"; do
		case $a in -x|--exitfirst|--maxfail*) [ "$rc1" -ne 1 ] || go=0 ;; esac
	done
	rc2=5
	if [ "$go" -eq 1 ]; then
		echo "integration: phase 2: the tests marked serial, alone"
		rc2=0
		pytest -m serial "$@" || rc2=$?
	fi
	if [ "$rc1" -ne 0 ] && [ "$rc1" -ne 5 ]; then
		rc=$rc1
	elif [ "$rc2" -ne 0 ] && [ "$rc2" -ne 5 ]; then
		rc=$rc2
	elif [ "$rc1" -eq 5 ] && [ "$rc2" -eq 5 ]; then
		rc=5
	fi
fi
echo "integration: exit $rc after $(( $(date +%s) - start ))s"
exit $rc
