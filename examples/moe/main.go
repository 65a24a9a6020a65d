// Command moe is the token exchange of a mixture-of-experts layer: every
// rank holds one expert, a two-layer perceptron (dim → -hidden → dim,
// ReLU between) of the examples' shared model package; each step every
// rank routes each of its tokens to one expert (a different number of
// tokens to each), an AllToAllV sends them there, the experts run their
// forward pass on what they received, and a second AllToAllV (counts
// swapped) returns the results to the tokens' owners, who check every
// element bit for bit: expert e's weights are drawn from seed e, so every
// rank can build every expert, and a token's output does not depend on
// the batch it was computed in. On a hierarchical world (more than one node,
// more than one rank on a node) both exchanges take the two-phase path:
// within the node first, then one message per rail and node.
//
//	go run ./cmd/hiercomm run --nodes 2 --ranks-per-node 2 -- ./examples/moe
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
)

func main() {
	tokens := flag.Int("tokens", 4096, "tokens per rank per step")
	dim := flag.Int("dim", 64, "elements per token")
	steps := flag.Int("steps", 20, "steps")
	hidden := flag.Int("hidden", 128, "hidden width of each expert")
	flag.Parse()
	if err := run(*tokens, *dim, *hidden, *steps); err != nil {
		slog.Error("moe failed", "err", err)
		os.Exit(1)
	}
}

// route is the expert of token t of rank r at step s: a deterministic,
// uneven spread (some experts get many tokens, some none).
func route(r, s, t, experts int) int { return (r*7 + s*3 + t*t) % experts }

// value is element j of token t of rank r at step s, in [-2, 2].
func value(r, s, t, j int) float32 { return (float32((r*131+s*17+t*5+j)%4093) - 2046) / 1024 }

func run(tokens, dim, hidden, steps int) error {
	if tokens < 1 || dim < 1 || hidden < 1 || steps < 1 {
		return fmt.Errorf("-tokens %d -dim %d -hidden %d -steps %d: want each at least 1", tokens, dim, hidden, steps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	rank, size := w.Rank(), w.Size()
	ex, err := newExperts(size, dim, hidden)
	if err != nil {
		return err
	}
	var took time.Duration
	for s := range steps {
		// Route: group this rank's tokens by expert, in token order.
		counts := make([]int, size) // elements to each expert
		byExpert := make([][]int, size)
		for t := range tokens {
			e := route(rank, s, t, size)
			byExpert[e] = append(byExpert[e], t)
			counts[e] += dim
		}
		send := make([]float32, 0, tokens*dim)
		for e := range size {
			for _, t := range byExpert[e] {
				for j := range dim {
					send = append(send, value(rank, s, t, j))
				}
			}
		}
		// Every expert must know what it receives from each rank: each rank
		// can compute it here (the routing is deterministic); a real layer
		// would exchange the counts with an AllToAll first.
		recvCounts := make([]int, size)
		for src := range size {
			for t := range tokens {
				if route(src, s, t, size) == rank {
					recvCounts[src] += dim
				}
			}
		}
		recv := make([]float32, sum(recvCounts))
		start := time.Now()
		if err := w.AllToAllV(ctx, comm.Host(send), counts, comm.Host(recv), recvCounts); err != nil {
			return fmt.Errorf("step %d: dispatch: %w", s, err)
		}
		out, err := ex.apply(rank, recv)
		if err != nil {
			return fmt.Errorf("step %d: expert %d: %w", s, rank, err)
		}
		back := make([]float32, len(send))
		if err := w.AllToAllV(ctx, comm.Host(out), recvCounts, comm.Host(back), counts); err != nil {
			return fmt.Errorf("step %d: combine: %w", s, err)
		}
		took += time.Since(start)
		// What each expert must have answered, computed here.
		at := 0
		for e := range size {
			mine := send[at : at+counts[e]]
			want, err := ex.apply(e, mine)
			if err != nil {
				return err
			}
			for i, v := range want {
				if got := back[at+i]; math.Float32bits(got) != math.Float32bits(v) {
					t := byExpert[e][i/dim]
					return fmt.Errorf("rank %d, step %d: token %d element %d came back from expert %d as %v, want %v", rank, s, t, i%dim, e, got, v)
				}
			}
			at += counts[e]
		}
	}
	fmt.Printf("rank %d/%d (node %d, local %d/%d): %d steps of %d tokens × %d dispatched and combined exactly, %v per step\n",
		rank, size, w.Node(), w.LocalRank(), w.LocalSize(), steps, tokens, dim, (took / time.Duration(steps)).Round(time.Microsecond))
	return w.Barrier(ctx)
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// experts are the experts of a layer of size of them: nets of one shape,
// dim → hidden → dim, expert e's weights drawn from seed e.
type experts struct {
	net *mlp.Net
	p   [][]float32
}

// chunk is the most tokens an expert's forward pass takes at once.
const chunk = 256

func newExperts(size, dim, hidden int) (*experts, error) {
	net, err := mlp.New([]int{dim, hidden, dim}, chunk)
	if err != nil {
		return nil, err
	}
	x := &experts{net: net}
	for e := range size {
		p := make([]float32, net.NumParams())
		net.Init(p, uint64(e))
		x.p = append(x.p, p)
	}
	return x, nil
}

// apply runs expert e's forward pass on the tokens in (rows of dim) and
// returns its outputs, in chunks of at most chunk tokens (a token's
// output is the same bits in any chunk).
func (x *experts) apply(e int, in []float32) ([]float32, error) {
	dim := x.net.Inputs()
	out := make([]float32, 0, len(in))
	params := mlp.Flat{Net: x.net, P: x.p[e]}
	for at := 0; at < len(in); at += chunk * dim {
		rows := min(chunk, (len(in)-at)/dim)
		y, err := x.net.Forward(params, in[at:at+rows*dim], rows)
		if err != nil {
			return nil, err
		}
		out = append(out, y...)
	}
	return out, nil
}
