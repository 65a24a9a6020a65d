package hierarchy_test

import (
	"context"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// BenchmarkSmallAllReduce times a blocking 8-byte AllReduce on a 2 × 2
// hierarchy (an in-memory nexar world between nodes; shared memory, or a
// Split of that world, inside a node), every rank a goroutine of this
// process, and the same on its flat world part: the software cost of a
// small collective, without a network. With shared memory the node's
// ranks spin for each other on the process's few CPUs, which an
// in-process run exaggerates. (The bench command measures it over real
// sockets and processes.)
//
// The "leads" runs take the lead-based path, as a hierarchy with a cost
// model (hiercomm.Init's) does at this size; the others the 2D path, as a
// zero Config does.
func BenchmarkSmallAllReduce(b *testing.B) {
	for _, intra := range []string{"shm", "nexar"} {
		for _, path := range []string{"2d", "leads"} {
			var cfg hierarchy.Config
			if path == "leads" {
				cfg.SmallBytes = 1 << 10
			}
			cs := build(b, layout{name: "2x2", perNode: []int{2, 2}}, intra, cfg)
			for _, mode := range []string{"hier", "flat"} {
				if mode == "flat" && path == "leads" {
					continue // the same world part as 2d's
				}
				b.Run(intra+"/"+path+"/"+mode, func(b *testing.B) { benchSmall(b, cs, mode == "flat") })
			}
		}
	}
}

// BenchmarkSmallBroadcast is BenchmarkSmallAllReduce for an 8-byte
// Broadcast from rank 0, which the hierarchy runs on its world part: the
// difference to flat is the hierarchy's own per-call cost.
func BenchmarkSmallBroadcast(b *testing.B) {
	cs := build(b, layout{name: "2x2", perNode: []int{2, 2}}, "shm", hierarchy.Config{})
	for _, mode := range []string{"hier", "flat"} {
		b.Run(mode, func(b *testing.B) {
			benchCalls(b, cs, mode == "flat", func(c comm.Communicator, v []float32) error {
				return c.Broadcast(context.Background(), comm.Host(v), 0)
			})
		})
	}
}

func benchSmall(b *testing.B, cs []comm.Communicator, flat bool) {
	benchCalls(b, cs, flat, func(c comm.Communicator, v []float32) error {
		return c.AllReduce(context.Background(), comm.Host(v), comm.Host(v), comm.Max)
	})
}

// benchCalls runs call b.N times on every rank at once, on the hierarchy
// or on its flat world part, with a 2-float vector of the rank's own.
func benchCalls(b *testing.B, cs []comm.Communicator, flat bool, call func(comm.Communicator, []float32) error) {
	var wg sync.WaitGroup
	b.ResetTimer()
	for r, c := range cs {
		if flat {
			c = c.(*hierarchy.Comm).Flat()
		}
		wg.Go(func() {
			v := []float32{float32(r), 1}
			for range b.N {
				if err := call(c, v); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkSmallSendRecv is BenchmarkSmallAllReduce for a ring of 4-byte
// messages (each rank sends to the next and receives from the one
// before, both started at once, as the bench's sendrecv), with
// node-mates' messages through shared memory ("intra") or the world part
// ("world", Config.NodeP2PViaWorld). Run with -benchmem: on the world's
// route the hierarchy allocates what its world part does.
func BenchmarkSmallSendRecv(b *testing.B) {
	for _, route := range []string{"intra", "world"} {
		cs := build(b, layout{name: "2x2", perNode: []int{2, 2}}, "shm", hierarchy.Config{NodeP2PViaWorld: route == "world"})
		for _, mode := range []string{"hier", "flat"} {
			b.Run(route+"/"+mode, func(b *testing.B) {
				P := len(cs)
				benchCalls(b, cs, mode == "flat", func(c comm.Communicator, v []float32) error {
					r, ctx := c.Rank(), context.Background()
					s := c.Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(v[:1]), Peer: (r + 1) % P, Tag: 5})
					if err := c.Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(v[1:]), Peer: (r + P - 1) % P, Tag: 5}).Wait(); err != nil {
						return err
					}
					return s.Wait()
				})
			})
		}
	}
}
