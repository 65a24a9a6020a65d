package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
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

// TableWriter prints rows in nccl-tests' layout, one table per operation
// and communicator: nccl-tests' header lines (the settings line, with the
// iterations each repeat timed, then the column headings with an
// out-of-place and an in-place group of `time algbw busbw #wrong`), a line
// per row, and nccl-tests' footer (`# Out of bounds values`, `# Avg bus
// bandwidth`, the mean busbw over every measured form of the table's
// rows). A row whose operation has no in-place form prints N/A in that
// group. When several communicators are compared, each has its own table,
// in the order of comms, headed by a line naming it. An operation's tables
// are written when a row of another operation comes, or at Close: the
// header gives the iteration counts, which are chosen per size while the
// rows are measured.
type TableWriter struct {
	w     io.Writer
	ranks int
	spec  Spec
	comms []string

	op   string // the open operation; "" when none is open
	rows []Row  // its rows so far, of every communicator
}

// NewTableWriter returns a TableWriter for rows of a run on ranks ranks
// under spec (defaults filled in, as Result.Spec), of the communicators
// comms (RunCompare's names; empty or one for Run).
func NewTableWriter(w io.Writer, ranks int, spec Spec, comms []string) *TableWriter {
	return &TableWriter{w: w, ranks: ranks, spec: spec, comms: comms}
}

// Row adds row to its operation's tables, writing the previous
// operation's tables first when row's operation differs from the last
// row's.
func (t *TableWriter) Row(row Row) error {
	var err error
	if row.Op != t.op && t.op != "" {
		err = t.flush()
	}
	t.op = row.Op
	t.rows = append(t.rows, row)
	return err
}

// Close writes the open operation's tables, if any.
func (t *TableWriter) Close() error {
	if t.op == "" {
		return nil
	}
	return t.flush()
}

// Open reports whether an operation's rows wait to be written (a row
// given since the last tables were written).
func (t *TableWriter) Open() bool { return t.op != "" }

// flush writes the open operation's tables: one per communicator, in the
// order of t.comms (then any other name, in the order its rows came).
func (t *TableWriter) flush() error {
	names := slices.Clone(t.comms)
	for _, row := range t.rows {
		if !slices.Contains(names, row.Comm) {
			names = append(names, row.Comm)
		}
	}
	var b strings.Builder
	for _, name := range names {
		var rows []Row
		for _, row := range t.rows {
			if row.Comm == name {
				rows = append(rows, row)
			}
		}
		if len(rows) > 0 {
			t.table(&b, name, rows)
		}
	}
	t.op, t.rows = "", nil
	_, err := io.WriteString(t.w, b.String())
	return err
}

