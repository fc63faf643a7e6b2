#!/bin/sh
# Runs each cmocka binary given; prints a total line and fails if any failed.
pass=0 fail=0 failed=""
for t in "$@"; do
	if "$t"; then pass=$((pass + 1)); else fail=$((fail + 1)); failed="$failed $t"; fi
done
[ -n "$failed" ] && echo "failed:$failed"
echo "unit: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
