package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ncclPrograms are the names of nccl-tests' programs for our operations,
// which the tables' first line gives as nccl-tests does.
var ncclPrograms = map[string]string{
	"allreduce": "all_reduce_perf", "allgather": "all_gather_perf", "reducescatter": "reduce_scatter_perf",
	"alltoall": "alltoall_perf", "broadcast": "broadcast_perf", "reduce": "reduce_perf", "sendrecv": "sendrecv_perf",
	"reducescatter_ar": "reduce_scatter_perf (by all_reduce + copy)",
}

// TableWriter prints rows in nccl-tests' layout as they come, one table
// per operation: the header lines of nccl-tests (the settings line, then
// the column headings with an out-of-place and an in-place group of
// `time algbw busbw #wrong`), a line per row, and nccl-tests' footer
// (`# Out of bounds values`, `# Avg bus bandwidth`, the mean busbw over
// every measured form of the table's rows). A row whose operation has no
// in-place form prints N/A in that group. When several communicators are
// compared their rows interleave in one table, each ending with the
// communicator's name (where nccl-tests -S puts its timestamp), and the
// footer gives each its average. A table ends when a row of another
// operation comes, or at Close.
type TableWriter struct {
	w     io.Writer
	ranks int
	spec  Spec
	comms []string

	op    string             // the open table's operation; "" when none is open
	sum   map[string]float64 // busbw sum per communicator, over the open table
	n     map[string]int     // forms summed
	wrong int64              // wrong elements over the open table; -1 when nothing was checked
}

// NewTableWriter returns a TableWriter for rows of a run on ranks ranks
// under spec (defaults filled in, as Result.Spec), of the communicators
// comms (RunCompare's names; empty or one for Run).
func NewTableWriter(w io.Writer, ranks int, spec Spec, comms []string) *TableWriter {
	return &TableWriter{w: w, ranks: ranks, spec: spec, comms: comms}
}

