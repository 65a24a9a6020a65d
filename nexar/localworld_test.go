package nexar

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/hiercomm/hiercomm/nexar/transport/mem"
)

func TestLocalWorldAllReduce(t *testing.T) {
	for _, network := range []string{"quic", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cs, err := NewLocalWorld(ctx, 4, network, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer CloseAll(cs)
			n := 1000003
			var wg sync.WaitGroup
			for r, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					x := make([]int32, n)
					for i := range x {
						x[i] = int32(r*i + r)
					}
					start := time.Now()
					if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
						t.Error(err)
						return
					}
					if r == 0 {
						t.Logf("%s AllReduce 4 MB on 4 ranks: %v", network, time.Since(start))
					}
					for i := range x {
						if want := int32(6*i + 6); x[i] != want {
							t.Errorf("rank %d [%d] = %d want %d", r, i, x[i], want)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// NewWorld runs a communicator over a transport it did not make (here the
// in-memory one, as an outside transport would be), and refuses one that is
// not the rank it was asked for, closing it.
func TestNewWorldOverATransportOfOnesOwn(t *testing.T) {
	const n = 3
	hs := make([]transport.Handler, n)
	ready := make(chan struct{})
	var trs []transport.Transport
	cs := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for r := range n {
		wg.Go(func() {
			cs[r], errs[r] = NewWorld(r, n, Options{}, func(h transport.Handler) (transport.Transport, error) {
				mu.Lock()
				hs[r] = h
				if !slices.Contains(hs, nil) {
					trs = mem.NewTransports(hs)
					close(ready)
				}
				mu.Unlock()
				<-ready
				return trs[r], nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer CloseAll(cs)
	bufs := make([][]float32, n)
	for r := range n {
		bufs[r] = []float32{float32(r + 1)}
		wg.Go(func() {
			errs[r] = cs[r].AllReduce(context.Background(), comm.Host(bufs[r]), comm.Host(bufs[r]), comm.Sum)
		})
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil || bufs[r][0] != 6 {
			t.Errorf("rank %d: %v, %v; want [6]", r, bufs[r], errs[r])
		}
	}

	other := mem.NewTransports([]transport.Handler{make(arrivals, 1), make(arrivals, 1)})
	_, err := NewWorld(0, 2, Options{}, func(transport.Handler) (transport.Transport, error) { return other[1], nil })
	if !errors.Is(err, comm.ErrInvalidArgument) {
		t.Errorf("NewWorld over rank 1's transport as rank 0: %v, want ErrInvalidArgument", err)
	}
	if err := other[1].Send(context.Background(), 0, transport.Header{Kind: transport.FrameData}, nil); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("the refused transport was not closed: Send = %v", err)
	}
}
