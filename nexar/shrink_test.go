package nexar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar/transport/mem"
)

// shrinkAll runs Shrink on the given ranks of cs and checks each result
// (commtest.ShrunkRank against want); it closes what Shrink made.
func shrinkAll(t *testing.T, cs []*Comm, ranks, want []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		if !slices.Contains(ranks, r) {
			return nil
		}
		s, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		return commtest.ShrunkRank(ctx, s, r, want)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A rank dies mid-AllReduce: the survivors get the failure, Shrink, and
// run exact collectives on the four that are left, renumbered in order.
func TestShrinkAfterAKill(t *testing.T) {
	cs := memWorld(t, 5, Options{Timeout: time.Minute})
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		if r == 2 {
			c.w.tr.(*mem.Transport).Kill()
			return nil
		}
		x := make([]float32, 1<<12)
		if err := c.AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum); !errors.Is(err, comm.ErrPeerFailed) {
			return fmt.Errorf("AllReduce with rank 2 dead: %v, want ErrPeerFailed", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	shrinkAll(t, cs, []int{0, 1, 3, 4}, []int{0, 1, 3, 4})
	// The old communicator stays aborted.
	if err := cs[0].Barrier(context.Background()); !errors.Is(err, comm.ErrAborted) {
		t.Errorf("Barrier on the old communicator: %v, want ErrAborted", err)
	}
}

// With nothing failed, Shrink is a copy of the whole group, and the old
// communicator still works.
func TestShrinkWithNoFailureCopiesTheGroup(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	shrinkAll(t, cs, []int{0, 1, 2}, []int{0, 1, 2})
	allReduceWorks(t, cs)
}

// Survivors that know of different failures agree on their union: rank
// 4 is known dead only to rank 0 (an outside detector told it alone) and
// rank 1 is dead for all; rank 4, alive and given up, learns so.
func TestShrinkAgreesOnTheUnionOfWhatEachKnows(t *testing.T) {
	cs := memWorld(t, 5, Options{Timeout: time.Minute})
	cs[1].w.tr.(*mem.Transport).Kill()
	cs[0].PeerFailed(4, errors.New("the test's detector says so"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		switch r {
		case 1:
			return nil
		case 4:
			if _, err := c.Shrink(ctx); !errors.Is(err, comm.ErrPeerFailed) {
				return fmt.Errorf("Shrink on the rank given up: %v, want ErrPeerFailed", err)
			}
			return nil
		}
		s, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		return commtest.ShrunkRank(ctx, s, r, []int{0, 2, 3})
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A rank that dies during the agreement: the others still agree, in
// bounded time (a death at any point of the rounds: a few trials).
func TestShrinkSurvivesADeathDuringTheAgreement(t *testing.T) {
	for trial := range 4 {
		cs := memWorld(t, 5, Options{Timeout: time.Minute})
		cs[0].w.tr.(*mem.Transport).Kill()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		members := make([][]int, len(cs))
		errs := onEveryRank(cs, func(r int, c *Comm) error {
			switch r {
			case 0:
				return nil
			case 3:
				time.Sleep(time.Duration(trial) * time.Millisecond)
				c.w.tr.(*mem.Transport).Kill()
				return nil
			}
			s, err := c.Shrink(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			sc := s.(*Comm)
			members[r] = sc.members
			if slices.Contains(sc.members, 3) {
				// Rank 3 died after some had decided: the collectives
				// fail, naming it, and a second Shrink removes it.
				if err := s.Barrier(ctx); !errors.Is(err, comm.ErrPeerFailed) {
					return fmt.Errorf("Barrier with rank 3 dead: %v", err)
				}
				s2, err := s.Shrink(ctx)
				if err != nil {
					return err
				}
				defer s2.Close()
				return commtest.ShrunkRank(ctx, s2, r, []int{1, 2, 4})
			}
			return commtest.ShrunkRank(ctx, s, r, []int{1, 2, 4})
		})
		cancel()
		for r, err := range errs {
			if err != nil {
				t.Errorf("trial %d: rank %d: %v", trial, r, err)
			}
		}
		if !slices.Equal(members[1], members[2]) || !slices.Equal(members[1], members[4]) {
			t.Errorf("trial %d: the survivors disagree: %v", trial, members)
		}
	}
}

// A survivor that never calls Shrink makes it fail on every rank by the
// deadline, with an error that names it; none of them hangs, and none
// takes the late rank for failed.
func TestShrinkFailsInBoundedTimeWithoutEveryone(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		if r == 2 {
			return nil
		}
		s, err := c.Shrink(ctx)
		if err == nil {
			s.Close()
			return errors.New("Shrink succeeded without rank 2")
		}
		if !errors.Is(err, comm.ErrTimeout) && !errors.Is(err, comm.ErrPeerAbandoned) {
			return fmt.Errorf("want a timeout, got %v", err)
		}
		if r == 0 && !strings.Contains(err.Error(), "rank 2 had not joined") {
			return fmt.Errorf("the error does not name rank 2: %v", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestShrinkNamesEveryRankNotHeardFrom: rank 0 calls Shrink alone; its
// deadline error names both ranks that never joined, and blames the first.
func TestShrinkNamesEveryRankNotHeardFrom(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	err := shrinkAlone(t, cs[0], 300*time.Millisecond)
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "rank 1 and rank 2 had not joined the agreement") || comm.PeerOf(err) != 1 {
		t.Errorf("Shrink of rank 0 alone: %v (peer %d); want a timeout that names rank 1 and rank 2, blaming rank 1", err, comm.PeerOf(err))
	}
}

// TestShrinkDeadlineLeavesOutTheDead: rank 2 dies while rank 0 waits,
// alone, for rank 1 in the agreement; the deadline's error names rank 1,
// not rank 2, whose death the agreement counts as a failure, not a
// lateness.
func TestShrinkDeadlineLeavesOutTheDead(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	go func() {
		time.Sleep(100 * time.Millisecond)
		cs[2].w.tr.(*mem.Transport).Kill()
	}()
	err := shrinkAlone(t, cs[0], 500*time.Millisecond)
	if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), ": rank 1 had not joined") || comm.PeerOf(err) != 1 {
		t.Errorf("Shrink of rank 0 alone, rank 2 dead: %v (peer %d); want a timeout that names rank 1 alone", err, comm.PeerOf(err))
	}
}

// shrinkAlone is the error of c's Shrink, called by c alone with a
// deadline d; it fails the test if the Shrink succeeds.
func shrinkAlone(t *testing.T, c *Comm, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := c.Shrink(ctx)
	if err == nil {
		s.Close()
		t.Fatalf("Shrink succeeded on rank %d alone", c.Rank())
	}
	return err
}

// Shrink of a Split child: the child's ranks are renumbered, not the
// world's; the world's transport is shared.
func TestShrinkOfASplitChild(t *testing.T) {
	cs := memWorld(t, 6, Options{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kids := make([]comm.Communicator, len(cs))
	defer func() {
		for _, k := range kids {
			if k != nil {
				k.Close()
			}
		}
	}()
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		var err error
		kids[r], err = c.Split(ctx, r%2, -r) // odd ranks: 5, 3, 1
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Split: %v", r, err)
		}
	}
	cs[3].w.tr.(*mem.Transport).Kill()
	errs = onEveryRank(cs, func(r int, c *Comm) error {
		if r%2 == 0 || r == 3 {
			return nil
		}
		s, err := kids[r].Shrink(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		return commtest.ShrunkRank(ctx, s, kids[r].Rank(), []int{0, 2}) // child ranks of 5 and 1
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// The agreement's frames: what decodes is what was encoded, and a
// malformed payload is an error, not a panic.
func TestShrinkFrameCoding(t *testing.T) {
	for _, m := range []shrinkMsg{
		{kind: shrinkRound}, {kind: shrinkRound, failed: []int{0, 3}}, {kind: shrinkDecided, failed: []int{2}},
		{kind: shrinkAbandoned, reason: "deadline", timeout: true}, {kind: shrinkAbandoned, canceled: true},
	} {
		got, err := decodeShrink(encodeShrink(m), 4)
		if err != nil || got.kind != m.kind || !slices.Equal(got.failed, m.failed) || got.reason != m.reason || got.timeout != m.timeout || got.canceled != m.canceled {
			t.Errorf("%+v: decoded %+v, %v", m, got, err)
		}
	}
	for _, p := range [][]byte{nil, {9}, {shrinkRound, 1, 0}, {shrinkRound, 4, 0, 0, 0}, {shrinkAbandoned}, {shrinkDecided, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}} {
		if _, err := decodeShrink(p, 2); err == nil {
			t.Errorf("%v: decoded", p)
		}
	}
}

// A rank whose context is canceled during Shrink: every rank's Shrink
// fails, in bounded time, ErrCanceled on that rank and a report of it on
// the others; none hangs.
func TestShrinkCanceledOnOneRank(t *testing.T) {
	cs := memWorld(t, 4, Options{Timeout: time.Minute})
	cs[3].w.tr.(*mem.Transport).Kill()
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		if r == 3 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r == 1 {
			cancel() // before it joins: the others wait for it in vain
		}
		s, err := c.Shrink(ctx)
		if err == nil {
			s.Close()
			return errors.New("Shrink succeeded with rank 1's context canceled")
		}
		if r == 1 && !errors.Is(err, comm.ErrCanceled) || r != 1 && !errors.Is(err, comm.ErrPeerAbandoned) {
			return fmt.Errorf("want ErrCanceled on rank 1, ErrPeerAbandoned elsewhere: %v", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// FuzzDecodeShrink: a Shrink frame's payload, as a peer sends it. The
// decoder must not panic, must keep every failed rank inside the
// communicator, and what it accepts must encode back to the same bytes.
func FuzzDecodeShrink(f *testing.F) {
	for _, m := range []shrinkMsg{{kind: shrinkRound, failed: []int{1, 3}}, {kind: shrinkDecided}, {kind: shrinkAbandoned, reason: "late", timeout: true}} {
		f.Add(encodeShrink(m), 4)
	}
	f.Add([]byte{shrinkRound, 0xff, 0xff, 0xff, 0x7f}, 8)
	f.Fuzz(func(t *testing.T, p []byte, size int) {
		size = 1 + (size&0x7fffffff)%64
		m, err := decodeShrink(p, size)
		if err != nil {
			return
		}
		for _, r := range m.failed {
			if r < 0 || r >= size {
				t.Fatalf("%x: failed rank %d outside a communicator of %d", p, r, size)
			}
		}
		if m.kind == shrinkAbandoned && p[1]&^3 != 0 {
			return // unknown flag bits are ignored
		}
		if got := encodeShrink(m); string(got) != string(p) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", p, m, got)
		}
	})
}