// Row prints row, opening its table first (and closing the previous one)
// when its operation differs from the last row's.
func (t *TableWriter) Row(row Row) error {
	var b strings.Builder
	if row.Op != t.op {
		if t.op != "" {
			t.footer(&b)
		}
		t.header(&b, row.Op)
	}
	b.WriteString(row.line())
	if len(t.comms) > 1 {
		b.WriteString("  " + row.Comm)
	}
	b.WriteByte('\n')
	for _, f := range row.forms() {
		t.sum[row.Comm] += f.BusBW
		t.n[row.Comm]++
		if f.Wrong >= 0 {
			t.wrong = max(t.wrong, 0) + f.Wrong
		}
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// Close prints the footer of the open table, if any.
func (t *TableWriter) Close() error {
	if t.op == "" {
		return nil
	}
	var b strings.Builder
	t.footer(&b)
	_, err := io.WriteString(t.w, b.String())
	return err
}

// Open reports whether a table is open (a row printed since the last
// footer).
func (t *TableWriter) Open() bool { return t.op != "" }

func (t *TableWriter) header(b *strings.Builder, op string) {
	t.op, t.sum, t.n, t.wrong = op, map[string]float64{}, map[string]int{}, -1
	s := t.spec
	prog := ncclPrograms[op]
	if prog == "" {
		prog = op
	}
	fmt.Fprintf(b, "# Collective test starting: %s\n", prog)
	step, stepKind := int64(s.Factor), "factor"
	if s.StepBytes > 0 {
		step, stepKind = s.StepBytes, "bytes"
	}
	iters := "auto"
	if s.Iters > 0 {
		iters = strconv.Itoa(s.Iters)
	}
	check := 0
	if s.Check {
		check = 1
	}
	fmt.Fprintf(b, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %s agg iters: 1 validation: %d graph: 0\n",
		s.MinBytes, s.MaxBytes, step, stepKind, s.Warmup, iters, check)
	how := fmt.Sprintf("%d iterations per repeat", s.Iters)
	if s.Iters == 0 {
		how = fmt.Sprintf("iterations per repeat chosen to last %v", s.Budget)
	}
	fmt.Fprintf(b, "# %d ranks; time per iteration: %s, median of %d repeats, %s (-a %d)\n",
		t.ranks, how, s.Repeats, s.Average, s.Average.NCCL())
	if len(t.comms) > 1 {
		fmt.Fprintf(b, "# communicators measured in turn at each size, on the same processes: %s (last column)\n", strings.Join(t.comms, ", "))
		if s.Settle > 0 {
			fmt.Fprintf(b, "# a size and form where %s's speedup over %s may be below %.2fx (its range reaches below) is timed %d more times, alternating (a size timed once: %d more); its row is the median of all its repeats\n",
				t.comms[0], t.comms[1], s.Settle, s.Repeats, onceMore)
		}
	}
	b.WriteString("#\n")
	last := [2]string{"", ""}
	if len(t.comms) > 1 {
		last = [2]string{"comm", ""}
	}
	fmt.Fprintf(b, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "")
	fmt.Fprintf(b, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", last[0])
	fmt.Fprintf(b, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s\n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", last[1])
}

func (t *TableWriter) footer(b *strings.Builder) {
	switch {
	case t.wrong < 0:
		fmt.Fprintf(b, "# %-20s : N/A (not checked)\n", "Out of bounds values")
	case t.wrong == 0:
		fmt.Fprintf(b, "# %-20s : %d OK\n", "Out of bounds values", t.wrong)
	default:
		fmt.Fprintf(b, "# %-20s : %d FAILED\n", "Out of bounds values", t.wrong)
	}
	comms := t.comms
	if len(comms) < 2 {
		comms = []string{""}
		for c := range t.n { // Run's rows have no name; a single contender's do
			comms[0] = c
		}
	}
	for _, c := range comms {
		avg := 0.0
		if t.n[c] > 0 {
			avg = t.sum[c] / float64(t.n[c])
		}
		label := ""
		if len(t.comms) > 1 {
			label = c
		}
		fmt.Fprintf(b, "# %-20s : %s %s\n", "Avg bus bandwidth", cFloat(avg), label)
	}
	b.WriteString("#\n")
	prog := ncclPrograms[t.op]
	if prog == "" {
		prog = t.op
	}
	fmt.Fprintf(b, "# Collective test concluded: %s\n#\n", prog)
	t.op = ""
}

// line is the row as a line of nccl-tests' table, without the newline.
func (row Row) line() string {
	redop := "none"
	if row.RedOp != 0 {
		redop = row.RedOp.String()
	}
	root := fmt.Sprintf("%6d", row.Root)
	s := fmt.Sprintf("%12d  %12d  %8s  %6s  %6s", row.Bytes, row.Count, NCCLTypeName(row.DType), redop, root)
	s += row.Timing.columns()
	if row.InPlace != nil {
		s += row.InPlace.columns()
	} else {
		s += fmt.Sprintf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
	}
	return s
}

// String is the row as a line of the table (without the newline).
func (row Row) String() string { return row.line() }

// columns are one form's `time algbw busbw #wrong`, as nccl-tests prints
// them (a value that does not fit its width loses decimals first).
func (t Timing) columns() string {
	wrong := "N/A" // nccl-tests writes it one column to the left; aligned here
	if t.Wrong >= 0 {
		wrong = cFloat(float64(t.Wrong))
	}
	return fmt.Sprintf("  %7s  %6s  %6s  %6s", ncclFloat(t.TimeUS, 7), ncclFloat(t.AlgBW, 6), ncclFloat(t.BusBW, 6), wrong)
}

// ncclFloat writes v in width characters with 2 decimals, or fewer when
// it would not fit, or in exponent form when even none fit.
func ncclFloat(v float64, width int) string {
	for _, prec := range []int{2, 1, 0} {
		if s := fmt.Sprintf("%*.*f", width, prec, v); len(s) <= width {
			return s
		}
	}
	if width >= 7 {
		return fmt.Sprintf("%*.1e", width, v)
	}
	return fmt.Sprintf("%*.0e", width, v)
}

// cFloat is C's %g: 6 significant digits, exponent form for very large or
// small values.
func cFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// formatTime prints microseconds as the tables' time column does.
func formatTime(us float64) string { return ncclFloat(us, 7) }
