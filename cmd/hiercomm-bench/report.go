package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/bench"
)

// reportSchema names the -json format; docs/benchmarks.md describes it.
// A change that removes or redefines a field takes the next number;
// adding a field does not.
const reportSchema = "hiercomm-bench/1"

// report is the -json file: the run, its settings, topology and ceilings,
// and every row. Keys are snake_case; times are microseconds, bandwidths
// GB/s (10⁹ bytes per second), sizes bytes.
type report struct {
	Schema   string `json:"schema"`
	Complete bool   `json:"complete"`        // false: interrupted or failed; rows holds what was measured
	Error    string `json:"error,omitempty"` // why it is incomplete

	Run           reportRun       `json:"run"`
	Settings      reportSettings  `json:"settings"`
	Topology      *reportTopology `json:"topology"` // null when the ranks are goroutines of one process
	Communicators []commInfo      `json:"communicators"`
	Ceilings      reportCeilings  `json:"ceilings"`
	Rows          []reportRow     `json:"rows"`
	Tables        []reportTable   `json:"tables"`
}

type reportRun struct {
	HiercommVersion string    `json:"hiercomm_version"`
	GoVersion       string    `json:"go_version"`
	OS              string    `json:"os"`
	Arch            string    `json:"arch"`
	CommandLine     []string  `json:"command_line"`
	Launcher        string    `json:"launcher"`
	Ranks           int       `json:"ranks"`
	MeasuredRanks   int       `json:"measured_ranks"` // ranks of the measured communicators (fewer with split)
	Nodes           int       `json:"nodes"`          // 0: unknown (ranks in one process)
	Network         string    `json:"network"`
	StartedAt       time.Time `json:"started_at"`
	DurationS       float64   `json:"duration_s"`
}

type reportSettings struct {
	Ops        []string `json:"ops"`
	MinBytes   int64    `json:"min_bytes"`
	MaxBytes   int64    `json:"max_bytes"`
	StepFactor int      `json:"step_factor"`
	StepBytes  int64    `json:"step_bytes"` // 0: sizes step by step_factor
	Type       string   `json:"type"`       // nccl-tests' name: "float", …
	RedOp      string   `json:"redop"`
	Root       int      `json:"root"`
	Warmup     int      `json:"warmup_iters"`
	Iters      int      `json:"iters"` // 0: chosen per size to fill budget_s
	BudgetS    float64  `json:"budget_s"`
	Repeats    int      `json:"repeats"`
	Check      bool     `json:"check"`
	InPlace    bool     `json:"in_place"`
	Average    string   `json:"average"` // how the ranks' times combine: avg, rank0, min, max (nccl-tests -a 1, 0, 2, 3)
	Split      string   `json:"split,omitempty"`
}

type reportTopology struct {
	Nodes []reportNode `json:"nodes"`
	Rails [][]int      `json:"rails"` // rail l: local rank l of every node
}

type reportNode struct {
	Node    int    `json:"node"`
	Host    string `json:"host"`
	Ranks   []int  `json:"ranks"`
	Devices []int  `json:"devices"` // GPU ordinals; empty on CPU
}

type reportCeilings struct {
	// LinkLimit is how the inter-node links were limited, in words; empty
	// when they were not.
	LinkLimit string `json:"link_limit,omitempty"`
	// LinkRateGBs is each inter-node link's limit, each way; null when
	// unlimited.
	LinkRateGBs *float64 `json:"link_rate_gbs"`
	// MemoryCopy is one thread's copy() bandwidth on rank 0's host.
	MemoryCopy []reportCopy `json:"memory_copy"`
	// SendRecvBusBWGBs is the best sendrecv busbw of each communicator in
	// this run: what its transport moves point to point.
	SendRecvBusBWGBs map[string]float64 `json:"sendrecv_busbw_gbs"`
	// RawTransport is nexar's bare transport between two nodes (no
	// communicator): an 8-byte round trip and a one-way stream, and the
	// doubling exchange among all ranks.
	RawTransport *rawTransport `json:"raw_transport,omitempty"`
	// RawSocket is the machine's floor: the same round trip, and the
	// doubling exchange among all ranks, over plain TCP sockets.
	RawSocket *socketFloor `json:"raw_socket,omitempty"`
}

type reportCopy struct {
	SizeBytes int64   `json:"size_bytes"`
	GBs       float64 `json:"gbs"`
}

type reportRow struct {
	Op         string        `json:"op"`
	Comm       string        `json:"comm"`
	SizeBytes  int64         `json:"size_bytes"`
	Count      int64         `json:"count"`
	Type       string        `json:"type"`
	RedOp      string        `json:"redop"` // "none" when the operation does not reduce
	Root       int           `json:"root"`  // -1 when it has none
	OutOfPlace reportTiming  `json:"out_of_place"`
	InPlace    *reportTiming `json:"in_place"` // null when the operation has no in-place form
}

type reportTiming struct {
	TimeUS float64 `json:"time_us"`
	// TimeQ1US and TimeQ3US are the quartiles of the repeats' times.
	TimeQ1US float64 `json:"time_q1_us"`
	TimeQ3US float64 `json:"time_q3_us"`
	AlgBWGBs float64 `json:"algbw_gbs"`
	BusBWGBs float64 `json:"busbw_gbs"`
	Wrong    *int64  `json:"wrong"` // null when not checked
	Iters    int     `json:"iters"`
	Repeats  int     `json:"repeats"`
	// InterNodeBytes is the bytes each rank sent to other nodes per call
	// (mean and busiest rank), where the run counted them.
	InterNodeBytes *reportBytes `json:"inter_node_bytes,omitempty"`
}

