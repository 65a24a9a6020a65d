#!/usr/bin/env bash
# bench/peers/run.sh: hiercomm beside OpenMPI on this machine, in one run
# (docs/benchmarks.md, "Side by side with OpenMPI"; `make peers`).
#
#   bench/peers/run.sh [-quick] [-rounds N] [-configs tcp2,tcp4,shm4,quic4] [-bind default|none|core] [-out DIR]
#
# For each configuration (tcp2: TCP loopback, 2 ranks; tcp4: 4 ranks; shm4:
# shared memory, 4 ranks on one node) it runs OpenMPI's collectives
# (bench/peers/mpi/coll.c under mpirun), then hiercomm-bench's, over the
# same sizes: N rounds (3) of every configuration in turn. quic4, the
# encrypted default network on 4 ranks, is set against hiercomm's own plain
# TCP instead, run just before it in each round (its goal is a share of
# what plain TCP moves), from 1 MiB. Then it prints, per operation and
# size, the median of each side's times, hiercomm ÷ the reference, and the
# goals met or not, as markdown tables. The full sweep is 8 B to 64 MiB
# by factors of 2 (quic4: from 1 MiB); -quick measures 8, 64 and 512 B and
# 1, 8 and 64 MiB (quic4: 1, 8 and 64 MiB).
#
# -bind says how the ranks are bound to the CPUs: default (the default)
# leaves each side to its own default (mpirun binds each rank to a core
# when they fit, 2 ranks here, and not when they outnumber the cores;
# hiercomm's launcher does not bind); none and core bind both sides
# alike: none leaves them to the kernel's scheduler, core gives rank i of
# n its share of the CPUs, rank i on CPU i mod CPUs when they outnumber
# them (mpirun --bind-to core:overload-allowed --map-by core;
# HIERCOMM_BIND=core).
#
# OpenMPI (mpicc, mpirun) is installed with apt-get when missing, which
# needs root (or password-less sudo) and apt-get; where it cannot, the
# script says so and exits 1. Every file it writes is under DIR
# (default bench/peers/out): the programs, each run's CSV, JSON and log.
set -euo pipefail

mode=full rounds=3 configs=tcp2,tcp4,shm4,quic4 bind=default out=
while [ $# -gt 0 ]; do
	case "$1" in
	-quick | quick) mode=quick ;;
	-full | full) mode=full ;;
	-rounds) rounds=${2:?-rounds needs a number}; shift ;;
	-configs) configs=${2:?-configs needs a list}; shift ;;
	-bind) bind=${2:?-bind needs default, none or core}; shift ;;
	-out) out=${2:?-out needs a directory}; shift ;;
	-h | -help | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
	*) echo "bench/peers/run.sh: unknown argument $1 (try -h)" >&2; exit 2 ;;
	esac
	shift
done
case "$bind" in default | none | core) ;; *) echo "bench/peers/run.sh: -bind $bind: want default, none or core" >&2; exit 2 ;; esac
case "$rounds" in '' | *[!0-9]*) echo "bench/peers/run.sh: -rounds $rounds is not a number" >&2; exit 2 ;; esac
if [ "$rounds" -lt 3 ]; then
	echo "bench/peers/run.sh: -rounds $rounds: the medians need at least 3 rounds" >&2
	exit 2
fi

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${out:-$root/bench/peers/out}
GO=${GO:-go}

say() { echo "# $*"; }
die() { echo "bench/peers/run.sh: $*" >&2; exit 1; }

# OpenMPI: the distribution's packages when mpicc or mpirun is missing.
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
	command -v apt-get >/dev/null ||
		die "OpenMPI is not installed and there is no apt-get here: install OpenMPI (mpicc and mpirun on PATH) and run again"
	sudo=
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
			die "OpenMPI is not installed and installing it needs root: run 'sudo apt-get install -y openmpi-bin libopenmpi-dev' (or run this as root)"
		sudo="sudo -n"
	fi
	say "OpenMPI's mpicc or mpirun is missing: installing openmpi-bin libopenmpi-dev with ${sudo:+sudo }apt-get"
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 &&
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev >&2 ||
		die "apt-get could not install openmpi-bin libopenmpi-dev (see above)"
	command -v mpicc >/dev/null && command -v mpirun >/dev/null || die "apt-get installed OpenMPI but mpicc or mpirun is still not on PATH"
fi
command -v "$GO" >/dev/null || die "no Go toolchain ($GO) on PATH"

mkdir -p "$out"
bin=$out/bin
mkdir -p "$bin"
mpicc -O2 -o "$bin/coll" bench/peers/mpi/coll.c -lm || die "mpicc could not build bench/peers/mpi/coll.c"
"$GO" build -o "$bin/hiercomm-bench" ./cmd/hiercomm-bench
"$GO" build -o "$bin/peers" ./bench/peers
# hiercomm-bench's out-of-place form only: OpenMPI's side has no in-place
# column, and the run takes half the time.
echo '{"inplace": false}' >"$bin/config.json"

