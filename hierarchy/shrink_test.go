package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// Ranks close their hierarchy while the others are inside an AllReduce;
// every survivor gets the failure, Shrinks, and gets the same members,
// renumbered in order, on a recomputed topology: a hierarchy again where
// several nodes keep several ranks (heterogeneous after the loss); where
// one node is left, its shared memory (Config.NewIntra), or else the flat
// world; with shared memory in the nodes again where Config.NewIntra
// makes it. Its collectives are exact. With
// nothing failed, Shrink is a copy of the whole group.
func TestShrinkHierarchy(t *testing.T) {
	for _, tc := range []struct {
		layout  layout
		intra   string
		victims []int
		flat    bool // the shrunk communicator is not a hierarchy
	}{
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", []int{3}, false},
		{layout{name: "2x4", perNode: []int{4, 4}}, "nexar", []int{1, 6}, false},
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", []int{2, 3}, true},
		{layout{name: "2x3", perNode: []int{3, 3}}, "nexar", []int{3, 4, 5}, true},
		{layout{name: "2x2-cyclic", perNode: []int{2, 2}, cyclic: true}, "shm", []int{0}, false},
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", nil, false},
	} {
		t.Run(fmt.Sprintf("%s/%s/%v", tc.layout.name, tc.intra, tc.victims), func(t *testing.T) {
			var cfg hierarchy.Config
			if tc.intra == "shm" {
				cfg.NewIntra = shmIntra
			}
			cs := build(t, tc.layout, tc.intra, cfg)
			var survivors []int
			for r := range cs {
				if !slices.Contains(tc.victims, r) {
					survivors = append(survivors, r)
				}
			}
			errs := each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if slices.Contains(tc.victims, r) {
					time.Sleep(50 * time.Millisecond) // the others are waiting for it
					return c.Close()
				}
				x := make([]float32, 1<<12)
				err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
				if (err == nil) != (len(tc.victims) == 0) || err != nil && !errors.Is(err, comm.ErrPeerFailed) {
					return fmt.Errorf("AllReduce: %v", err)
				}
				s, err := c.Shrink(ctx)
				if err != nil {
					return err
				}
				defer s.Close()
				sh, isH := s.(*hierarchy.Comm)
				if isH == tc.flat {
					return fmt.Errorf("shrunk to a %T, want no hierarchy: %v", s, tc.flat)
				}
				if !isH && isSHM(s) != (tc.intra == "shm") {
					return fmt.Errorf("shrunk to one node's %T, in a hierarchy whose parts were %s", s, tc.intra)
				}
				if isH {
					if intra, _ := sh.Parts(); isSHM(intra) != (tc.intra == "shm") {
						return fmt.Errorf("the shrunk intra-node part is a %T, in a hierarchy whose parts were %s", intra, tc.intra)
					}
				}
				return commtest.ShrunkRank(ctx, s, r, survivors)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// shmIntra is Config.NewIntra for the tests: the node's survivors join
// shared memory in a namespace of the generation's.
func shmIntra(ctx context.Context, t *topology.Topology, rank int, generation string) (comm.Communicator, error) {
	h := fnv.New64a()
	h.Write([]byte(generation))
	ns := fmt.Sprintf("hiertest-%d-%x-%d", os.Getpid(), h.Sum64(), t.NodeOf(rank))
	return shm.New(ctx, shm.Config{Namespace: ns, Rank: t.LocalRank(rank), Size: t.LocalSize(rank), Timeout: time.Minute, FailureTimeout: 10 * time.Second, EagerBytes: -1})
}

// Two failures one after the other on 2 nodes x 4 with shared memory:
// rank 6 closes, the survivors Shrink; then old rank 1 closes the shrunk
// hierarchy, and the rest Shrink again, with fresh shared memory each
// time.
func TestShrinkHierarchyTwice(t *testing.T) {
	cs := build(t, layout{name: "2x4", perNode: []int{4, 4}}, "shm", hierarchy.Config{NewIntra: shmIntra})
	errs := each(cs, func(r int, c comm.Communicator) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r == 6 {
			return c.Close()
		}
		if err := c.Barrier(ctx); !errors.Is(err, comm.ErrPeerFailed) {
			return fmt.Errorf("Barrier without rank 6: %v", err)
		}
		s1, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		defer s1.Close()
		if err := commtest.ShrunkRank(ctx, s1, r, []int{0, 1, 2, 3, 4, 5, 7}); err != nil {
			return err
		}
		if err := s1.Barrier(ctx); err != nil { // every check done before rank 1 goes
			return err
		}
		if r == 1 {
			return s1.Close()
		}
		if err := s1.Barrier(ctx); !errors.Is(err, comm.ErrPeerFailed) {
			return fmt.Errorf("Barrier without old rank 1: %v", err)
		}
		s2, err := s1.Shrink(ctx)
		if err != nil {
			return err
		}
		defer s2.Close()
		h2, ok := s2.(*hierarchy.Comm)
		if !ok {
			return fmt.Errorf("shrunk twice to a %T, want a hierarchy", s2)
		}
		if intra, _ := h2.Parts(); !isSHM(intra) {
			return fmt.Errorf("the intra-node part after two shrinks is a %T", intra)
		}
		return commtest.ShrunkRank(ctx, s2, s1.Rank(), []int{0, 2, 3, 4, 5, 6})
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func isSHM(c comm.Communicator) bool {
	_, ok := c.(*shm.Comm)
	return ok
}

// A hierarchy of GPU nodes (fake NCCL within nodes, nexar staged through
// host memory between them) loses rank 3: the survivors Shrink its staged
// world and get a hierarchy of three whose collectives on device buffers
// pass the conformance suite.
func TestShrinkDeviceHierarchy(t *testing.T) {
	cs, dev := buildDevice(t, layout{name: "2x2", perNode: []int{2, 2}}, hierarchy.Config{}, ownStager)
	shrunk := make([]comm.Communicator, 3)
	errs := each(cs, func(r int, c comm.Communicator) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r == 3 {
			return c.Close()
		}
		if err := c.Barrier(ctx); !errors.Is(err, comm.ErrPeerFailed) {
			return fmt.Errorf("Barrier without rank 3: %v", err)
		}
		s, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		shrunk[r] = s
		if _, ok := s.(*hierarchy.Comm); !ok || s.Rank() != r || s.Size() != 3 {
			return fmt.Errorf("shrunk to %T, rank %d of %d; want a hierarchy, rank %d of 3", s, s.Rank(), s.Size(), r)
		}
		return nil
	})
	defer closeAll(shrunk)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	o := deviceOptions(dev)
	o.Counts = []int{1, 7}
	commtest.Run(t, shrunk, o)
}