// table writes one table: the rows of t.op measured on communicator name.
func (t *TableWriter) table(b *strings.Builder, name string, rows []Row) {
	s := t.spec
	prog := ncclPrograms[t.op]
	if prog == "" {
		prog = t.op
	}
	if name != "" {
		fmt.Fprintf(b, "# Communicator %s\n", name)
	}
	fmt.Fprintf(b, "# Collective test starting: %s\n", prog)
	step, stepKind := int64(s.Factor), "factor"
	if s.StepBytes > 0 {
		step, stepKind = s.StepBytes, "bytes"
	}
	lo, hi := itersRange(rows)
	iters := strconv.Itoa(lo)
	if hi != lo {
		iters = fmt.Sprintf("%d-%d", lo, hi)
	}
	check := 0
	if s.Check {
		check = 1
	}
	fmt.Fprintf(b, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %s agg iters: 1 validation: %d graph: 0\n",
		s.MinBytes, s.MaxBytes, step, stepKind, s.Warmup, iters, check)
	how := fmt.Sprintf("%s per repeat", plural(lo, "iteration"))
	if s.Iters == 0 {
		how = fmt.Sprintf("iterations per repeat chosen to last %v (%s)", s.Budget, iters)
	}
	fmt.Fprintf(b, "# %d ranks; time per iteration: %s, median of %d repeats, %s (-a %d)\n",
		t.ranks, how, s.Repeats, s.Average, s.Average.NCCL())
	if hi != lo {
		writeItersPerSize(b, rows)
	}
	if len(t.comms) > 1 {
		fmt.Fprintf(b, "# communicators measured in turn at each size, on the same processes: %s; this table: %s\n", strings.Join(t.comms, ", "), name)
		if s.Settle > 0 {
			fmt.Fprintf(b, "# a size and form where %s's speedup over %s may be below %.2fx (its range reaches below) is timed %d more times, alternating (a size timed once: %d more); its row is the median of all its repeats\n",
				t.comms[0], t.comms[1], s.Settle, s.Repeats, onceMore)
		}
	}
	b.WriteString("#\n")
	fmt.Fprintf(b, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "")
	fmt.Fprintf(b, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(b, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	sum, n, wrong := 0.0, 0, int64(-1)
	for _, row := range rows {
		b.WriteString(row.line())
		b.WriteByte('\n')
		for _, f := range row.forms() {
			sum += f.BusBW
			n++
			if f.Wrong >= 0 {
				wrong = max(wrong, 0) + f.Wrong
			}
		}
	}
	switch {
	case wrong < 0:
		fmt.Fprintf(b, "# %-20s : N/A (not checked)\n", "Out of bounds values")
	case wrong == 0:
		fmt.Fprintf(b, "# %-20s : %d OK\n", "Out of bounds values", wrong)
	default:
		fmt.Fprintf(b, "# %-20s : %d FAILED\n", "Out of bounds values", wrong)
	}
	avg := 0.0
	if n > 0 {
		avg = sum / float64(n)
	}
	fmt.Fprintf(b, "# %-20s : %s \n", "Avg bus bandwidth", cFloat(avg))
	b.WriteString("#\n")
	fmt.Fprintf(b, "# Collective test concluded: %s\n#\n", prog)
}

// itersRange is the fewest and the most iterations a repeat of rows
// timed, over both forms.
func itersRange(rows []Row) (lo, hi int) {
	first := true
	for _, row := range rows {
		for _, f := range row.forms() {
			if first || f.Iters < lo {
				lo = f.Iters
			}
			if first || f.Iters > hi {
				hi = f.Iters
			}
			first = false
		}
	}
	return lo, hi
}

// writeItersPerSize writes the iterations per repeat at each size of rows,
// "size:iters" (out of place/in place where they differ), a few sizes a
// line.
func writeItersPerSize(b *strings.Builder, rows []Row) {
	b.WriteString("# iterations per repeat at each size (out of place/in place where they differ):\n")
	const perLine = 8
	for i, row := range rows {
		if i%perLine == 0 {
			b.WriteString("#  ")
		}
		fmt.Fprintf(b, " %s:%d", FormatSize(row.Bytes), row.Iters)
		if row.InPlace != nil && row.InPlace.Iters != row.Iters {
			fmt.Fprintf(b, "/%d", row.InPlace.Iters)
		}
		if i%perLine == perLine-1 || i == len(rows)-1 {
			b.WriteByte('\n')
		}
	}
}

// plural is "1 iteration", "20 iterations".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
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
// them (a value that does not fit its width loses decimals first), but
// for bandwidths under 1 GB/s, which keep more digits (bwFloat).
func (t Timing) columns() string {
	wrong := "N/A" // nccl-tests writes it one column to the left; aligned here
	if t.Wrong >= 0 {
		wrong = cFloat(float64(t.Wrong))
	}
	return fmt.Sprintf("  %7s  %6s  %6s  %6s", ncclFloat(t.TimeUS, 7), bwFloat(t.AlgBW, 6), bwFloat(t.BusBW, 6), wrong)
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

// bwFloat writes a bandwidth in width characters: as nccl-tests (2
// decimals, ncclFloat) from 1 up and at 0, and below 1, where 2 decimals
// leave one significant digit or none (the bench's own links carry under
// 0.2 GB/s), with more decimals in the same width, so that a value keeps
// 3 significant digits down to 0.01 and 2 below: 0.163, 0.0171, 0.0084,
// then a short exponent form under 0.001 (9.7e-4).
func bwFloat(v float64, width int) string {
	a := math.Abs(v)
	switch {
	case v == 0 || a >= 0.9995 || math.IsNaN(v) || math.IsInf(v, 0):
		return ncclFloat(v, width)
	case a >= 0.09995:
		return fmt.Sprintf("%*.3f", width, v)
	case a >= 0.000995:
		return fmt.Sprintf("%*.4f", width, v)
	}
	e := math.Floor(math.Log10(a))
	m := v / math.Pow(10, e)
	if math.Abs(m) >= 9.95 {
		m, e = m/10, e+1
	}
	if s := fmt.Sprintf("%*s", width, fmt.Sprintf("%.1fe%d", m, int(e))); len(s) <= width {
		return s
	}
	return fmt.Sprintf("%*s", width, fmt.Sprintf("%.0fe%d", m, int(e)))
}

// cFloat is C's %g: 6 significant digits, exponent form for very large or
// small values.
func cFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// formatTime prints microseconds as the tables' time column does.
func formatTime(us float64) string { return ncclFloat(us, 7) }
