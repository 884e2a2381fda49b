#!/usr/bin/env bash
# Run the tests on a busy machine: two busy-loop processes hold the cores while pytest
# runs, so a test that depends on timing (a sleep, a race with a background loop, a
# wall-clock threshold) shows itself here rather than on a developer's busy machine.
#
#   scripts/loaded-test.sh                       # the whole suite
#   scripts/loaded-test.sh tests/manager -x      # any pytest arguments
#   HOGS=4 scripts/loaded-test.sh tests/engine   # more busy loops
#
# The hogs are ended on exit (also on Ctrl-C); the exit status is pytest's.
set -uo pipefail
cd "$(dirname "$0")/.."
hogs=${HOGS:-2}

pids=()
stop_hogs() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null
  done
  pids=()
}
trap stop_hogs EXIT
trap 'stop_hogs; exit 130' INT
trap 'stop_hogs; exit 143' TERM

for _ in $(seq "$hogs"); do
  python3 -c 'while True: pass' &
  pids+=("$!")
done
echo "loaded-test: $hogs busy loops (pids ${pids[*]}) on $(nproc) cores" >&2

.venv/bin/python -m pytest -q -ra "$@"
status=$?
stop_hogs
exit "$status"
