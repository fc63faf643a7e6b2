#!/bin/sh
# Runs the libFuzzer targets built into DIR (make fuzz, make fuzz-smoke).
#
#   run.sh DIR [SECONDS [TARGET...]]   each target for SECONDS (default 60)
#   run.sh --smoke DIR [TARGET...]     each over its seeds and a few seconds
#
# Each target starts from a scratch copy of tests/fuzz/corpus/<target>/ (the
# repository's seeds are not flooded), with tests/fuzz/<target>.dict when
# there is one. Prints per target: seconds, runs, coverage (cov, ft), the
# corpus size reached and crashes; crashing inputs and the log are kept in
# DIR/artifacts/<target>/. Fails if any target crashed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
smoke=0
if [ "${1:-}" = "--smoke" ]; then
	smoke=1
	shift
fi
dir=${1:?usage: run.sh [--smoke] DIR [SECONDS] [TARGET...]}
shift
secs=60
if [ "$smoke" = 0 ] && [ $# -gt 0 ]; then
	secs=$1
	shift
fi
if [ $# -gt 0 ]; then
	targets=$*
else
	targets=$(for b in "$dir"/fuzz_*; do [ -x "$b" ] && basename "$b" | sed 's/^fuzz_//'; done)
fi
[ -n "$targets" ] || { echo "run.sh: no fuzz targets in $dir" >&2; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/slot-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT INT TERM
pass=0 fail=0 failed=""
printf '%-20s %7s %10s %6s %7s %6s %s\n' target seconds runs cov ft corpus crashes
for t in $targets; do
	bin=$dir/fuzz_$t
	art=$dir/artifacts/$t
	rm -rf "$art"
	mkdir -p "$art" "$scratch/$t"
	[ -d "$here/corpus/$t" ] && cp -R "$here/corpus/$t/." "$scratch/$t/"
	set -- -print_final_stats=1 -artifact_prefix="$art/" -timeout=25 -rss_limit_mb=2048
	[ -f "$here/$t.dict" ] && set -- "$@" -dict="$here/$t.dict"
	if [ "$smoke" = 1 ]; then
		set -- "$@" -max_total_time=3 -runs=20000
	else
		set -- "$@" -max_total_time="$secs"
	fi
	start=$(date +%s)
	"$bin" "$@" "$scratch/$t" >"$art/log" 2>&1
	rc=$?
	took=$(( $(date +%s) - start ))
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$art/log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$art/log" | tail -n 1 | cut -d' ' -f2)
	ft=$(grep -o 'ft: [0-9]*' "$art/log" | tail -n 1 | cut -d' ' -f2)
	ncorp=$(ls "$scratch/$t" | wc -l)
	ncrash=$(ls "$art" | grep -c -E '^(crash|leak|timeout|oom|slow-unit)-')
	printf '%-20s %7s %10s %6s %7s %6s %s\n' "$t" "$took" "${runs:--}" "${cov:--}" \
	    "${ft:--}" "$ncorp" "$ncrash"
	if [ "$rc" -ne 0 ] || [ "$ncrash" -ne 0 ]; then
		fail=$((fail + 1))
		failed="$failed $t"
		echo "  $t: exit $rc; log and inputs in $art/" >&2
		grep -E '^(==[0-9]+==ERROR|SUMMARY|.*check failed)' "$art/log" | head -n 5 >&2
	else
		pass=$((pass + 1))
	fi
	rm -rf "$scratch/$t"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