type reportBytes struct {
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

type reportTable struct {
	Op          string  `json:"op"`
	Comm        string  `json:"comm"`
	OutOfBounds *int64  `json:"out_of_bounds"`         // wrong elements over the table; null when not checked
	AvgBusBWGBs float64 `json:"avg_bus_bandwidth_gbs"` // nccl-tests' "Avg bus bandwidth": the mean over both forms of every row
	Rows        int     `json:"rows"`
}

// newReport builds the -json file of a run.
func newReport(info runInfo, res bench.Result, o options, complete bool, runErr error) report {
	s := info.Spec
	r := report{
		Schema: reportSchema, Complete: complete,
		Run: reportRun{
			HiercommVersion: version(), GoVersion: goVersion(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			CommandLine: append([]string{"hiercomm-bench"}, o.args...), Launcher: info.Launcher,
			Ranks: info.Ranks, MeasuredRanks: info.Measured, Nodes: info.Nodes, Network: info.Network,
			StartedAt: info.Started.UTC(), DurationS: time.Since(info.Started).Seconds(),
		},
		Settings: reportSettings{
			Ops: s.Ops, MinBytes: s.MinBytes, MaxBytes: s.MaxBytes, StepFactor: s.Factor, StepBytes: s.StepBytes,
			Type: bench.NCCLTypeName(s.DType), RedOp: s.Op.String(), Root: s.Root, Warmup: s.Warmup, Iters: s.Iters,
			BudgetS: s.Budget.Seconds(), Repeats: s.Repeats, Check: s.Check, InPlace: s.InPlace, Average: s.Average.Name(), Split: info.Split,
		},
		Communicators: info.Comms,
		Ceilings:      reportCeilings{LinkLimit: info.Links, SendRecvBusBWGBs: map[string]float64{}},
		Rows:          []reportRow{},
		Tables:        []reportTable{},
	}
	if runErr != nil {
		r.Error = runErr.Error()
	}
	if t := info.Topology; t != nil {
		rt := &reportTopology{Rails: t.Rails()}
		for i, n := range t.Nodes() {
			rn := reportNode{Node: i, Host: n.Host, Ranks: n.Ranks, Devices: []int{}}
			for _, rk := range n.Ranks {
				if d := t.Member(rk).Device; d >= 0 {
					rn.Devices = append(rn.Devices, d)
				}
			}
			rt.Nodes = append(rt.Nodes, rn)
		}
		r.Topology = rt
	}
	if info.LinkBits > 0 {
		gbs := float64(info.LinkBits) / 8 / 1e9
		r.Ceilings.LinkRateGBs = &gbs
	}
	r.Ceilings.RawTransport = info.Raw
	r.Ceilings.RawSocket = info.Floor
	r.Ceilings.MemoryCopy = []reportCopy{}
	for _, c := range info.Copy {
		r.Ceilings.MemoryCopy = append(r.Ceilings.MemoryCopy, reportCopy{c.Bytes, c.GBs})
	}
	timing := func(t bench.Timing) reportTiming {
		rt := reportTiming{TimeUS: t.TimeUS, TimeQ1US: t.LowUS, TimeQ3US: t.HighUS, AlgBWGBs: t.AlgBW, BusBWGBs: t.BusBW, Iters: t.Iters, Repeats: t.Repeats}
		if t.Wrong >= 0 {
			w := t.Wrong
			rt.Wrong = &w
		}
		if t.HasNet {
			rt.InterNodeBytes = &reportBytes{t.NetBytes, t.NetBytesMax}
		}
		return rt
	}
	type key struct{ op, comm string }
	tables := map[key]*reportTable{}
	forms := map[key]int{}
	var order []key
	for _, row := range res.Rows {
		redop := "none"
		if row.RedOp != 0 {
			redop = row.RedOp.String()
		}
		rr := reportRow{Op: row.Op, Comm: row.Comm, SizeBytes: row.Bytes, Count: row.Count, Type: bench.NCCLTypeName(row.DType),
			RedOp: redop, Root: row.Root, OutOfPlace: timing(row.Timing)}
		measured := []bench.Timing{row.Timing}
		if row.InPlace != nil {
			in := timing(*row.InPlace)
			rr.InPlace = &in
			measured = append(measured, *row.InPlace)
		}
		r.Rows = append(r.Rows, rr)
		if row.Op == "sendrecv" && row.BusBW > r.Ceilings.SendRecvBusBWGBs[row.Comm] {
			r.Ceilings.SendRecvBusBWGBs[row.Comm] = row.BusBW
		}
		k := key{row.Op, row.Comm}
		t := tables[k]
		if t == nil {
			t = &reportTable{Op: row.Op, Comm: row.Comm}
			tables[k] = t
			order = append(order, k)
		}
		t.Rows++
		for _, f := range measured {
			forms[k]++
			t.AvgBusBWGBs += f.BusBW // summed here, divided below
			if f.Wrong >= 0 {
				if t.OutOfBounds == nil {
					t.OutOfBounds = new(int64)
				}
				*t.OutOfBounds += f.Wrong
			}
		}
	}
	for _, k := range order {
		t := *tables[k]
		t.AvgBusBWGBs /= float64(forms[k])
		r.Tables = append(r.Tables, t)
	}
	return r
}

func writeReport(path string, r report) error {
	return writeFile(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	})
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// version is hiercomm's version as the build knows it: the module version,
// else the commit (with "+dirty" when the tree had changes), else "devel".
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		return "devel " + rev + dirty
	}
	return "devel"
}

func goVersion() string { return strings.TrimPrefix(runtime.Version(), "go") + " (Go)" }
