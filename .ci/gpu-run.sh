#!/usr/bin/env bash
# Runs the GPU tests on a GPU host: `make gpu-test` builds the test binaries
# cgo-free into gpu-bin/ and copies this script there as gpu-bin/run.sh.
# Take gpu-bin/ (best: with the repository around it) to the GPU host (no Go
# needed) and run, from anywhere:
#
#     bash gpu-bin/run.sh            # every binary, then the trainers
#     bash gpu-bin/run.sh nccl       # some: nccl, hiercomm, hierarchy, trainers
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
#
# "trainers" runs the example trainers with -device (docs/training.md) as
# several single-GPU nodes: `hiercomm run --nodes N --ranks-per-node 1`
# starts one process per emulated node, each on GPU 0 (NCCL refuses two
# ranks of one communicator on one GPU; a world of single-GPU nodes has
# none: device data is staged through pinned host memory between them),
# on the MNIST files make gpu-test put in gpu-bin/mnist. Data parallel in
# one process (NCCL's kernels) and on 2 and 4 nodes and ZeRO's four stages
# on 2 with -device, and data parallel on 2 on host memory
# (HIERCOMM_INTRA=shm) to compare with; each
# run checks itself (bitwise replicas, each of the first steps' averaged
# gradient against one process's at the same weights, the stages'
# equalities) and fails if a check does not hold. The log is
# $OUT/trainers.txt. Without a GPU they are skipped, saying so.
# FAKE_GPU=1 runs them anyway, on nccl's in-process fake (-fake-gpu) and
# for 20 steps each: a check of this script where there is no GPU.
set -uo pipefail

bin=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$bin")
out=${OUT:-$root/gpu-logs}
mkdir -p "$out" || { echo "run.sh: cannot create the log folder $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
run=${RUN:-GPU}
timeout=${TIMEOUT:-20m}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(nccl hiercomm hierarchy trainers)

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

# trainer ENV NODES PROGRAM ARGS...: one trainer run of `hiercomm run`
# (ENV: - or VAR=value for the run); its status is the run's.
trainer() {
	local env=$1 nodes=$2 prog=$3
	shift 3
	local cmd=("$bin/hiercomm" run --nodes "$nodes" --ranks-per-node 1 -- "$bin/$prog" "$@" -data "$bin/mnist")
	[ "$env" = - ] || cmd=(env "$env" "${cmd[@]}")
	echo
	echo "== ${cmd[*]}"
	local start rc
	start=$(date +%s)
	"${cmd[@]}" 2>&1
	rc=$?
	echo "== exit $rc, $(($(date +%s) - start))s"
	return "$rc"
}

# tally counts a trainer run's status in tpass or tfail.
tally() {
	if [ "$1" -eq 0 ]; then tpass=$((tpass + 1)); else tfail=$((tfail + 1)); fi
}

# trainers runs the -device trainers (see the top) and sets result.
trainers() {
	local log=$out/trainers.txt
	echo
	echo "== trainers with -device, as single-GPU nodes  (log $log)"
	local gpus dev=(-device) quick=()
	gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
	if [ "${FAKE_GPU:-}" = 1 ]; then
		echo "FAKE_GPU=1: on nccl's in-process fake, 20 steps each (figures of no GPU)"
		dev=(-device -fake-gpu) quick=(-steps 20)
	elif [ "${gpus:-0}" -eq 0 ]; then
		echo "trainers: skipped: no GPU here (nvidia-smi -L lists none); the -device runs need the GPU tier" | tee "$log"
		result[trainers]="SKIP (no GPU)"
		return
	fi
	local f missing=()
	for f in hiercomm dataparallel zero; do
		[ -x "$bin/$f" ] || missing+=("$bin/$f")
	done
	[ -f "$bin/mnist/train-images-idx3-ubyte.gz" ] || missing+=("$bin/mnist/*-ubyte.gz")
	if [ ${#missing[@]} -gt 0 ]; then
		echo "trainers: ${missing[*]} missing (make gpu-test builds and copies them)" | tee "$log"
		result[trainers]="FAIL (missing: ${missing[*]})"
		failed=1
		return
	fi
	tpass=0 tfail=0
	local start
	start=$(date +%s)
	: >"$log"
	# One process: its World is an NCCL communicator of one rank, so NCCL's
	# own kernels run the AllReduces on the GPU (the nodes' staged worlds
	# below move device data through pinned host memory).
	trainer - 1 dataparallel "${dev[@]}" -epochs 1 -log 100 "${quick[@]}" 2>&1 | tee -a "$log"
	tally "${PIPESTATUS[0]}"
	# Each run checks its first 10 steps' averaged gradients against one
	# process's at the same weights (docs/training.md, section 5).
	trainer - 2 dataparallel "${dev[@]}" -epochs 1 -log 100 "${quick[@]}" 2>&1 | tee -a "$log"
	tally "${PIPESTATUS[0]}"
	trainer - 4 dataparallel "${dev[@]}" -epochs 1 -log 100 "${quick[@]}" 2>&1 | tee -a "$log"
	tally "${PIPESTATUS[0]}"
	trainer HIERCOMM_INTRA=shm 2 dataparallel -epochs 1 -log 100 "${quick[@]}" 2>&1 | tee -a "$log"
	tally "${PIPESTATUS[0]}"
	trainer - 2 zero "${dev[@]}" "${quick[@]}" 2>&1 | tee -a "$log"
	tally "${PIPESTATUS[0]}"
	local counts="$tpass passed, $tfail failed, $(($(date +%s) - start))s"
	if [ "$tfail" -eq 0 ]; then
		result[trainers]="PASS ($counts)"
	else
		result[trainers]="FAIL ($counts)"
		failed=1
	fi
}

for name in "${names[@]}"; do
	if [ "$name" = trainers ]; then
		trainers
		continue
	fi
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
	if [ "$name" = trainers ]; then
		echo "trainers: ${result[$name]}"
		continue
	fi
	echo "$name.test: ${result[$name]}"
	# Why tests skipped, each reason once (the line before each SKIP).
	grep -B1 '^--- SKIP' "$out/$name.txt" 2>/dev/null | grep -v '^--- SKIP\|^--$\|^=== ' |
		sed 's/^[[:space:]]*[^:]*:[0-9]*: /  skipped: /' | sort -u
done
exit "$failed"
