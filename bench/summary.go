package bench

import (
	"fmt"
	"io"
	"math/bits"
	"strconv"
)

// The project's speed goals, as ratios Summarize computes from one run.
const (
	// BandwidthGoal: AllReduce busbw at ≥ BandwidthFrom bytes is at least
	// this fraction of sendrecv's busbw at the same size (the transport's
	// ceiling with every link busy).
	BandwidthGoal = 0.85
	// BandwidthFrom is the smallest size the bandwidth goal is judged at.
	BandwidthFrom = 16 << 20
	// LatencyUpTo is the largest size the raw latency goals are judged
	// at (Summary.Raw): the smallest measured size up to it.
	LatencyUpTo = 64
)

// Summary holds the goal ratios of one run. A ratio whose inputs the run
// did not measure (no sendrecv, no size ≥ 16 MiB, one rank) is absent: its
// Has field is false and its Why says what is missing.
type Summary struct {
	Ranks int

	// HasBandwidth: AllReduceBusBW / SendRecvBusBW at BandwidthBytes, the
	// largest size ≥ BandwidthFrom that both measured.
	HasBandwidth   bool
	BandwidthBytes int64
	AllReduceBusBW float64 // GB/s
	SendRecvBusBW  float64 // GB/s
	BandwidthRatio float64
	BandwidthWhy   string

	// HasIntra: the run was on one node and measured copy(): the
	// shared-memory goals. IntraRatio is the smallest AllReduce busbw ÷
	// copy() GB/s over the sizes in [IntraFrom, IntraUpTo] that both
	// measured, at IntraBytes; Intra8BUS is the 8-byte AllReduce time.
	HasIntra     bool
	IntraBytes   int64
	IntraBusBW   float64
	IntraCopyGBs float64
	IntraRatio   float64
	HasIntra8B   bool
	Intra8BUS    float64
	IntraWhy     string
	// Raw: with the machine's floor measured (Result.FloorRTTUS: plain
	// sockets), or else nexar's bare transport's round trip, the smallest
	// AllReduce and sendrecv (≤ LatencyUpTo bytes) of every communicator
	// the run compared, each against it.
	Raw []RawLatency
	// HasFrames: both were measured, and nexar's frames (ours) are set
	// beside the floor: FramesRTTUS ÷ FloorRTTUS, and the doubling
	// exchanges' FramesDoublingUS ÷ FloorDoublingUS when both were
	// measured (else 0).
	HasFrames                         bool
	FramesRTTUS, FloorRTTUS           float64
	FramesDoublingUS, FloorDoublingUS float64
}

// RawLatency is one communicator's smallest Op against a round trip: the
// machine's floor's (Floor: plain sockets) or nexar's bare transport's.
// US ÷ RTTUS = Ratio, at most Goal.
type RawLatency struct {
	Comm      string
	Op        string
	Bytes     int64
	US, RTTUS float64
	Ratio     float64
	Goal      float64
	Floor     bool
	// Doubling: RTTUS is the recursive-doubling exchange among all ranks
	// (Result.FloorDoublingUS, or RawDoublingUS), not the pair's round trip; with
	// PerRound, one of its log₂ N rounds (every rank swaps one frame with
	// a partner while all do: a sendrecv's ceiling with every rank busy,
	// where the pair's round trip was measured with the others idle).
	Doubling, PerRound bool
}

// Met reports whether the goal holds.
func (l RawLatency) Met() bool { return l.Ratio <= l.Goal }

