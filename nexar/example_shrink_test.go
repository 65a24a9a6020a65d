package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// Rank 2 goes away (here it closes; a killed process is the same to the
// others). The survivors' next collective fails with comm.ErrPeerFailed;
// each calls comm.Shrink, and they go on as ranks 0, 1, 2 of three.
func ExampleComm_Shrink() {
	ranks, err := nexar.NewMemoryWorld(4, nexar.Options{})
	if err != nil {
		panic(err)
	}
	defer nexar.CloseAll(ranks)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lines := make([]string, len(ranks))
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Go(func() { // one goroutine per rank, as one process per rank would be
			if r == 2 {
				c.Close()
				return
			}
			x := []float64{float64(r)}
			err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
			if !errors.Is(err, comm.ErrPeerFailed) {
				panic(err)
			}
			s, err := c.Shrink(ctx)
			if err != nil {
				panic(err)
			}
			defer s.Close()
			x[0] = float64(r)
			if err := s.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
				panic(err)
			}
			lines[r] = fmt.Sprintf("rank %d is rank %d of %d; the sum of the old ranks is %v", r, s.Rank(), s.Size(), x[0])
		})
	}
	wg.Wait()
	for _, l := range lines {
		if l != "" {
			fmt.Println(l)
		}
	}
	// Output:
	// rank 0 is rank 0 of 3; the sum of the old ranks is 4
	// rank 1 is rank 1 of 3; the sum of the old ranks is 4
	// rank 3 is rank 2 of 3; the sum of the old ranks is 4
}