ops=allreduce,reducescatter,broadcast
if [ $mode = full ]; then
	sweeps=("8 64M 2")
	large=("1M 64M 2")
else
	sweeps=("8 512 8" "1M 64M 8")
	large=("1M 64M 8")
fi
asroot=()
[ "$(id -u)" = 0 ] && asroot=(--allow-run-as-root)
# The ranks' binding (-bind): each side's default, or the same on both.
mpibind=()
case $bind in
none) mpibind=(--bind-to none) ;;
core) mpibind=(--bind-to core:overload-allowed --map-by core) ;;
esac
if [ "$bind" = default ]; then unset HIERCOMM_BIND; else export HIERCOMM_BIND=$bind; fi

# openmpi CONFIG FILE runs coll for CONFIG, appending its CSV to FILE.
openmpi() {
	local cfg=$1 file=$2 log=${2%.csv}.log btl=tcp,self s min max f
	[ "${cfg:0:3}" = shm ] && btl=vader,self
	for s in "${sweeps[@]}"; do
		read -r min max f <<<"$s"
		local cmd=(mpirun "${asroot[@]}" --oversubscribe "${mpibind[@]}" -np "${cfg:(-1)}" --mca mpi_yield_when_idle 1 --mca pml ob1
			--mca btl "$btl" --mca btl_tcp_if_include lo "$bin/coll" -b "$min" -e "$max" -f "$f" -o "$ops")
		echo "${cmd[*]}" >>"$log"
		"${cmd[@]}" >>"$file" 2>>"$log" || { tail -20 "$log" >&2; die "OpenMPI's run failed (log: $log)"; }
	done
}

# hiercomm CONFIG FILE [NETWORK] runs hiercomm-bench for CONFIG over
# NETWORK (tcp; quic4's own run: quic), appending its CSV to FILE.
hiercomm() {
	local cfg=$1 file=$2 log=${2%.csv}.log np=${1:(-1)} s min max f k=0 network=${3:-tcp}
	local where=(-nodes "$np" -impl flat) sizes=("${sweeps[@]}")
	[ "${cfg:0:3}" = shm ] && where=(-nodes 1 -impl shm)
	[ "$cfg" = quic4 ] && sizes=("${large[@]}")
	for s in "${sizes[@]}"; do
		read -r min max f <<<"$s"
		k=$((k + 1))
		# The JSON keeps the run's floor (raw sockets), which peers prints
		# under the TCP tables.
		local cmd=("$bin/hiercomm-bench" -config "$bin/config.json" -np "$np" "${where[@]}" -link-rate off -network "$network"
			-a 3 -c 0 -ops "$ops" -b "$min" -e "$max" -f "$f" -csv "$file.part" -json "${file%.csv}-$k.json")
		echo "${HIERCOMM_BIND:+HIERCOMM_BIND=$HIERCOMM_BIND }${cmd[*]}" >>"$log"
		"${cmd[@]}" >>"$log" 2>&1 || { tail -20 "$log" >&2; die "hiercomm-bench failed (log: $log)"; }
		cat "$file.part" >>"$file" && rm -f "$file.part"
	done
}

load() { uptime | sed 's/.*load average: //'; }
start_load=$(load)
say "$(date -u '+%F %H:%M UTC'), $(nproc) cores, load average at start: $start_load"
say "mode $mode, $rounds rounds, configurations $configs, sizes: ${sweeps[*]} (min max factor; quic4: ${large[*]}), ops $ops, ranks bound: $bind; files under $out"
started=$SECONDS
for cfg in ${configs//,/ }; do
	case $cfg in tcp2 | tcp4 | shm4 | quic4) ;; *) die "unknown configuration $cfg (tcp2, tcp4, shm4, quic4)" ;; esac
	rm -rf "${out:?}/$cfg"
	mkdir -p "$out/$cfg"
done
# Round after round of every configuration, so that a slow stretch of the
# machine falls on one round of each rather than on every round of one.
for i in $(seq "$rounds"); do
	for cfg in ${configs//,/ }; do
		if [ "$cfg" = quic4 ]; then
			say "round $i of $rounds, $cfg: hiercomm over plain TCP, then over the default network (load average $(load))"
			hiercomm "$cfg" "$out/$cfg/tcp-$i.csv" tcp
			hiercomm "$cfg" "$out/$cfg/hiercomm-$i.csv" quic
			continue
		fi
		say "round $i of $rounds, $cfg: OpenMPI, then hiercomm (load average $(load))"
		openmpi "$cfg" "$out/$cfg/openmpi-$i.csv"
		hiercomm "$cfg" "$out/$cfg/hiercomm-$i.csv"
	done
done
end_load=$(load)
say "load average at end: $end_load ($((SECONDS - started)) s)"
echo
"$bin/peers" -dir "$out" -configs "$configs" -when "$(date -u +%F), $(nproc) cores, load average $start_load at start, $end_load at end"
