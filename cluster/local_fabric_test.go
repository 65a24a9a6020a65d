package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// loopFabric is a Fabric without namespaces, for tests that need no root:
// rank (n, l) is 127.0.(10+l).(n+1) on loopback, Do runs fn here and
// counts the calls per node, and Wrap starts the program through env(1),
// which marks it with its node.
type loopFabric struct {
	layout []int
	env    string
	fail   int // Do fails for this node; -1: never

	mu    sync.Mutex // guards calls
	calls map[int]int
}

func newLoopFabric(t *testing.T, layout []int) *loopFabric {
	env, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env(1) to wrap the processes with:", err)
	}
	return &loopFabric{layout: layout, env: env, fail: -1, calls: map[int]int{}}
}

func (f *loopFabric) Addr(n, l int) string {
	if n < 0 || n >= len(f.layout) || l < 0 || l >= f.layout[n] {
		return ""
	}
	return fmt.Sprintf("127.0.%d.%d", 10+l, n+1)
}

func (f *loopFabric) Do(n int, fn func() error) error {
	f.mu.Lock()
	f.calls[n]++
	f.mu.Unlock()
	if n == f.fail {
		return fmt.Errorf("loopFabric: node %d is down", n)
	}
	return fn()
}

func (f *loopFabric) Wrap(n int) []string {
	if n < 0 || n >= len(f.layout) {
		return nil
	}
	return []string{f.env, fmt.Sprintf("FABRIC_NODE=%d", n)}
}

// fabricChild prints what a process of a fabric job was given, after
// checking that it holds its three launcher sockets.
const fabricChild = `for fd in 3 4 5; do [ -S /proc/self/fd/$fd ] || { echo "fd $fd is not a socket"; exit 1; }; done
echo "node=$FABRIC_NODE addr=$HIERCOMM_ADDR master=$MASTER_ADDR nodes=$SLURM_STEP_NODELIST nodename=$SLURMD_NODENAME svc=$HIERCOMM_K8S_SERVICE"`

func TestLocalJobOnAFabric(t *testing.T) {
	layout := []int{2, 2}
	for _, tc := range []struct {
		style, placement string
		want             func(f *loopFabric, node, local int) string // what the rank prints
	}{
		{"torchrun", "block", func(f *loopFabric, node, local int) string {
			return fmt.Sprintf("node=%d addr=%s master=%s nodes= nodename= svc=", node, f.Addr(node, local), f.Addr(0, 0))
		}},
		{"slurm", "cyclic", func(f *loopFabric, node, local int) string {
			return fmt.Sprintf("node=%d addr=%s master= nodes=%s,%s nodename=%s svc=", node, f.Addr(node, local), f.Addr(0, 0), f.Addr(1, 0), f.Addr(node, 0))
		}},
		{"kubernetes", "block", func(f *loopFabric, node, local int) string {
			return fmt.Sprintf("node=%d addr=%s master= nodes= nodename= svc=%s", node, f.Addr(node, local), f.Addr(0, 0))
		}},
	} {
		t.Run(tc.style, func(t *testing.T) {
			f := newLoopFabric(t, layout)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out strings.Builder // the launcher writes one line at a time, under one lock
			spec := LocalSpec{RanksPerNode: layout, Style: tc.style, Placement: tc.placement, Fabric: f,
				Path: "/bin/sh", Args: []string{"-c", fabricChild}, Stdout: &out, Stderr: &out}
			procs, err := spec.plan()
			if err != nil {
				t.Fatal(err)
			}
			job, err := StartLocal(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := job.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			for _, p := range procs {
				want := fmt.Sprintf("[rank %d] %s\n", p.rank, tc.want(f, p.node, p.local))
				if !strings.Contains(out.String(), want) {
					t.Errorf("rank %d (node %d, local %d): want the line %q in\n%s", p.rank, p.node, p.local, want, out.String())
				}
			}
			// Every socket (gossip and data, two per rank) was bound
			// inside its node.
			f.mu.Lock()
			defer f.mu.Unlock()
			for n, g := range layout {
				if f.calls[n] != 2*g {
					t.Errorf("node %d: %d sockets bound inside it, want %d", n, f.calls[n], 2*g)
				}
			}
		})
	}
}

func TestLocalFabricErrors(t *testing.T) {
	f := newLoopFabric(t, []int{2, 1})
	for _, tc := range []struct {
		layout []int
		want   string
	}{
		{[]int{2, 2}, `Fabric.Addr(1, 1) = ""`},
		{[]int{1, 1, 1}, "Fabric.Wrap(2) is empty"},
	} {
		spec := LocalSpec{RanksPerNode: tc.layout, Fabric: f, Path: "/bin/true"}
		if _, err := spec.plan(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a fabric of [2 1] for RanksPerNode %v: %v, want an error containing %q", tc.layout, err, tc.want)
		}
	}
	f.fail = 1
	_, err := StartLocal(context.Background(), LocalSpec{RanksPerNode: []int{2, 1}, Fabric: f, Path: "/bin/true"})
	if err == nil || !strings.Contains(err.Error(), "node 1 is down") {
		t.Errorf("StartLocal with a fabric whose Do fails: %v, want Do's error", err)
	}
	var le *LocalExitError
	if errors.As(err, &le) {
		t.Errorf("StartLocal started processes although binding failed: %v", err)
	}
}
