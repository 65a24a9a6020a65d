package hierarchy_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// BenchmarkHierHops traces 8-byte calls on a 2 × 2 hierarchy (shared
// memory inside the nodes, an in-memory nexar world between them; every
// rank a goroutine of this process) and reports the median of each hop in
// µs: the hierarchy's own time before its first part call (in), between
// part calls (between) and after the last (out); each part's call (intra,
// rail, world); inside the shared-memory calls, the time to post the first
// step (shm-in), each wait for the node-mates' posts (shm-wait), the time
// from one step's end to the next one's post (shm-between), the time after
// the last (shm-out) and the steps a call takes; and the whole call. The AllReduce runs
// both routes (leads: Reduce, AllReduce over the leads' rail, Broadcast;
// 2d: ReduceScatter, every rail's AllReduce, AllGather), forced with
// Config.SmallBytes; the Broadcast takes the world part:
//
//	go test -run '^$' -bench HierHops -benchtime 3000x -cpu 2 ./hierarchy/
func BenchmarkHierHops(b *testing.B) {
	for _, tc := range []struct {
		name  string
		small int
		call  func(comm.Communicator, []float32) error
	}{
		{"allreduce/leads", 1 << 20, func(c comm.Communicator, v []float32) error {
			return c.AllReduce(context.Background(), comm.Host(v), comm.Host(v), comm.Max)
		}},
		{"allreduce/2d", 1, func(c comm.Communicator, v []float32) error {
			return c.AllReduce(context.Background(), comm.Host(v), comm.Host(v), comm.Max)
		}},
		{"broadcast/world", 0, func(c comm.Communicator, v []float32) error {
			return c.Broadcast(context.Background(), comm.Host(v), 0)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cs := build(b, layout{name: "2x2", perNode: []int{2, 2}}, "shm", hierarchy.Config{SmallBytes: tc.small})
			stop := hoptrace.Start(32 * len(cs) * b.N)
			benchCalls(b, cs, false, tc.call)
			b.StopTimer()
			for _, col := range hierColumns(stop()) {
				if len(col.d) > 0 {
					slices.Sort(col.d)
					unit := col.name + "-µs"
					if col.name == "shm-steps" {
						unit = "shm-steps/call"
					}
					b.ReportMetric(col.d[len(col.d)/2], unit)
				}
			}
		})
	}
}

type hopColumn struct {
	name string
	d    []float64
}

// hierColumns turns a trace into BenchmarkHierHops's columns.
func hierColumns(ev []hoptrace.Event) []hopColumn {
	names := []string{"in", "between", "out", "intra", "rail", "world", "shm-in", "shm-wait", "shm-out", "call", "shm-between", "shm-steps"}
	cols := make([]hopColumn, len(names))
	for i, n := range names {
		cols[i].name = n
	}
	add := func(i int, d time.Duration) { cols[i].d = append(cols[i].d, float64(d.Nanoseconds())/1e3) }
	// The hierarchy's events by global rank, shared memory's by
	// communicator and rank.
	type who struct{ comm, rank int32 }
	hier, shm := map[int32][]hoptrace.Event{}, map[who][]hoptrace.Event{}
	for _, e := range ev {
		switch e.Hop {
		case hoptrace.HierCall, hoptrace.PartCall, hoptrace.PartReturn, hoptrace.HierReturn:
			hier[e.Rank] = append(hier[e.Rank], e)
		case hoptrace.ShmCall, hoptrace.ShmPosted, hoptrace.ShmSeen, hoptrace.ShmReturn:
			k := who{e.Peer, e.Rank} // Peer: the communicator
			shm[k] = append(shm[k], e)
		}
	}
	for _, es := range hier {
		var call, last time.Duration = -1, -1
		first := true
		for _, e := range es {
			switch e.Hop {
			case hoptrace.HierCall:
				call, last, first = e.At, -1, true
			case hoptrace.PartCall:
				if call < 0 {
					continue
				}
				if first {
					add(0, e.At-call)
					first = false
				} else if last >= 0 {
					add(1, e.At-last)
				}
				last = -1
			case hoptrace.PartReturn:
				last = e.At
			case hoptrace.HierReturn:
				if call >= 0 {
					if last >= 0 {
						add(2, e.At-last)
					}
					add(9, e.At-call)
				}
				call = -1
			}
		}
		// Each part's call: a PartCall to the next PartReturn of the same part.
		open := map[int32]time.Duration{}
		for _, e := range es {
			switch e.Hop {
			case hoptrace.PartCall:
				open[e.Peer] = e.At
			case hoptrace.PartReturn:
				if at, ok := open[e.Peer]; ok {
					add(3+int(e.Peer), e.At-at)
					delete(open, e.Peer)
				}
			}
		}
	}
	for _, es := range shm {
		var call, seen time.Duration = -1, -1
		posted := time.Duration(-1)
		first, steps := true, 0
		for _, e := range es {
			switch e.Hop {
			case hoptrace.ShmCall:
				call, seen, first, steps = e.At, -1, true, 0
			case hoptrace.ShmPosted:
				posted = e.At
				steps++
				if call >= 0 && first {
					add(6, e.At-call)
					first = false
				} else if seen >= 0 {
					add(10, e.At-seen)
				}
			case hoptrace.ShmSeen:
				if posted >= 0 {
					add(7, e.At-posted)
				}
				seen = e.At
			case hoptrace.ShmReturn:
				if call >= 0 && seen >= 0 {
					add(8, e.At-seen)
					cols[11].d = append(cols[11].d, float64(steps))
				}
				call = -1
			}
		}
	}
	return cols
}
