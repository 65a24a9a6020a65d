package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hiercomm/hiercomm/comm"
)

// Row is one measured size of one operation.
type Row struct {
	Op      string        // "allreduce", …
	Bytes   int64         // the size, in nccl-tests' convention (see Spec.MinBytes)
	Count   int64         // Bytes / element size, as nccl-tests prints it
	DType   comm.DType    // element type
	RedOp   comm.ReduceOp // the reduction; 0 when the operation does not reduce
	Root    int           // the root; -1 when the operation has none
	Iters   int           // timed iterations per repeat
	Repeats int           // timed repeats (the time is their median)
	// TimeUS is the median over the repeats of the slowest rank's time per
	// iteration, in microseconds.
	TimeUS float64
	// AlgBW is Bytes / time and BusBW is AlgBW × BusFactor, in GB/s (10⁹ B/s).
	AlgBW, BusBW float64
	// Wrong is the number of wrong elements summed over the ranks, or -1
	// when the result was not checked.
	Wrong int64
	// Comm names the communicator the row was measured on (RunCompare's
	// Contender.Name); empty for Run.
	Comm string `json:",omitempty"`
	// HasNet: Spec.Traffic was set, and NetBytes and NetBytesMax are the
	// inter-node bytes sent per iteration by the average rank and by the
	// busiest one, over the timed repeats (the Barrier before each repeat
	// included, and whatever the counter counts besides payload: headers,
	// acknowledgements).
	HasNet      bool    `json:",omitempty"`
	NetBytes    float64 `json:",omitempty"`
	NetBytesMax float64 `json:",omitempty"`
}

// Result is the outcome of Run: the rows in the order they were measured,
// with the Spec they were measured under (defaults filled in).
type Result struct {
	Ranks int
	Spec  Spec
	Rows  []Row
	// Nodes is the number of nodes the ranks ran on, when the caller knows
	// it (0: unknown). The intra-node goals are judged on 1.
	Nodes int `json:",omitempty"`
	// Copy is the single-thread copy() bandwidth measured in the same run
	// (MeasureCopy), when the caller measured it.
	Copy []CopyRow `json:",omitempty"`
	// Comms names the communicators of a RunCompare, in its order (empty
	// for Run). Switch holds a second comparison run, the AllReduce paths
	// of the hierarchy, when the caller measured one.
	Comms  []string `json:",omitempty"`
	Switch *Result  `json:",omitempty"`
	// Limiter says how the inter-node links were limited, in words, when
	// the caller knows ("tbf on veth, one 1gbit NIC per rank", "wrapper …",
	// "none").
	Limiter string `json:",omitempty"`
}

// Wrong is the number of wrong elements over every checked row, or -1 when
// nothing was checked.
func (r Result) Wrong() int64 {
	total := int64(-1)
	for _, row := range r.Rows {
		if row.Wrong >= 0 {
			total = max(total, 0) + row.Wrong
		}
	}
	return total
}

// table is one table of the output: an operation on a communicator.
type table struct{ op, comm string }

// tables lists the (operation, communicator) pairs of r's rows, in the
// order they first appear.
func (r Result) tables() []table {
	var out []table
	for _, row := range r.Rows {
		t := table{row.Op, row.Comm}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// rowsOf returns the rows of one operation on the first communicator (the
// only one of a Run).
func (r Result) rowsOf(op string) []Row {
	var name string
	if len(r.Comms) > 0 {
		name = r.Comms[0]
	}
	return r.rowsOn(op, name)
}

// rowsOn returns the rows of one operation on the named communicator.
func (r Result) rowsOn(op, name string) []Row {
	var out []Row
	for _, row := range r.Rows {
		if row.Op == op && row.Comm == name {
			out = append(out, row)
		}
	}
	return out
}

// ncclTypeNames are nccl-tests' names of the element types, so that tools
// that parse its tables read ours.
var ncclTypeNames = map[comm.DType]string{
	comm.F32: "float", comm.F64: "double", comm.F16: "half", comm.BF16: "bfloat16",
	comm.I8: "int8", comm.U8: "uint8", comm.I32: "int32", comm.U32: "uint32", comm.I64: "int64", comm.U64: "uint64",
}

// Format prints r as nccl-tests does, one table per operation: "#" header
// lines, a row per size with the columns size, count, type, redop, root,
// time, algbw, busbw and #wrong, and after each table its out-of-bounds
// count and "# Avg bus bandwidth" (the mean busbw over its rows).
func (r Result) Format(w io.Writer) error {
	var b strings.Builder
	s := r.Spec
	iters := "auto"
	if s.Iters > 0 {
		iters = fmt.Sprint(s.Iters)
	} else if s.Budget > 0 {
		iters = fmt.Sprintf("auto(%v per repeat)", s.Budget)
	}
	check := 0
	if s.Check {
		check = 1
	}
	for _, t := range r.tables() {
		rows := r.rowsOn(t.op, t.comm)
		on := ""
		if t.comm != "" {
			on = " on " + t.comm
		}
		fmt.Fprintf(&b, "# hiercomm bench: %s_perf%s\n", t.op, on)
		fmt.Fprintf(&b, "# nRanks %d minBytes %d maxBytes %d step: %d(factor) warmup iters: %d iters: %s repeats: %d(median) validation: %d\n",
			r.Ranks, s.MinBytes, s.MaxBytes, s.Factor, s.Warmup, iters, s.Repeats, check)
		b.WriteString("#\n")
		for _, h := range [][9]string{
			{"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"},
			{"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""},
		} {
			line := fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8])
			b.WriteString(strings.TrimRight(line, " ") + "\n")
		}
		var sum float64
		var wrong int64
		checked := false
		for _, row := range rows {
			b.WriteString(row.String())
			b.WriteByte('\n')
			sum += row.BusBW
			if row.Wrong >= 0 {
				checked = true
				wrong += row.Wrong
			}
		}
		switch {
		case !checked:
			b.WriteString("# Out of bounds values : N/A\n")
		case wrong == 0:
			b.WriteString("# Out of bounds values : 0 OK\n")
		default:
			fmt.Fprintf(&b, "# Out of bounds values : %d FAILED\n", wrong)
		}
		fmt.Fprintf(&b, "# Avg bus bandwidth    : %.4g\n", sum/float64(len(rows)))
		b.WriteString("#\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String is the row as a line of the table (without the newline).
func (row Row) String() string {
	redop := "none"
	if row.RedOp != 0 {
		redop = row.RedOp.String()
	}
	typ := ncclTypeNames[row.DType]
	if typ == "" {
		typ = row.DType.String()
	}
	wrong := "N/A"
	if row.Wrong >= 0 {
		wrong = fmt.Sprint(row.Wrong)
	}
	return fmt.Sprintf("  %10d  %12d  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6s",
		row.Bytes, row.Count, typ, redop, row.Root, formatTime(row.TimeUS), row.AlgBW, row.BusBW, wrong)
}

// formatTime prints microseconds with the precision nccl-tests uses.
func formatTime(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 100:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}
