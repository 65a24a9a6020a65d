package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leave leaves the world gracefully: it gossips a leave notice (the others
// log the departure and raise no Failure) with memberlist's own leave
// message beside it, waits until the notice has gone out as often as
// gossip requires or nobody is left to hear it (every other world member
// has left or failed, or memberlist counts no other member), at most until
// ctx's deadline (5s without one; not at all if ctx is already done), and
// shuts gossip down, closing the sockets. It fails if the wait ended
// before the notice went out while some member could still hear it: the
// others may then count this process's exit as a failure. From its start
// no failure is recorded and no callback called. Leave is idempotent:
// later calls return the first one's result.
func (c *Cluster) Leave(ctx context.Context) error {
	c.leaveOnce.Do(func() { c.leaveErr = c.leave(ctx) })
	return c.leaveErr
}

func (c *Cluster) leave(ctx context.Context) error {
	c.view.close()
	c.disp.stop()
	if !c.markDown() {
		return nil
	}
	deadline := time.Now().Add(leaveTimeout)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	var errs []error
	if ctx.Err() == nil && time.Until(deadline) > 0 && c.audience() {
		if err := c.announceDeparture(ctx, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: shut down gossip: %w", err))
	}
	return errors.Join(errs...)
}

// audience reports whether some other member may still hear this process
// leave: memberlist counts another member alive (or suspect), and not
// every other world member is known to have left or failed.
func (c *Cluster) audience() bool {
	return c.ml.NumMembers() > 1 && !c.view.nobodyListening()
}

// announceDeparture queues the leave notice and memberlist's leave message,
// and waits until the notice has gone out, nobody is left to hear it, or
// the deadline.
//
// memberlist's Leave waits for its own message alone, and it looks for a
// member to gossip it to only when it is called: when the others leave
// in the meantime, as every rank does at the end of a job, no packet ever
// carries the message (memberlist gossips to no member that left) and
// Leave waits out its whole timeout, then fails. So Leave is called here
// only to queue the message, and the wait is the notice's, which ends once
// nobody is left to hear it. The notice is queued first, so that
// memberlist's message, which the others cannot tell from a death
// (failure.go), does not go out ahead of it: the two travel in the same
// gossip packets, memberlist's first (it packs its own messages before the
// notices), and a member that takes memberlist's message finds the notice
// right after it, or waits leaveWindow for one.
func (c *Cluster) announceDeparture(ctx context.Context, deadline time.Time) error {
	start := time.Now()
	sent := c.view.announceLeave()
	_ = c.ml.Leave(time.Nanosecond) // only queues: its error is the wait's timeout
	late := func() error {
		return fmt.Errorf("cluster: leave: the leave notice had not gone out %v after Leave began (the others may see this process's exit as a failure)",
			time.Since(start).Round(time.Millisecond))
	}
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	poll := time.NewTicker(c.cfg.Detector.GossipInterval)
	defer poll.Stop()
	for {
		select {
		case <-sent:
			return nil
		case <-poll.C:
			if !c.audience() {
				return nil
			}
		case <-wait.C:
			return late()
		case <-ctx.Done():
			return late()
		}
	}
}

// markDown records that memberlist is being shut down; it returns false if
// it already was.
func (c *Cluster) markDown() bool {
	c.downMu.Lock()
	defer c.downMu.Unlock()
	if c.down {
		return false
	}
	c.down = true
	return true
}

// Close is Leave with a 2s timeout.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return c.Leave(ctx)
}
