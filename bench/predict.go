package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/hiercomm/hiercomm/comm/schedule"
)

// FlatSegmentBytes is the pipelining unit nexar cuts large messages into
// (nexar.Options.SegmentBytes' default); the predictions use the same.
const FlatSegmentBytes = 256 << 10

// PredictOps are the operations the predictions cover.
var PredictOps = []string{"allreduce", "allgather", "reducescatter", "broadcast", "sendrecv"}

// FlatSchedule is rank r's schedule of op at size bytes (nccl-tests'
// convention, Spec.MinBytes) on a flat world of p ranks, as nexar picks it
// with its default cost model and segment size.
func FlatSchedule(op string, p, r int, bytes int64, es int) (schedule.Schedule, error) {
	n := int(bytes) / es
	seg := FlatSegmentBytes / es
	switch op {
	case "allreduce":
		if schedule.DefaultCost.AllReduce(int(bytes), p) == schedule.Doubling {
			return schedule.DoublingAllReduce(p, r, n, seg), nil
		}
		return schedule.RingAllReduce(p, r, n, seg), nil
	case "allgather":
		return schedule.RingAllGather(p, r, n/p, seg), nil
	case "reducescatter":
		switch schedule.DefaultCost.ReduceScatter(int(bytes), p) {
		case schedule.Halving:
			return schedule.HalvingReduceScatter(p, r, n/p, seg), nil
		case schedule.Doubling:
			return schedule.DoublingReduceScatter(p, r, n/p, seg), nil
		}
		return schedule.RingReduceScatter(p, r, n/p, seg), nil
	case "broadcast":
		if schedule.DefaultCost.Broadcast(int(bytes), p, seg*es) == schedule.Tree {
			return schedule.TreeBroadcast(p, r, 0, n, seg), nil
		}
		return schedule.ChainBroadcast(p, r, 0, n, seg), nil
	case "sendrecv":
		// Every rank sends to rank+1 and receives from rank−1 at once.
		return schedule.Schedule{Lanes: 2, Waited: []bool{false, false}, Steps: []schedule.Step{
			{Kind: schedule.Send, Lane: 1, After: -1, Peer: (r + 1) % p, Src: schedule.Range{Buf: schedule.SendBuf, Len: n}},
			{Kind: schedule.Recv, Lane: 0, After: -1, Peer: (r + p - 1) % p, Dst: schedule.Range{Buf: schedule.RecvBuf, Len: n}},
		}}, nil
	}
	return schedule.Schedule{}, fmt.Errorf("bench: no prediction for %q (want one of %s)", op, strings.Join(PredictOps, ", "))
}

// PredictFlat simulates op at size bytes on a flat world of p ranks,
// under m.ForCall(bytes).
func PredictFlat(op string, p int, bytes int64, es int, m SimModel) (SimResult, error) {
	if _, err := FlatSchedule(op, p, 0, bytes, es); err != nil {
		return SimResult{}, err
	}
	return Simulate(p, es, func(r int) schedule.Schedule {
		s, _ := FlatSchedule(op, p, r, bytes, es)
		return s
	}, m.ForCall(bytes))
}

