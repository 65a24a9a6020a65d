#!/usr/bin/env bash
# Runs the GPU tests on a GPU host: `make gpu-test` builds the test binaries
# cgo-free into gpu-bin/ and copies this script there as gpu-bin/run.sh.
# Take gpu-bin/ (best: with the repository around it) to the GPU host (no Go
# needed) and run, from anywhere:
#
#     bash gpu-bin/run.sh            # every binary
#     bash gpu-bin/run.sh nccl       # some: nccl, hiercomm, hierarchy
#
# Each binary runs its TestGPU* tests (-test.run GPU; RUN overrides the
# pattern, TIMEOUT the -test.timeout, 20m) in its package's folder when the
# repository is around gpu-bin/ (as `go test` would), else in gpu-bin's
# parent. The root package's tests start child processes of their own
# binary (os.Executable), so where they run from does not matter to them.
# Logs go to ${OUT:-gpu-logs}/NAME.txt (a relative OUT is taken from where
# the script was started; the default is gpu-logs/ beside gpu-bin/). The
# last lines say PASS or FAIL per binary; the exit status is non-zero if
# any failed. Without a GPU every GPU test skips, saying why, and the
# binaries pass.
set -uo pipefail

bin=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$bin")
out=${OUT:-$root/gpu-logs}
mkdir -p "$out" || { echo "run.sh: cannot create the log folder $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
run=${RUN:-GPU}
timeout=${TIMEOUT:-20m}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(nccl hiercomm hierarchy)

# pkgdir is where a binary runs: its package's folder, as under go test.
pkgdir() {
	local dir=$root
	[ "$1" = hiercomm ] || dir=$root/$1
	if [ -d "$dir" ]; then echo "$dir"; else echo "$root"; fi
}

echo "== GPU tests, $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), binaries in $bin, logs in $out"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi -L
	nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
else
	echo "nvidia-smi: not found (no NVIDIA driver here?)"
fi
echo "(the CUDA driver API and NCCL versions are logged by nccl.test's TestGPULibrary: lines 'gpu-library:')"

declare -A result
failed=0
for name in "${names[@]}"; do
	exe=$bin/$name.test
	log=$out/$name.txt
	if [ ! -x "$exe" ]; then
		echo "run.sh: $exe is missing (make gpu-test builds it)" | tee "$log"
		result[$name]="FAIL (binary missing)"
		failed=1
		continue
	fi
	dir=$(pkgdir "$name")
	echo
	echo "== $name.test -test.v -test.run '$run' -test.timeout $timeout  (in $dir)"
	start=$(date +%s)
	(cd "$dir" && exec "$exe" -test.v -test.run "$run" -test.timeout "$timeout") 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	took=$(($(date +%s) - start))
	# Top-level tests only: subtests' lines are indented.
	pass=$(grep -c '^--- PASS' "$log")
	skip=$(grep -c '^--- SKIP' "$log")
	fail=$(grep -c '^--- FAIL' "$log")
	counts="$pass passed, $skip skipped, $fail failed, ${took}s"
	if [ "$rc" -eq 0 ]; then
		result[$name]="PASS ($counts)"
	else
		result[$name]="FAIL (exit $rc; $counts)"
		failed=1
	fi
done

echo
echo "== summary (logs in $out)"
grep -h 'gpu-library:' "$out"/nccl.txt 2>/dev/null | sed 's/^[[:space:]]*[^:]*:[0-9]*: /  /' | sort -u
for name in "${names[@]}"; do
	echo "$name.test: ${result[$name]}"
	# Why tests skipped, each reason once (the line before each SKIP).
	grep -B1 '^--- SKIP' "$out/$name.txt" 2>/dev/null | grep -v '^--- SKIP\|^--$\|^=== ' |
		sed 's/^[[:space:]]*[^:]*:[0-9]*: /  skipped: /' | sort -u
done
exit "$failed"