// Summarize computes r's goal ratios.
func Summarize(r Result) Summary {
	s := Summary{Ranks: r.Ranks}
	ar, sr := map[int64]Row{}, map[int64]Row{}
	for _, row := range r.rowsOf("allreduce") {
		ar[row.Bytes] = row
	}
	for _, row := range r.rowsOf("sendrecv") {
		sr[row.Bytes] = row
	}
	var common []int64
	for _, row := range r.rowsOf("allreduce") {
		if _, ok := sr[row.Bytes]; ok {
			common = append(common, row.Bytes)
		}
	}

	s.BandwidthWhy = fmt.Sprintf("needs allreduce and sendrecv at the same size ≥ %s", FormatSize(BandwidthFrom))
	for _, b := range common {
		if b >= BandwidthFrom && b > s.BandwidthBytes && sr[b].BusBW > 0 {
			s.HasBandwidth, s.BandwidthBytes = true, b
		}
	}
	if s.HasBandwidth {
		s.AllReduceBusBW, s.SendRecvBusBW = ar[s.BandwidthBytes].BusBW, sr[s.BandwidthBytes].BusBW
		s.BandwidthRatio = s.AllReduceBusBW / s.SendRecvBusBW
		s.BandwidthWhy = ""
	}

	rtt, dbl := r.RawRTTUS, r.RawDoublingUS
	if r.FloorRTTUS > 0 {
		rtt, dbl = r.FloorRTTUS, r.FloorDoublingUS
	}
	if rtt > 0 {
		comms := r.Comms
		if len(comms) == 0 {
			comms = []string{""}
		}
		floor := r.FloorRTTUS > 0
		for _, name := range comms {
			for _, op := range []string{"allreduce", "sendrecv"} {
				if l, ok := rawLatency(r, name, op, rtt, floor); ok {
					s.Raw = append(s.Raw, l)
				}
			}
			if l, ok := rawLatency(r, name, "allreduce", rtt, floor); ok && dbl > 0 {
				l.RTTUS, l.Ratio, l.Goal, l.Doubling = dbl, l.US/dbl, DoublingGoal, true
				s.Raw = append(s.Raw, l)
			}
			if l, ok := rawLatency(r, name, "sendrecv", rtt, floor); ok && dbl > 0 && r.Ranks > 1 {
				round := dbl / float64(bits.Len(uint(r.Ranks-1)))
				l.RTTUS, l.Ratio, l.Goal, l.Doubling, l.PerRound = round, l.US/round, DoublingGoal, true, true
				s.Raw = append(s.Raw, l)
			}
		}
	}
	if r.FloorRTTUS > 0 && r.RawRTTUS > 0 {
		s.HasFrames = true
		s.FramesRTTUS, s.FloorRTTUS = r.RawRTTUS, r.FloorRTTUS
		if r.FloorDoublingUS > 0 && r.RawDoublingUS > 0 {
			s.FramesDoublingUS, s.FloorDoublingUS = r.RawDoublingUS, r.FloorDoublingUS
		}
	}
	s.summarizeIntra(r, ar)
	return s
}

// rawLatency judges the smallest op (≤ LatencyUpTo bytes) on communicator
// name against the round trip rtt: the machine's floor's (floor) or the
// bare transport's.
func rawLatency(r Result, name, op string, rtt float64, floor bool) (RawLatency, bool) {
	l := RawLatency{Comm: name, Op: op, RTTUS: rtt, Goal: RawGoal(op, r.Ranks), Floor: floor}
	found := false
	for _, row := range r.rowsOn(op, name) {
		if row.Bytes <= LatencyUpTo && row.TimeUS > 0 && (!found || row.Bytes < l.Bytes) {
			found, l.Bytes, l.US = true, row.Bytes, row.TimeUS
		}
	}
	l.Ratio = l.US / l.RTTUS
	return l, found
}

// DoublingGoal is the most a small AllReduce may take in bare
// recursive-doubling exchanges among all ranks: what the communicator adds
// to its transport's frames, as sendrecv's goal bounds it for one message.
const DoublingGoal = 1.2

// RawGoal is the most a small op may take in round trips of the bare
// transport: an AllReduce 2.5 on 4 ranks or more (two exchanges of
// recursive doubling, and some software) and 1.5 on 2 (one exchange); a
// sendrecv (every rank sends to the next and receives from the previous:
// one message's way) 1.2.
func RawGoal(op string, ranks int) float64 {
	switch {
	case op == "sendrecv":
		return 1.2
	case ranks <= 2:
		return 1.5
	}
	return 2.5
}

// summarizeIntra fills the shared-memory goals' fields.
func (s *Summary) summarizeIntra(r Result, ar map[int64]Row) {
	if r.Nodes != 1 {
		s.IntraWhy = "judged on single-node runs"
		return
	}
	if row, ok := ar[8]; ok {
		s.HasIntra8B, s.Intra8BUS = true, row.TimeUS
	}
	if len(r.Copy) == 0 {
		s.IntraWhy = "needs the copy() baseline"
		return
	}
	for _, c := range r.Copy {
		row, ok := ar[c.Bytes]
		if !ok || c.Bytes < IntraFrom || c.Bytes > IntraUpTo || c.GBs <= 0 {
			continue
		}
		if ratio := row.BusBW / c.GBs; !s.HasIntra || ratio < s.IntraRatio {
			s.HasIntra, s.IntraBytes, s.IntraBusBW, s.IntraCopyGBs, s.IntraRatio = true, c.Bytes, row.BusBW, c.GBs, ratio
		}
	}
	if !s.HasIntra {
		s.IntraWhy = fmt.Sprintf("needs allreduce at a copy() size in %s–%s", FormatSize(IntraFrom), FormatSize(IntraUpTo))
	}
}

// IntraMet reports whether the shared-memory bandwidth goal is met, and
// Intra8BMet the latency goal (on IntraLatencyRanks ranks; false when not
// measured).
func (s Summary) IntraMet() bool { return s.HasIntra && s.IntraRatio >= IntraBandwidthGoal }
func (s Summary) Intra8BMet() bool {
	return s.HasIntra8B && s.Ranks == IntraLatencyRanks && s.Intra8BUS < IntraLatencyGoalUS
}