// PredictHier predicts op at size bytes on the hierarchical communicator
// of nodes × g ranks as the sum of its phases, each simulated on its own
// communicator: within a node under intra, across nodes (one rail, one
// rank per node) under inter. AllReduce from smallBytes up: reduce-scatter
// within the node, AllReduce of one 1/g shard over the rail, all-gather
// within the node; below it: reduce to the node's lead (a ring
// reduce-scatter's cost), AllReduce over the leads, broadcast within the
// node. ReduceScatter: within the node, then over the rail. AllGather: over
// the rail, then within the node. It returns the time and the most bytes a
// rank sends across nodes. (schedule.Hierarchy.Estimate gives the same
// phases in closed form; this runs their schedules.)
func PredictHier(op string, nodes, g int, bytes int64, es int, inter, intra SimModel, smallBytes int64) (float64, int64, error) {
	var total float64
	var interMax int64
	phase := func(op string, p int, b int64, m SimModel, across bool) error {
		if p <= 1 || b < int64(es) {
			return nil
		}
		unit := int64(es)
		if op == "allgather" || op == "reducescatter" {
			unit *= int64(p) // whole blocks
		}
		b = max(b/unit, 1) * unit
		r, err := PredictFlat(op, p, b, es, m)
		if err != nil {
			return err
		}
		total += r.Seconds
		if across {
			interMax += r.MaxInterBytes()
		}
		return nil
	}
	inter.RanksPerNode, intra.RanksPerNode = 1, g
	var err error
	switch op {
	case "allreduce":
		if bytes >= smallBytes {
			err = firstErr(phase("reducescatter", g, bytes, intra, false), phase("allreduce", nodes, bytes/int64(g), inter, true), phase("allgather", g, bytes, intra, false))
		} else {
			err = firstErr(phase("reducescatter", g, bytes, intra, false), phase("allreduce", nodes, bytes, inter, true), phase("broadcast", g, bytes, intra, false))
		}
	case "reducescatter":
		err = firstErr(phase("reducescatter", g, bytes, intra, false), phase("reducescatter", nodes, bytes/int64(g), inter, true))
	case "allgather":
		err = firstErr(phase("allgather", nodes, bytes/int64(g), inter, true), phase("allgather", g, bytes, intra, false))
	case "broadcast":
		err = firstErr(phase("broadcast", nodes, bytes, inter, true), phase("broadcast", g, bytes, intra, false))
	case "sendrecv":
		err = phase("sendrecv", nodes, bytes, inter, true)
	default:
		_, err = FlatSchedule(op, 1, 0, bytes, es)
	}
	return total, interMax, err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ModelRow is the model's prediction of one measured row.
type ModelRow struct {
	Op          string
	Bytes       int64
	PredictedUS float64
	MeasuredUS  float64
}

// Ratio is predicted ÷ measured.
func (m ModelRow) Ratio() float64 {
	if m.MeasuredUS <= 0 {
		return math.NaN()
	}
	return m.PredictedUS / m.MeasuredUS
}

// ModelError predicts every out-of-place row of r measured on the flat
// communicator comm (the PredictOps) under m, on r.Ranks ranks: the time
// per call of m.Calls calls back to back, as the bench's loop times them
// (set m.Calls to a few; 1 predicts one call alone).
func ModelError(r Result, comm string, m SimModel) ([]ModelRow, error) {
	var out []ModelRow
	es := r.Spec.DType.Size()
	for _, row := range r.Rows {
		if row.Comm != comm || row.TimeUS <= 0 || !slices.Contains(PredictOps, row.Op) {
			continue
		}
		p, err := PredictFlat(row.Op, r.Ranks, row.Bytes, es, m)
		if err != nil {
			return out, err
		}
		out = append(out, ModelRow{Op: row.Op, Bytes: row.Bytes, PredictedUS: p.PerCall * 1e6, MeasuredUS: row.TimeUS})
	}
	return out, nil
}

// Spread is how far one run's measurements stray from themselves: the
// rows of one communicator timed in both forms, out of place and in place
// (the same schedule, a copy apart), and how many of them differ by more
// than 25% between the two (beyond 1.25× either way). A model's
// prediction of a run cannot be closer than the run to itself at every
// size: Spread says where that bound lies on the run's machine.
type Spread struct {
	Rows, Beyond int
	Worst        float64 // the greatest ratio, ≥ 1 (slower ÷ faster)
	WorstOp      string
	WorstBytes   int64
}

// SelfSpread is r's Spread on communicator comm.
func SelfSpread(r Result, comm string) Spread {
	var s Spread
	for _, row := range r.Rows {
		if row.Comm != comm || row.InPlace == nil || row.TimeUS <= 0 || row.InPlace.TimeUS <= 0 {
			continue
		}
		q := row.TimeUS / row.InPlace.TimeUS
		q = max(q, 1/q)
		s.Rows++
		if q > 1.25 {
			s.Beyond++
		}
		if q > s.Worst {
			s.Worst, s.WorstOp, s.WorstBytes = q, row.Op, row.Bytes
		}
	}
	return s
}

// FormatModelError prints the ratios as a table, a column per operation,
// and for each operation the median and the share within 25%.
func FormatModelError(w io.Writer, rows []ModelRow) error {
	var ops []string
	var sizes []int64
	at := map[string]map[int64]float64{}
	for _, r := range rows {
		if at[r.Op] == nil {
			at[r.Op] = map[int64]float64{}
			ops = append(ops, r.Op)
		}
		at[r.Op][r.Bytes] = r.Ratio()
		if !slices.Contains(sizes, r.Bytes) {
			sizes = append(sizes, r.Bytes)
		}
	}
	slices.Sort(sizes)
	var b strings.Builder
	fmt.Fprintf(&b, "# %10s", "size(B)")
	for _, op := range ops {
		fmt.Fprintf(&b, "  %13s", op)
	}
	b.WriteString("\n")
	for _, s := range sizes {
		fmt.Fprintf(&b, "  %10d", s)
		for _, op := range ops {
			if v, ok := at[op][s]; ok {
				fmt.Fprintf(&b, "  %13.2f", v)
			} else {
				fmt.Fprintf(&b, "  %13s", "-")
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "# %10s", "median")
	for _, op := range ops {
		var xs []float64
		for _, v := range at[op] {
			xs = append(xs, v)
		}
		fmt.Fprintf(&b, "  %13.2f", median(xs))
	}
	fmt.Fprintf(&b, "\n# %10s", "within 25%")
	for _, op := range ops {
		in := 0
		for _, v := range at[op] {
			if v >= 0.75 && v <= 1.25 {
				in++
			}
		}
		fmt.Fprintf(&b, "  %13s", fmt.Sprintf("%d of %d", in, len(at[op])))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
