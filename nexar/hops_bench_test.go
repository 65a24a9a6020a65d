package nexar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// BenchmarkHops traces b.N small calls hop by hop (internal/hoptrace) and reports
// the median time of each hop in µs, for an 8-byte Send/Recv ping-pong
// and an 8-byte AllReduce on 2 and 4 ranks of this process, over loopback
// TCP and QUIC. The columns are docs/transports.md's budget table:
//
//	call→admit: the API, the validation and the executor, until the op exists
//	admit→write: the schedule and the framing, until the first write
//	write: the write to the transport (for TCP the syscall, which on
//	  loopback also runs the receiver's network stack; for QUIC, handing
//	  the frame to quic-go's stream)
//	wire+read: from the write's return to the peer's read loop holding the
//	  whole frame (kernel, the reader's wakeup, read syscalls; for QUIC also
//	  quic-go's packing, encryption, UDP syscalls and reassembly)
//	match: from the read to the frame handed to its waiting receive
//	wakeup: from there until the receive's goroutine runs
//	step: the receive step after it (the copy or the reduction)
//	done→return: from the last receive step to the call's return
//	call: the whole call (medians of each column do not add up to it)
//
//	go test -run '^$' -bench Hops -benchtime 2000x -count 3 ./nexar/
func BenchmarkHops(b *testing.B) {
	for _, network := range []string{"tcp", "quic"} {
		b.Run(network+"/sendrecv", func(b *testing.B) {
			cs := localWorld(b, 2, network)
			ctx := context.Background()
			buf0, buf1 := make([]byte, 8), make([]byte, 8)
			pingpong := func(n int) {
				var wg sync.WaitGroup
				wg.Go(func() {
					for range n {
						if err := errors.Join(cs[1].Recv(ctx, comm.Host(buf1), 0, 0), cs[1].Send(ctx, comm.Host(buf1), 0, 0)); err != nil {
							b.Error(err)
							return
						}
					}
				})
				for range n {
					if err := errors.Join(cs[0].Send(ctx, comm.Host(buf0), 1, 0), cs[0].Recv(ctx, comm.Host(buf0), 1, 0)); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
			}
			traced(b, pingpong)
		})
		for _, ranks := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/allreduce%d", network, ranks), func(b *testing.B) {
				cs := localWorld(b, ranks, network)
				allreduce := func(n int) { smallAllReduces(b, cs, n) }
				traced(b, allreduce)
			})
		}
	}
}

// traced runs f(100) untraced to warm up, then f(b.N) with hop tracing on,
// and reports each hop's median.
func traced(b *testing.B, f func(n int)) {
	f(100)
	stop := hoptrace.Start(64 * b.N)
	b.ResetTimer()
	f(b.N)
	b.StopTimer()
	ev := stop()
	for _, col := range hopColumns(ev) {
		if len(col.d) > 0 {
			b.ReportMetric(median(col.d), col.name+"-µs")
		}
	}
}

type hopColumn struct {
	name string
	d    []float64 // µs
}

// hopColumns turns a trace into the budget's columns.
func hopColumns(ev []hoptrace.Event) []hopColumn {
	cols := []hopColumn{{name: "call→admit"}, {name: "admit→write"}, {name: "write"}, {name: "wire+read"},
		{name: "match"}, {name: "wakeup"}, {name: "step"}, {name: "done→return"}, {name: "call"}}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	// A frame is (from, to, seq, step); its hops are marked by both ends.
	type key struct {
		from, to int32
		seq      uint64
		step     uint32
	}
	frames := map[key]*[hoptrace.NumHops]time.Duration{}
	byRank := map[int32][]hoptrace.Event{}
	for _, e := range ev {
		byRank[e.Rank] = append(byRank[e.Rank], e)
		k := key{from: e.Peer, to: e.Rank, seq: e.Seq, step: e.Step}
		switch e.Hop {
		case hoptrace.Call, hoptrace.Admit, hoptrace.Return:
			continue
		case hoptrace.Write, hoptrace.Written:
			k.from, k.to = e.Rank, e.Peer
		}
		t := frames[k]
		if t == nil {
			t = new([hoptrace.NumHops]time.Duration)
			for i := range t {
				t[i] = -1
			}
			frames[k] = t
		}
		t[e.Hop] = e.At
	}
	span := func(t *[hoptrace.NumHops]time.Duration, a, z hoptrace.Hop) (float64, bool) {
		if t[a] < 0 || t[z] < 0 || t[z] < t[a] {
			return 0, false
		}
		return us(t[z] - t[a]), true
	}
	for _, t := range frames {
		for i, s := range [][2]hoptrace.Hop{{hoptrace.Write, hoptrace.Written}, {hoptrace.Written, hoptrace.Read}, {hoptrace.Read, hoptrace.Matched}, {hoptrace.Matched, hoptrace.Woken}, {hoptrace.Woken, hoptrace.Done}} {
			if d, ok := span(t, s[0], s[1]); ok {
				cols[2+i].d = append(cols[2+i].d, d)
			}
		}
	}
	// A call is a rank's events from its hoptrace.Call to its hoptrace.Return.
	for _, rev := range byRank {
		slices.SortFunc(rev, func(a, b hoptrace.Event) int { return int(a.At - b.At) })
		var call, admit, lastDone time.Duration = -1, -1, -1
		wrote := false
		for _, e := range rev {
			switch e.Hop {
			case hoptrace.Call:
				call, admit, lastDone, wrote = e.At, -1, -1, false
			case hoptrace.Admit:
				if call >= 0 {
					admit = e.At
					cols[0].d = append(cols[0].d, us(e.At-call))
				}
			case hoptrace.Write:
				if !wrote && admit >= 0 {
					wrote = true
					cols[1].d = append(cols[1].d, us(e.At-admit))
				}
			case hoptrace.Done:
				lastDone = e.At
			case hoptrace.Return:
				if call >= 0 {
					if lastDone >= 0 {
						cols[7].d = append(cols[7].d, us(e.At-lastDone))
					}
					cols[8].d = append(cols[8].d, us(e.At-call))
				}
				call = -1
			}
		}
	}
	return cols
}

func median(d []float64) float64 {
	slices.Sort(d)
	return d[len(d)/2]
}
