#!/bin/sh
# Runs the namespace integration tests (root only). Extra arguments go to pytest,
# e.g. tests/integration/run.sh -k transfer -x
# SLOT_BUILD (default build/) names the tree holding slot-relayd and tests/slot-testclient.
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
start=$(date +%s)
rc=0
"$PY" -m pytest -q -p no:cacheprovider tests/integration "$@" || rc=$?
echo "integration: exit $rc after $(( $(date +%s) - start ))s"
exit $rc
