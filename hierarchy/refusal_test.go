package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// A rank that passes a bad argument: the others are told that rank's own
// reason (docs/errors.md), through whichever part and relay the news
// took, not what a part said of the empty stand-in calls the hierarchy
// makes for an abandoned collective ("buffer is missing"). The
// communicator stays usable.
func TestPeersReadTheRefusingRanksReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(r int) comm.Call
		want string // in every peer's error
	}{
		{"avg on i32", func(r int) comm.Call {
			x := comm.Host(make([]int32, 17))
			op := comm.Sum
			if r == 1 {
				op = comm.Avg
			}
			return comm.Call{Kind: comm.KindAllReduce, Send: x, Recv: x, Op: op}
		}, "invalid op: avg"},
		{"short ReduceScatter recv", func(r int) comm.Call {
			n := 1 << 12
			if r == 1 {
				n--
			}
			return comm.Call{Kind: comm.KindReduceScatter, Send: comm.Host(make([]float32, 4<<12)), Recv: comm.Host(make([]float32, n)), Op: comm.Sum}
		}, "invalid send: has 16384 elements"},
	} {
		for _, intra := range []string{"shm", "nexar"} {
			t.Run(tc.name+"/"+intra, func(t *testing.T) {
				cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, intra, hierarchy.Config{})
				errs := each(cs, func(r int, c comm.Communicator) error {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					err := c.Start(ctx, tc.call(r)).Wait()
					switch {
					case r == 1 && !errors.Is(err, comm.ErrInvalidArgument):
						return fmt.Errorf("the bad call: %v, want ErrInvalidArgument", err)
					case r != 1 && !comm.PlainAbandon(err):
						return fmt.Errorf("%v, want a plain abandon", err)
					case r != 1 && !strings.Contains(err.Error(), tc.want):
						return fmt.Errorf("%q does not give rank 1's reason (%q)", err, tc.want)
					case r != 1 && comm.PeerOf(err) != 1 && !strings.Contains(err.Error(), "rank 1 ended"):
						return fmt.Errorf("%q does not name rank 1", err)
					}
					x := []int64{int64(r)}
					if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil || x[0] != 6 {
						return fmt.Errorf("the next AllReduce: %v, %v", err, x)
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
				t.Logf("rank 2: %v", errs[2])
			})
		}
	}
}

// A refused call whose buffers imply two counts that the 2D route cuts
// into different numbers of chunks (here a ReduceScatter recv one element
// short, with ChunkBytes small enough to chunk it): the refusing rank
// cannot know which operations its peers issue, so it aborts the
// hierarchy instead of leaving them out of step. Every rank returns an
// error in bounded time, the peers' naming rank 1's reason, and the next
// call fails fast on every rank (docs/hierarchy.md, Failures). Before,
// the peers' next collective hung until its deadline.
func TestRefusalWithAmbiguousCountAborts(t *testing.T) {
	const per = 1 << 10 // recv elements: 4 KiB of f32, 64 KiB of send on 16 ranks' worth
	for _, intra := range []string{"shm", "nexar"} {
		t.Run(intra, func(t *testing.T) {
			cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, intra, hierarchy.Config{ChunkBytes: 4 * 4 * (per - 1), SmallBytes: 1})
			errs := each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				n := per
				if r == 1 {
					n--
				}
				err := c.ReduceScatter(ctx, comm.Host(make([]float32, 4*per)), comm.Host(make([]float32, n)), comm.Sum)
				switch {
				case err == nil:
					return errors.New("the ReduceScatter succeeded")
				case errors.Is(err, comm.ErrTimeout):
					return fmt.Errorf("timed out: %v", err)
				case r == 1 && !errors.Is(err, comm.ErrInvalidArgument):
					return fmt.Errorf("the bad call: %v, want ErrInvalidArgument", err)
				case r != 1 && !strings.Contains(err.Error(), "invalid send: has 4096 elements"):
					return fmt.Errorf("%q does not give rank 1's reason", err)
				}
				x := []int64{int64(r)}
				if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); !errors.Is(err, comm.ErrAborted) {
					return fmt.Errorf("the next AllReduce: %v, want ErrAborted", err)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			t.Logf("rank 2: %v", errs[2])
		})
	}
}
