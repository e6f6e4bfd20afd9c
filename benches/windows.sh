#!/usr/bin/env bash
# Memory and recorder CPU of a run cut into windows: `ntprof record --every 1` of the bundled demo for N one-second
# windows, with ntprof's resident memory (VmRSS) sampled as the windows are written, then each window's
# recorder_cpu_ms (its recording and reading, and making and writing the window before it) from its JSON.
#
#   benches/windows.sh [N] [ntprof options...]     e.g. benches/windows.sh 300 --call-graph dwarf
#
# Build first: cargo build --release. Prints the memory after 10 windows and after N, and the CPU per window.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n="${1:-300}"
shift || true
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
target/release/ntprof record -q --every 1 --output "$out/w/" "$@" -- target/release/ntprof-demo 3600 \
    >/dev/null 2>"$out/stderr" &
pid=$!
rss_at=()
while kill -0 "$pid" 2>/dev/null; do
    c=$(find "$out/w" -name '*.json' 2>/dev/null | wc -l)
    rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    rss_at[c]=$rss
    if ((c >= n)); then
        # The demo is the command: ending it ends the run (its last window is written too).
        pkill -TERM -P "$pid" || true
        break
    fi
    sleep 0.2
done
wait "$pid" || true
echo "resident memory after 10 windows: ${rss_at[10]:-?} KiB; after $n: ${rss_at[$n]:-?} KiB"
python3 - "$out/w" <<'PY'
import glob, json, statistics, sys
runs = [json.load(open(f))["run"] for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
cpu = [r["recorder_cpu_ms"] for r in runs]
print(f"{len(runs)} windows; recorder CPU per window: median {statistics.median(cpu):.2f} ms, "
      f"mean of windows 2-10 {statistics.mean(cpu[1:10]):.2f} ms, of the last 50 {statistics.mean(cpu[-50:]):.2f} ms, "
      f"largest {max(cpu):.1f} ms (window {cpu.index(max(cpu))})")
PY
