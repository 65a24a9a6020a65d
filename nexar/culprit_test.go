package nexar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport/mem"
)

// blames checks that err is a peer failure whose culprit is rank (of the
// communicator that returned it), named first in the text.
func blames(err error, rank int, prefix string) error {
	var oe *comm.OpError
	if !errors.Is(err, comm.ErrPeerFailed) || !errors.As(err, &oe) {
		return fmt.Errorf("%v: want an *comm.OpError that matches ErrPeerFailed", err)
	}
	if r, ok := oe.Culprit(); !ok || r != rank {
		return fmt.Errorf("%v: Culprit() = %d, %v, want %d", err, r, ok, rank)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		return fmt.Errorf("%q: want the cause first, %q…", err, prefix)
	}
	return nil
}

// A rank dies mid-AllReduce: every survivor names it, whether it saw the
// death or heard of it from another survivor, and so do later calls.
func TestEverySurvivorNamesTheDeadRank(t *testing.T) {
	for trial := range 4 {
		cs := memWorld(t, 5, Options{Timeout: 30 * time.Second})
		errs := onEveryRank(cs, func(r int, c *Comm) error {
			if r == 1 {
				time.Sleep(time.Duration(trial) * 5 * time.Millisecond)
				c.w.tr.(*mem.Transport).Kill()
				return nil
			}
			x := make([]float32, 1<<16)
			if err := blames(c.AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum), 1, "rank 1 "); err != nil {
				return err
			}
			return blames(c.Barrier(context.Background()), 1, "rank 1 ")
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("trial %d: rank %d: %v", trial, r, err)
			}
		}
	}
}

// A Split child's failure names the child's rank (its world rank beside
// it), as does an abort a peer announces: the child's ranks are not the
// world's (keys reverse them here).
func TestChildFailureNamesTheChildsRank(t *testing.T) {
	cs := memWorld(t, 4, Options{Timeout: time.Minute})
	children := make([]comm.Communicator, len(cs))
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		var err error
		children[r], err = c.Split(context.Background(), 0, -r)
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	const closer = 3 // world rank 3 is child rank 0
	errs = onEveryRank(cs, func(r int, c *Comm) error {
		if r == closer {
			time.Sleep(50 * time.Millisecond)
			return children[r].Close()
		}
		x := make([]float32, 1<<16)
		return blames(children[r].AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum), 0, "rank 0 ")
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	// A clean close aborts nothing; the next call fails on the gone rank.
	errs = onEveryRank(cs, func(r int, c *Comm) error {
		if r == closer {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := blames(children[r].Barrier(ctx), 0, "rank 0 "); err != nil {
			return fmt.Errorf("the next call: %w", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for r, c := range children {
		if r != closer {
			c.Close()
		}
	}
}

// What a child's rank that saw the close reads names its world rank too.
func TestChildPeerErrorNamesTheWorldRank(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	children := make([]*Comm, len(cs))
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		ch, err := c.Split(context.Background(), 0, -r)
		children[r], _ = ch.(*Comm)
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	err := children[0].ownPeerError(&comm.PeerError{Peer: 2, Addr: "memory:2", Err: errors.New("killed")})
	if want := "rank 0 (world rank 2, memory:2) failed: killed; check that process's log"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	for _, c := range children {
		c.Close()
	}
}

// A composed communicator aborts a part with a cause that blames a rank
// in its own numbering (tier.FromOutside): the part's peers hear the same
// rank, marked as the composer's.
func TestAbortFromOutsideKeepsTheComposersCulprit(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	cause := &comm.PeerError{Peer: 42, Addr: "node 9, local 1", Err: errors.New("its process is gone")}
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		if r == 0 {
			time.Sleep(20 * time.Millisecond)
			c.Abort(cause)
			return nil
		}
		err := c.Barrier(context.Background())
		b, ok := comm.CulpritOf(err)
		if !errors.Is(err, comm.ErrPeerFailed) || !ok || b.Rank != 42 || !b.Outside || b.How != "its process is gone" {
			return fmt.Errorf("%v: blames %+v, %v; want rank 42 of the composer", err, b, ok)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
