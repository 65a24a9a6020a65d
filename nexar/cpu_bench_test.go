package nexar

import (
	"context"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/internal/baseline"
)

// What a communicator costs in CPU per byte over each network, beside the
// transports' own figures (BenchmarkQUICCPU and BenchmarkTLSLaneCPU in
// nexar/transport/netmesh, whose raw sub-benchmarks are the ceilings):
//
//	go test -run '^$' -bench 'SendRecvCPU' -benchtime 200x -count 5 ./nexar/

// BenchmarkSendRecvCPU is the bytes per CPU-second of a communicator's
// 1 MiB Send and Recv between two ranks: over QUIC alone (quic-only, the
// share of BenchmarkQUICCPU/raw that the communicator keeps) and over the
// default network's two lanes (quic, against BenchmarkTLSLaneCPU/raw).
func BenchmarkSendRecvCPU(b *testing.B) {
	const chunk = 1 << 20
	for _, network := range []string{"quic-only", "quic"} {
		b.Run(network, func(b *testing.B) { sendRecvCPU(b, network, chunk) })
	}
}

// sendRecvCPU measures the bytes per CPU-second of a communicator's
// chunk-sized Send and Recv between two ranks over network.
func sendRecvCPU(b *testing.B, network string, chunk int) {
	ctx := context.Background()
	cs, err := NewLocalWorld(ctx, 2, network, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	send, recv := make([]byte, chunk), make([]byte, chunk)
	b.SetBytes(int64(chunk))
	cpu := baseline.StartCPU()
	b.ResetTimer()
	got := make(chan error, 1)
	go func() {
		var err error
		for range b.N {
			if err = cs[1].Recv(ctx, comm.Host(recv), 0, 0); err != nil {
				break
			}
		}
		got <- err
	}()
	for range b.N {
		if err := cs[0].Send(ctx, comm.Host(send), 1, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		b.Fatal(err)
	}
	cpu.Report(b, chunk)
}

// BenchmarkAllReduceCPU is a 4-rank AllReduce of 4 MiB over each network,
// all ranks in this process, with its bus bandwidth per CPU-second
// (2(P−1)/P of the buffer per iteration, over the process's CPU time):
// what encryption costs a collective where the CPU, not the link, is the
// bound, as on loopback.
//
//	go test -run '^$' -bench 'AllReduceCPU' -benchtime 30x -count 3 ./nexar/
func BenchmarkAllReduceCPU(b *testing.B) {
	const ranks, n = 4, 4 << 20 / 4 // 4 MiB of f32
	bus := 2 * (ranks - 1) * 4 * n / ranks
	for _, network := range []string{"tcp", "quic", "quic-only"} {
		b.Run(network, func(b *testing.B) {
			cs, err := NewLocalWorld(context.Background(), ranks, network, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer CloseAll(cs)
			bufs := make([][]float32, ranks)
			for r := range bufs {
				bufs[r] = make([]float32, n)
			}
			b.SetBytes(int64(bus))
			cpu := baseline.StartCPU()
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for r, c := range cs {
					wg.Go(func() {
						if err := c.AllReduce(context.Background(), comm.Host(bufs[r]), comm.Host(bufs[r]), comm.Sum); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			cpu.Report(b, bus)
		})
	}
}
