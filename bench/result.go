package bench

import (
	"io"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
)

// Row is one measured size of one operation: its out-of-place form
// (Timing, promoted) and, where measured, its in-place form.
type Row struct {
	Op    string        // "allreduce", …
	Bytes int64         // the size, in nccl-tests' convention (see Spec.MinBytes)
	Count int64         // Bytes / element size, as nccl-tests prints it
	DType comm.DType    // element type
	RedOp comm.ReduceOp // the reduction; 0 when the operation does not reduce
	Root  int           // the root; -1 when the operation has none
	// Timing is the out-of-place form's measurement (for Broadcast, whose
	// one buffer is always in place, the only form).
	Timing
	// InPlace is the in-place form's, with Spec.InPlace where the
	// operation has one; nil otherwise.
	InPlace *Timing `json:",omitempty"`
	// Comm names the communicator the row was measured on (RunCompare's
	// Contender.Name); empty for Run.
	Comm string `json:",omitempty"`
}

// Timing is one form of an operation measured at one size.
type Timing struct {
	Iters   int // timed iterations per repeat
	Repeats int // timed repeats (the time is their median)
	// TimeUS is the median over the repeats of the ranks' time per
	// iteration combined as Spec.Average says, in microseconds.
	TimeUS float64
	// LowUS and HighUS are the quartiles of the repeats' times (the first
	// and the third; with one repeat, its time): how far one repeat
	// strays from the next, which decides whether two communicators'
	// times differ (Pair.Range).
	LowUS, HighUS float64 `json:",omitempty"`
	// AlgBW is Bytes / time and BusBW is AlgBW × BusFactor, in GB/s (10⁹ B/s).
	AlgBW, BusBW float64
	// Wrong is the number of wrong elements summed over the ranks, or -1
	// when the result was not checked.
	Wrong int64
	// HasNet: Spec.Traffic was set, and NetBytes and NetBytesMax are the
	// inter-node bytes sent per iteration by the average rank and by the
	// busiest one, over the timed iterations (read around each repeat:
	// the Barrier before it is not counted, whatever the counter counts
	// besides payload is: headers, acknowledgements).
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
	// RawRTTUS is the round trip of an 8-byte frame over nexar's bare
	// transport between two nodes, measured in the same run, when the
	// caller measured it: the small-message ceiling.
	RawRTTUS float64 `json:",omitempty"`
	// RawDoublingUS is an 8-byte recursive-doubling exchange among all
	// Ranks at once over the bare transport, measured in the same run,
	// when the caller measured it: a small AllReduce's messages with every
	// rank busy.
	RawDoublingUS float64 `json:",omitempty"`
	// FloorRTTUS and FloorDoublingUS are the machine's floor under the
	// two above, measured in the same run when the caller measured them:
	// the same round trip and doubling exchange over plain sockets (no
	// frames). The summary judges small calls against them, and nexar's
	// frames (RawRTTUS, RawDoublingUS) as ours.
	FloorRTTUS      float64 `json:",omitempty"`
	FloorDoublingUS float64 `json:",omitempty"`
}

// Wrong is the number of wrong elements over every checked row, or -1 when
// nothing was checked.
func (r Result) Wrong() int64 {
	total := int64(-1)
	for _, row := range r.Rows {
		for _, t := range row.forms() {
			if t.Wrong >= 0 {
				total = max(total, 0) + t.Wrong
			}
		}
	}
	return total
}

// forms are the row's measured forms: out of place, then in place.
func (row Row) forms() []Timing {
	if row.InPlace != nil {
		return []Timing{row.Timing, *row.InPlace}
	}
	return []Timing{row.Timing}
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

// NCCLTypeName is nccl-tests' name of dt ("float", "bfloat16", …).
func NCCLTypeName(dt comm.DType) string {
	if n, ok := ncclTypeNames[dt]; ok {
		return n
	}
	return dt.String()
}

// Format prints r as nccl-tests does, one table per operation (see
// TableWriter).
func (r Result) Format(w io.Writer) error {
	t := NewTableWriter(w, r.Ranks, r.Spec, r.Comms)
	for _, row := range r.Rows {
		if err := t.Row(row); err != nil {
			return err
		}
	}
	return t.Close()
}
