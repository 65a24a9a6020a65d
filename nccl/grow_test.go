package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// grownControls is each process's nccl.Grown for a communicator growing
// to size ranks: its end of the grown control, nexar over TCP on
// 127.0.0.1.
func grownControls(t *testing.T, size int, connect time.Duration) []nccl.Grown {
	t.Helper()
	nets, err := netmesh.LocalConfigs("tcp", size, nexar.NetConfig{JobKey: []byte("nccl-grow-test-key-of-32-bytes!!"), JobID: "nccl-grow", ConnectTimeout: connect})
	if err != nil {
		t.Fatal(err)
	}
	grown := make([]nccl.Grown, size)
	for r := range grown {
		t.Cleanup(func() { nets[r].Listener.Close() }) // a process's that never came; else closed already
		cfg := nexar.Config{Net: nets[r], Network: "tcp", Options: nexar.Options{Timeout: time.Minute}}
		grown[r] = nccl.Grown{Size: size, ConnectTimeout: connect, Control: func(ctx context.Context) (comm.Communicator, error) {
			return nexar.Connect(ctx, cfg)
		}}
	}
	return grown
}

// NCCL communicators over the fake take newcomers in: every process is
// at the rank the rule gives it and the grown communicator passes the
// conformance suite on device buffers.
func TestGrowFake(t *testing.T) {
	for _, l := range []struct{ members, newcomers int }{{2, 1}, {3, 2}} {
		t.Run(fmt.Sprintf("%d+%d", l.members, l.newcomers), func(t *testing.T) {
			comms, dev := fakeWorld(t, l.members)
			grown := grownControls(t, l.members+l.newcomers, 30*time.Second)
			o := options(dev)
			o.Counts = []int{0, 1, 7, 4099}
			if raceEnabled {
				o.Counts = []int{1, 7, 1000}
			}
			commtest.RunGrow(t, comms, l.newcomers, func(ctx context.Context, r int) (comm.Communicator, error) {
				if r < len(comms) {
					return comms[r].(*nccl.Comm).Grow(ctx, grown[r])
				}
				return nccl.Join(ctx, grown[r], nccl.Config{Device: dev})
			}, o)
		})
	}
}

// A failed Grow fails on every member, naming what failed, and leaves
// the NCCL communicator usable.
func TestGrowFakeFailure(t *testing.T) {
	const members, size = 2, 4
	for _, tc := range []struct {
		name         string
		come         bool // the newcomer of rank 2 comes; the one of rank 3 never does
		who, size    int  // rank who passes a Grown of size ranks, if size is set
		want         string
		wantNewcomer string
	}{
		{name: "a newcomer never comes", come: true, want: "no connection from rank(s) [3]", wantNewcomer: "no connection from rank(s) [3]"},
		{name: "a smaller size", who: 1, size: 1, want: "Grown.Size is 1, smaller than the 2 of the communicator to grow"},
		{name: "sizes that differ", who: 0, size: 5, want: "the ranks gave different Grown.Size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, dev := fakeWorld(t, members)
			grown := grownControls(t, size, time.Second)
			commtest.RunGrowFailure(t, comms, size-members, func(ctx context.Context, r int) (comm.Communicator, error) {
				g := grown[r]
				if tc.size != 0 && r == tc.who {
					g.Size = tc.size
				}
				switch {
				case r < members:
					return comms[r].(*nccl.Comm).Grow(ctx, g)
				case r == 2 && tc.come:
					return nccl.Join(ctx, g, nccl.Config{Device: dev})
				}
				return nil, nil
			}, tc.want, tc.wantNewcomer, commtest.Options{Timeout: time.Minute, Memory: dev})
		})
	}
}

// A member that is gone before it grows (its communicator closed, as its
// process's would be, and it never calls Grow): every other member's Grow
// ends with an error that names it, and the newcomer's Join ends too, at
// its ConnectTimeout at the latest.
func TestGrowFakeMemberGone(t *testing.T) {
	const members, size, gone, connect = 3, 4, 1, 2 * time.Second
	comms, dev := fakeWorld(t, members)
	grown := grownControls(t, size, connect)
	commtest.RunGrowMemberGone(t, comms, size-members, gone, comm.Communicator.Close, func(ctx context.Context, r int) (comm.Communicator, error) {
		if r < members {
			return comms[r].(*nccl.Comm).Grow(ctx, grown[r])
		}
		return nccl.Join(ctx, grown[r], nccl.Config{Device: dev})
	}, 3*connect)
}

// A Grow to the size there is gives every member its communicator back,
// which works on.
func TestGrowFakeWithNobody(t *testing.T) {
	comms, dev := fakeWorld(t, 3)
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			g, err := c.(*nccl.Comm).Grow(t.Context(), nccl.Grown{Size: 3, Control: func(context.Context) (comm.Communicator, error) {
				return nil, errors.New("Grow with nobody made a control")
			}})
			if err == nil && g != c {
				err = fmt.Errorf("Grow with nobody gave %p, want the communicator itself (%p)", g, c)
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	commtest.Run(t, comms, commtest.Options{Counts: []int{1, 7}, DTypes: []comm.DType{comm.F32, comm.I64}, Timeout: time.Minute, Memory: dev})
}
