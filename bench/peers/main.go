// Command peers sets hiercomm beside OpenMPI: it reads the runs
// bench/peers/run.sh left in a directory (DIR/CONFIG/openmpi-N.csv and
// DIR/CONFIG/hiercomm-N.csv, round N of configuration CONFIG, and
// hiercomm-bench's JSON files DIR/CONFIG/hiercomm-N-K.json) and prints,
// per configuration, operation and size, both sides' medians over the
// rounds, hiercomm ÷ OpenMPI, the machine's floor over plain TCP sockets
// measured in the same runs, and issue 29's goals met or not, as markdown
// (docs/benchmarks.md, "Side by side with OpenMPI"). The configuration
// quic4, the encrypted default network, is set against hiercomm's own
// plain TCP of the same rounds (DIR/quic4/tcp-N.csv) instead.
//
//	go run ./bench/peers -dir bench/peers/out [-configs tcp2,tcp4,shm4,quic4] [-when "2026-11-28, 2 cores, load 0.4"]
//
// The C side, bench/peers/mpi/coll.c, is built by run.sh with mpicc.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	dir := flag.String("dir", "bench/peers/out", "the directory run.sh wrote")
	configs := flag.String("configs", "tcp2,tcp4,shm4,quic4", "the configurations to read, in this order")
	when := flag.String("when", "", "where and when the runs were measured, printed above the tables")
	flag.Parse()
	var lines []Line
	var floors []Floor
	for _, c := range strings.Split(*configs, ",") {
		l, err := readConfig(*dir, c)
		if err == nil {
			var f Floor
			f, err = readFloor(*dir, c)
			floors = append(floors, f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		lines = append(lines, l...)
	}
	if err := Markdown(os.Stdout, *when, lines, floors); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// readConfig compares the rounds of one configuration under dir: its
// reference's files (Configs) against hiercomm's.
func readConfig(dir, config string) ([]Line, error) {
	var refs, ours [][]Sample
	prefix, _ := reference(config)
	for n := 1; ; n++ {
		a, errA := readCSV(filepath.Join(dir, config, prefix+"-"+strconv.Itoa(n)+".csv"))
		b, errB := readCSV(filepath.Join(dir, config, "hiercomm-"+strconv.Itoa(n)+".csv"))
		if os.IsNotExist(errA) && os.IsNotExist(errB) {
			break
		}
		if errA != nil {
			return nil, errA
		}
		if errB != nil {
			return nil, errB
		}
		refs, ours = append(refs, a), append(ours, b)
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s: no rounds (%s-1.csv, hiercomm-1.csv)", filepath.Join(dir, config), prefix)
	}
	return Compare(config, refs, ours), nil
}

// readFloor gathers the floor of every hiercomm-bench JSON file of one
// configuration under dir (DIR/CONFIG/hiercomm-N-K.json: round N, sweep
// K): no files, no floor (Runs 0).
func readFloor(dir, config string) (Floor, error) {
	paths, err := filepath.Glob(filepath.Join(dir, config, "hiercomm-*.json"))
	if err != nil {
		return Floor{}, err
	}
	var runs []Floor
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return Floor{}, err
		}
		fl, err := ParseFloor(f)
		f.Close()
		if err != nil {
			return Floor{}, fmt.Errorf("%s: %w", p, err)
		}
		runs = append(runs, fl)
	}
	return MedianFloor(config, runs), nil
}

func readCSV(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := ParseCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
