package nexar

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
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