// BandwidthMet reports whether the bandwidth goal is met (false when not
// measured).
func (s Summary) BandwidthMet() bool { return s.HasBandwidth && s.BandwidthRatio >= BandwidthGoal }

// verdict is how a goal line ends: "met" or "not met".
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}

// goalRatio writes a ratio judged against a goal with 2 decimals, or with as
// many more (up to 6) as it takes for the written number to fall on the
// same side of the goal as the ratio: atLeast for a goal the ratio meets
// from goal up (≥), else from goal down (≤). A worst speedup of 1.4996
// against ≥ 1.5 reads 1.4996, not 1.50 beside "not met".
func goalRatio(v, goal float64, atLeast bool) string {
	meets := func(x float64) bool {
		if atLeast {
			return x >= goal
		}
		return x <= goal
	}
	s := ""
	for prec := 2; prec <= 6; prec++ {
		s = strconv.FormatFloat(v, 'f', prec, 64)
		if x, err := strconv.ParseFloat(s, 64); err == nil && meets(x) == meets(v) {
			break
		}
	}
	return s
}

// Format prints the ratios, each line ending with its verdict. They are
// informational: a goal not met is not an error.
func (s Summary) Format(w io.Writer) error {
	label := verdict
	out := fmt.Sprintf("# Summary: speed goals on %d ranks (informational)\n", s.Ranks)
	if s.HasBandwidth {
		out += fmt.Sprintf("#   bandwidth: allreduce busbw / sendrecv busbw at %s = %.2f / %.2f GB/s = %s (goal ≥ %.2f)  %s\n",
			FormatSize(s.BandwidthBytes), s.AllReduceBusBW, s.SendRecvBusBW, goalRatio(s.BandwidthRatio, BandwidthGoal, true), BandwidthGoal, label(s.BandwidthMet()))
	} else {
		out += fmt.Sprintf("#   bandwidth: n/a (%s)\n", s.BandwidthWhy)
	}
	for _, l := range s.Raw {
		on := ""
		if l.Comm != "" {
			on = " on " + l.Comm
		}
		against, bare := "the bare transport's round trip", "bare"
		if l.Floor {
			against, bare = "the floor's round trip (raw sockets)", "raw-socket"
		}
		switch {
		case l.PerRound:
			against = fmt.Sprintf("one round of a %s doubling exchange among all %d ranks", bare, s.Ranks)
		case l.Doubling:
			against = fmt.Sprintf("a %s doubling exchange among all %d ranks", bare, s.Ranks)
		}
		out += fmt.Sprintf("#   raw latency: %s at %d B%s / %s = %.2f / %.2f us = %s (goal ≤ %.1f)  %s\n",
			l.Op, l.Bytes, on, against, l.US, l.RTTUS, goalRatio(l.Ratio, l.Goal, false), l.Goal, label(l.Met()))
	}
	if s.HasFrames {
		out += fmt.Sprintf("#   ours: nexar's frames' round trip / the floor's = %.2f / %.2f us = %.2f", s.FramesRTTUS, s.FloorRTTUS, s.FramesRTTUS/s.FloorRTTUS)
		if s.FloorDoublingUS > 0 {
			out += fmt.Sprintf("; their doubling exchange among all %d ranks / the floor's = %.2f / %.2f us = %.2f",
				s.Ranks, s.FramesDoublingUS, s.FloorDoublingUS, s.FramesDoublingUS/s.FloorDoublingUS)
		}
		out += "\n"
	}
	switch {
	case s.HasIntra:
		out += fmt.Sprintf("#   intra bandwidth: min allreduce busbw / copy() over %s–%s: %.2f / %.2f GB/s at %s = %s (goal ≥ %.2f)  %s\n",
			FormatSize(IntraFrom), FormatSize(IntraUpTo), s.IntraBusBW, s.IntraCopyGBs, FormatSize(s.IntraBytes), goalRatio(s.IntraRatio, IntraBandwidthGoal, true), IntraBandwidthGoal, label(s.IntraMet()))
	case s.IntraWhy != "judged on single-node runs":
		out += fmt.Sprintf("#   intra bandwidth: n/a (%s)\n", s.IntraWhy)
	}
	if s.HasIntra8B {
		goal := fmt.Sprintf("goal < %.0f us on %d ranks", IntraLatencyGoalUS, IntraLatencyRanks)
		v := label(s.Intra8BMet())
		if s.Ranks != IntraLatencyRanks {
			v = "not judged (other world size)"
		}
		out += fmt.Sprintf("#   intra latency:   allreduce at 8 B = %.2f us (%s)  %s\n", s.Intra8BUS, goal, v)
	}
	_, err := io.WriteString(w, out)
	return err
}
