package nccl

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Grown is what an NCCL communicator grows to (Comm.Grow, and a
// newcomer's Join). Every process of the grown communicator passes the
// same Size.
type Grown struct {
	// Size is the grown communicator's: the members keep their ranks, the
	// newcomers take the ranks after them. Required.
	Size int
	// Control makes this process's end of the grown control, the host
	// communicator of every rank of the grown one, with its rank numbers,
	// as New takes it: the control tier's constructor with the grown
	// configuration (nexar.Connect, shm.New; not their Grow or Join: the
	// NCCL communicator's Grow makes the agreements, over the controls).
	// It must return within its connect timeout. Required.
	Control func(ctx context.Context) (comm.Communicator, error)
	// ConnectTimeout bounds the grown communicator's first collective and
	// a newcomer's wait for the members' word (tier.Growth). If zero,
	// tier.DefaultConnectTimeout (60s).
	ConnectTimeout time.Duration
}

// Grow takes newcomers into an NCCL communicator built standalone (New
// over a control the caller made): every member of c calls it with
// grown, and each newcomer calls Join with an equal grown and its own
// Config. As Shrink does, it makes the grown communicator as New does,
// over the grown control (Grown.Control): a fresh unique id and
// ncclCommInitRankScalable, with c's Config (its device and stream); no
// ncclCommGrow is needed. The agreements are tier.Growth's, over the
// controls (old and grown): a member's bad Grown (a Size below c's) gives
// every member an error naming it, Sizes that differ an error saying so,
// and a newcomer that never comes or dies fails every member's Grow
// within the grown control's connect timeout and leaves c usable. On
// success Grow closes c (and its control). With grown.Size equal to c's
// size, every member gets c itself back at once.
//
// Call it when no collective of c is in flight.
func (c *Comm) Grow(ctx context.Context, grown Grown) (*Comm, error) {
	err := grown.check()
	if err == nil && grown.Size < c.size {
		err = fmt.Errorf("Grown.Size is %d, smaller than the %d of the communicator to grow (Grow does not shrink: use Shrink)", grown.Size, c.size)
	}
	fail := func(err error) (*Comm, error) {
		return nil, fmt.Errorf("nccl: rank %d of %s: Grow from %d to %d ranks: %w", c.rank, c.cfg.Name, c.size, grown.Size, err)
	}
	fields := grown.fields()
	if err := tier.Agree(ctx, c.control, err, fields...); err != nil {
		return fail(err)
	}
	if grown.Size == c.size {
		return c, nil
	}
	cfg := c.cfg
	cfg.Name = fmt.Sprintf("%s/grow(%d of %d)", c.cfg.Name, c.size, grown.Size)
	g, err := grown.growth(cfg, fields).Member(ctx, c)
	if err != nil {
		return fail(err)
	}
	return g.(*Comm), nil
}

// Join makes this process a newcomer of an NCCL communicator that grows
// (Comm.Grow): every member calls Grow, and each newcomer Join, with an
// equal grown; cfg is this process's Config, as New takes it. It returns
// the grown communicator once every process has made it, agreed on the
// Size and heard the members' word that they keep it; or an error, when
// a process did not come (within the grown control's connect timeout),
// a Size differs, or the members gave the Grow up.
func Join(ctx context.Context, grown Grown, cfg Config) (*Comm, error) {
	err := grown.check()
	if err == nil {
		var g comm.Communicator
		if g, err = grown.growth(cfg, grown.fields()).Newcomer(ctx); err == nil {
			return g.(*Comm), nil
		}
	}
	return nil, fmt.Errorf("nccl: Join a communicator growing to %d ranks: %w", grown.Size, err)
}

// check names what is missing of g.
func (g Grown) check() error {
	switch {
	case g.Size < 1:
		return &comm.ArgError{Arg: "Grown.Size", Problem: fmt.Sprintf("%d: give the grown communicator's size", g.Size)}
	case g.Control == nil:
		return &comm.ArgError{Arg: "Grown.Control", Problem: "is nil: give the constructor of this process's end of the grown control"}
	case g.ConnectTimeout < 0:
		return &comm.ArgError{Arg: "Grown.ConnectTimeout", Problem: fmt.Sprintf("%v is negative", g.ConnectTimeout)}
	}
	return nil
}

// fields are what every process of the grown communicator gives alike.
func (g Grown) fields() []tier.Field {
	return []tier.Field{{Name: "Grown.Size", Value: fmt.Appendf(nil, "%d", g.Size)}}
}

// growth is how a process of the grown communicator meets the others
// (tier.Growth): its end of the grown control, New over it, and the
// agreements over the controls.
func (g Grown) growth(cfg Config, fields []tier.Field) tier.Growth {
	return tier.Growth{
		Fields: fields,
		Connect: func(ctx context.Context) (comm.Communicator, error) {
			control, err := g.Control(ctx)
			if err != nil {
				return nil, fmt.Errorf("making the grown control: %w", err)
			}
			if control.Size() != g.Size {
				control.Close()
				return nil, fmt.Errorf("the grown control has %d ranks, Grown.Size is %d", control.Size(), g.Size)
			}
			c, err := New(ctx, control, cfg) // it owns control, and closes it on error
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		Control: func(c comm.Communicator) comm.Communicator { return c.(*Comm).control },
		Bound:   cmp.Or(g.ConnectTimeout, tier.DefaultConnectTimeout),
		Warn: func(err error) {
			cmp.Or(cfg.Logger, slog.Default()).Warn("nccl: Grow", "err", err)
		},
	}
}
