package nexar

import (
	"context"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

func TestSmokeAllReduce(t *testing.T) {
	for _, P := range []int{1, 2, 3, 4, 5, 8} {
		for _, n := range []int{0, 1, 7, 1000003} {
			cs, err := NewMemoryWorld(P, Options{})
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, P)
			outs := make([][]float32, P)
			for r, c := range cs {
				go func() {
					in := make([]float32, n)
					for i := range in {
						in[i] = float32((r+1)*(i%13) - r)
					}
					outs[r] = make([]float32, n)
					errs <- c.AllReduce(context.Background(), comm.Host(in), comm.Host(outs[r]), comm.Sum)
				}()
			}
			for range P {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for r := range P {
				for i := range n {
					var want float32
					for q := range P {
						want += float32((q+1)*(i%13) - q)
					}
					if outs[r][i] != want {
						t.Fatalf("P=%d n=%d rank %d [%d] = %v want %v", P, n, r, i, outs[r][i], want)
					}
				}
			}
			for _, c := range cs {
				c.Close()
			}
		}
	}
}
