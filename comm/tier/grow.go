package tier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// Growth is how a tier's communicator takes newcomers in when it was
// built standalone, from a static configuration (nexar's Comm.Grow and
// Join, shm's): the members, who called their Grow, and the newcomers,
// who called their Join, each build their end of the grown communicator
// (Connect) from the grown configuration, and meet in it.
//
// A tier's Grow first checks the configuration it was given and agrees
// over the old communicator (Agree, with Fields) that every member can
// grow, and with which configuration; then calls Member. Its Join calls
// Newcomer. The steps after that are the same in every tier:
//
//  1. every process builds its end (Connect), and runs the grown
//     communicator's first collective: Agree on Fields, over it, so a
//     newcomer whose configuration differs fails everyone's Grow;
//  2. the members agree over the old communicator on the outcome, so
//     every member keeps the grown communicator or every member gets an
//     error and keeps the old one (closing the grown one);
//  3. rank 0 of the grown communicator, a member, tells the newcomers
//     that the members kept it (a Broadcast on it); when the members
//     gave it up, their close ends the newcomers' wait with an error;
//  4. the members close the old communicator.
//
// Step 3 can fail after step 2 succeeded (a process dies in it): the
// members then hold a grown communicator that its next call reports the
// failure of, as after any failure (Warn hears of it).
type Growth struct {
	// Fields are what every process of the grown communicator gives
	// alike, each process its own values.
	Fields []Field
	// Connect builds this process's end of the grown communicator (the
	// tier's constructor, with the grown configuration); it returns
	// within Bound (or ctx).
	Connect func(ctx context.Context) (comm.Communicator, error)
	// Bound bounds each of the steps on the grown communicator (its
	// ConnectTimeout): the first collective, and the newcomers' wait for
	// rank 0's word.
	Bound time.Duration
	// Control, if set, is the communicator a communicator's agreements
	// go over (Agree and rank 0's word exchange host memory): a GPU
	// communicator's host control. If nil, the communicator itself.
	Control func(c comm.Communicator) comm.Communicator
	// Warn, if set, hears of a member's failure in step 3, and of an
	// error of closing the old communicator in step 4.
	Warn func(err error)
}

// Member is a member's part of steps 1 to 4, after its first agreement
// over old; it returns the grown communicator, or an error, alike on
// every member. On error old is left as it was.
func (g Growth) Member(ctx context.Context, old comm.Communicator) (comm.Communicator, error) {
	grown, err := g.connect(ctx)
	if err := Agree(ctx, g.over(old), err); err != nil {
		if grown != nil {
			grown.Close() // the newcomers' wait for rank 0's word ends
		}
		return nil, fmt.Errorf("building the grown communicator: %w", err)
	}
	if err := g.verdict(ctx, grown); err != nil && g.Warn != nil {
		g.Warn(fmt.Errorf("telling the newcomers that the members keep the grown communicator: %w", err))
	}
	if err := old.Close(); err != nil && g.Warn != nil {
		g.Warn(fmt.Errorf("closing the communicator grown out of: %w", err))
	}
	return grown, nil
}

// Newcomer is a newcomer's part of steps 1 to 3.
func (g Growth) Newcomer(ctx context.Context) (comm.Communicator, error) {
	grown, err := g.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := g.verdict(ctx, grown); err != nil {
		grown.Close()
		return nil, fmt.Errorf("the members did not confirm the grown communicator (their Grow failed, or its rank 0 died): %w", err)
	}
	return grown, nil
}

// connect is step 1; on error grown is nil.
func (g Growth) connect(ctx context.Context) (grown comm.Communicator, err error) {
	grown, err = g.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.Bound)
	defer cancel()
	if err := Agree(ctx, g.over(grown), nil, g.Fields...); err != nil {
		grown.Close()
		return nil, fmt.Errorf("the grown communicator's first collective: %w", err)
	}
	return grown, nil
}

// verdict is step 3.
func (g Growth) verdict(ctx context.Context, grown comm.Communicator) error {
	ctx, cancel := context.WithTimeout(ctx, g.Bound)
	defer cancel()
	over := g.over(grown)
	ok := []uint8{0}
	if over.Rank() == 0 {
		ok[0] = 1
	}
	if err := over.Broadcast(ctx, comm.Host(ok), 0); err != nil {
		return err
	}
	if ok[0] != 1 {
		return errors.New("rank 0 sent no word")
	}
	return nil
}

// over is the communicator c's agreements go over (Control).
func (g Growth) over(c comm.Communicator) comm.Communicator {
	if g.Control == nil {
		return c
	}
	return g.Control(c)
}
