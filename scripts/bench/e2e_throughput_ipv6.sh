#!/bin/sh
# Scenario 1 of e2e_throughput.py again on a bed whose hosts are IPv6-only
# (issue 15): slotd's ip6tables rules, bare IPv6 SYN probes, IPv6 relays.
# Writes the section $1 (run.sh passes docs/bench/e2e_throughput_ipv6.md) and
# its picture docs/img/bench_throughput_window_ipv6.png.
# --check: only check what the run needs (run.sh, before measuring anything).
set -eu
if [ "${1:-}" = --check ]; then
	exec /usr/bin/python3 "$(dirname "$0")/e2e_throughput.py" --only 1 --family 6 --check
fi
exec /usr/bin/python3 "$(dirname "$0")/e2e_throughput.py" --only 1 --family 6 --out "$1"
