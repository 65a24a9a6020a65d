package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/shm"
)

// TestOutlivesControlTimeout: a communicator lives longer than its
// control's own bound on one Recv (nexar's and shm's Timeout, 10 minutes
// by default): it stays healthy while idle for several of them, and so
// does a Split child, whose control is a Split of the control. The
// communicator watches its control for failures with a Recv that nobody
// answers, which that bound must not end, and which must still end when
// a peer aborts.
func TestOutlivesControlTimeout(t *testing.T) {
	const n, timeout = 3, 150 * time.Millisecond
	controls := map[string]func(t *testing.T) []comm.Communicator{
		"nexar": func(t *testing.T) []comm.Communicator {
			ws, err := nexar.NewMemoryWorld(n, nexar.Options{ProbeAfter: 50 * time.Millisecond, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			return asComms(ws)
		},
		"shm": func(t *testing.T) []comm.Communicator {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ss, err := shm.NewLocal(ctx, fmt.Sprintf("hiercomm-test-lifetime-%d", time.Now().UnixNano()), n, shm.Config{Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			return asComms(ss)
		},
	}
	for name, mk := range controls {
		t.Run(name, func(t *testing.T) {
			ctrls := mk(t)
			comms, dev := fakeWorldOver(t, ctrls, nccl.Config{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			children := make([]comm.Communicator, n)
			splitErrs := make([]error, n)
			done := make(chan struct{})
			for r, c := range comms {
				go func() {
					defer func() { done <- struct{}{} }()
					children[r], splitErrs[r] = c.Split(ctx, 0, r)
				}()
			}
			for range n {
				<-done
			}
			for r, err := range splitErrs {
				if err != nil {
					t.Fatalf("rank %d: Split: %v", r, err)
				}
			}
			t.Cleanup(func() {
				for _, c := range children {
					c.Close()
				}
			})
			time.Sleep(6 * timeout)
			for _, set := range [][]comm.Communicator{comms, children} {
				errs := make([]error, n)
				sums := make([]float32, n)
				for r, c := range set {
					go func() {
						defer func() { done <- struct{}{} }()
						b, err := dev.Alloc(comm.F32, 4)
						if err != nil {
							errs[r] = err
							return
						}
						defer dev.Free(b)
						vals := []float32{float32(r + 1), 0, 0, 0}
						host := comm.Host(vals)
						if errs[r] = dev.Write(b, host.Bytes()); errs[r] != nil {
							return
						}
						if errs[r] = c.AllReduce(ctx, b, b, comm.Sum); errs[r] != nil {
							return
						}
						errs[r] = dev.Read(host.Bytes(), b)
						sums[r] = vals[0]
					}()
				}
				for range n {
					<-done
				}
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: AllReduce after %v idle (control's Timeout %v): %v", r, 6*timeout, timeout, err)
					} else if sums[r] != 6 {
						t.Errorf("rank %d: AllReduce gave %v, want 6", r, sums[r])
					}
				}
			}
			// The watch itself, on a control of its own, idle for as long:
			// it does not end by the control's timeout, and it ends, with
			// the control's cause, when the control is aborted.
			watched := mk(t)
			defer func() {
				for _, c := range watched {
					c.Close()
				}
			}()
			ended, why := nccl.WatchControl(watched[0])
			select {
			case <-ended:
				t.Fatalf("the watch ended with the control idle: %v", why())
			case <-time.After(6 * timeout):
			}
			cause := errors.New("the operator cut the control")
			watched[0].Abort(cause)
			select {
			case <-ended:
				if err := why(); !errors.Is(err, cause) {
					t.Errorf("the watch of an aborted control ended with %v, want the abort's cause", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the watch did not end within 10s of its control's abort")
			}
		})
	}
}

// asComms is cs as Communicators.
func asComms[C comm.Communicator](cs []C) []comm.Communicator {
	out := make([]comm.Communicator, len(cs))
	for r, c := range cs {
		out[r] = c
	}
	return out
}
