package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/topology"
)

const planUsage = `usage: hiercomm plan [-rank R] [-gpu N] FILE

Prints the Plan hiercomm.Init would build for rank R of the topology in
FILE (a topology dumped as JSON: HIERCOMM_TOPO_DUMP_FILE), without starting
a job: the layout, the transports, each cost model's routes with the sizes
where they switch, and the timeouts. The launch's choices come from the
environment, as a job's would (HIERCOMM_NETWORK, HIERCOMM_INTRA,
HIERCOMM_NODE_P2P, HIERCOMM_HOST_PROCS, HIERCOMM_CONNS_PER_PEER); the
cores are this machine's.

flags:
`

func showPlan(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hiercomm plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rank := fs.Int("rank", 0, "the rank whose plan to print")
	gpu := fs.Int("gpu", -1, "the GPU the rank runs the GPU tier on (-1: host memory)")
	if code, done := parseFlags(fs, args, planUsage, stdout, stderr); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "hiercomm plan: want one FILE, got %d arguments\n", fs.NArg())
		return 2
	}
	path := fs.Arg(0)
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm plan:", err)
		return 1
	}
	defer f.Close()
	t, err := topology.Load(f)
	if err != nil {
		fmt.Fprintf(stderr, "hiercomm plan: %s: %v\n", path, err)
		return 1
	}
	if *rank < 0 || *rank >= t.Size() {
		fmt.Fprintf(stderr, "hiercomm plan: -rank %d: the topology has ranks 0 to %d\n", *rank, t.Size()-1)
		return 2
	}
	if *gpu < -1 {
		fmt.Fprintf(stderr, "hiercomm plan: -gpu %d: give a device ordinal, or -1 for host memory\n", *gpu)
		return 2
	}
	l, err := launchenv.LoadLaunch(os.Getenv, launchenv.Sys{Hostname: os.Hostname, ReadFile: os.ReadFile})
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm plan:", err)
		return 1
	}
	l.Style, l.JobID = "", "" // this process's, not the job's
	p, err := hiercomm.NewPlan(l, t, *rank, *gpu, hiercomm.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm plan:", err)
		return 1
	}
	fmt.Fprintln(stdout, p)
	return 0
}
