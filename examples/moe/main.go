// Command moe is the token exchange of a mixture-of-experts layer: every
// rank holds one expert; each step every rank routes each of its tokens to
// one expert (a different number of tokens to each), an AllToAllV sends
// them there, the experts transform what they received, and a second
// AllToAllV (counts swapped) returns the results to the tokens' owners,
// who check every element. On a hierarchical world (more than one node,
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
	"os"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
)

func main() {
	tokens := flag.Int("tokens", 4096, "tokens per rank per step")
	dim := flag.Int("dim", 64, "elements per token")
	steps := flag.Int("steps", 20, "steps")
	flag.Parse()
	if err := run(*tokens, *dim, *steps); err != nil {
		slog.Error("moe failed", "err", err)
		os.Exit(1)
	}
}

// route is the expert of token t of rank r at step s: a deterministic,
// uneven spread (some experts get many tokens, some none).
func route(r, s, t, experts int) int { return (r*7 + s*3 + t*t) % experts }

// value is element j of token t of rank r at step s; exact in float32.
func value(r, s, t, j int) float32 { return float32((r*131+s*17+t*5+j)%4093) - 2000 }

// expert is what expert e does to an element: exact in float32.
func expert(e int, v float32) float32 { return v*2 + float32(e) }

func run(tokens, dim, steps int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	rank, size := w.Rank(), w.Size()
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
		for i, v := range recv {
			recv[i] = expert(rank, v)
		}
		back := make([]float32, len(send))
		if err := w.AllToAllV(ctx, comm.Host(recv), recvCounts, comm.Host(back), counts); err != nil {
			return fmt.Errorf("step %d: combine: %w", s, err)
		}
		took += time.Since(start)
		at := 0
		for e := range size {
			for _, t := range byExpert[e] {
				for j := range dim {
					if want := expert(e, value(rank, s, t, j)); back[at] != want {
						return fmt.Errorf("rank %d, step %d: token %d element %d came back from expert %d as %v, want %v", rank, s, t, j, e, back[at], want)
					}
					at++
				}
			}
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
