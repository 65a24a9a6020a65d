package nexar

import (
	"fmt"

	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/hiercomm/hiercomm/nexar/transport/mem"
)

// worldID is the id of the communicator of a whole world; the ids of its
// splits are derived from it.
const worldID = 1

// NewMemoryWorld returns size communicators, one per rank, joined by the
// in-memory transport: for tests, and to simulate large worlds in one
// process. Closing one rank's communicator makes it look dead to the others.
func NewMemoryWorld(size int, opt Options) ([]*Comm, error) {
	if size < 1 {
		return nil, fmt.Errorf("nexar.NewMemoryWorld: size %d, want ≥ 1", size)
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	ws := make([]*world, size)
	hs := make([]transport.Handler, size)
	for i := range ws {
		ws[i] = newWorld(opt.Logger, i, size)
		hs[i] = ws[i]
	}
	for i, tr := range mem.NewTransports(hs) {
		ws[i].attach(tr)
	}
	return worldComms(ws, opt)
}

func worldComms(ws []*world, opt Options) ([]*Comm, error) {
	comms := make([]*Comm, len(ws))
	for i, w := range ws {
		c, err := newWorldComm(w, opt)
		if err != nil {
			return nil, err
		}
		comms[i] = c
	}
	return comms, nil
}

// newWorldComm makes the communicator of every rank of w's world.
func newWorldComm(w *world, opt Options) (*Comm, error) {
	members := make([]int, w.size)
	for i := range members {
		members[i] = i
	}
	c := newComm(w, worldID, "world", members, opt, true)
	if err := w.register(c); err != nil {
		return nil, err
	}
	return c, nil
}
