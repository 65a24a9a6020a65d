package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leave leaves the world gracefully: it gossips a leave notice (the others
// log the departure and raise no Failure), tells memberlist, waiting for
// both to go out at most until ctx's deadline (5s without one; not at all
// if ctx is already done), and shuts gossip down, closing the sockets. From
// its start no failure is recorded and no callback called. Leave is
// idempotent: later calls return the first one's result.
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
	if ctx.Err() == nil && time.Until(deadline) > 0 {
		if c.ml.NumMembers() > 1 {
			// The notice goes first: memberlist's own leave message
			// cannot be told from a death (see failure.go).
			// At the end of a job everyone leaves at once: stop waiting
			// for the notice to go out once nobody is left to hear it.
			wait := time.NewTimer(time.Until(deadline))
			poll := time.NewTicker(c.cfg.Detector.GossipInterval)
			sent := c.view.announceLeave()
		notice:
			for {
				select {
				case <-sent:
					break notice
				case <-poll.C:
					if c.view.nobodyListening() || c.ml.NumMembers() <= 1 {
						break notice
					}
				case <-wait.C:
					break notice
				case <-ctx.Done():
					break notice
				}
			}
			wait.Stop()
			poll.Stop()
		}
		if left := time.Until(deadline); ctx.Err() == nil && left > 0 && !c.view.nobodyListening() {
			if err := c.ml.Leave(left); err != nil {
				errs = append(errs, fmt.Errorf("cluster: leave: %w (the others may see this process's exit as a failure)", err))
			}
		}
	}
	if err := c.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: shut down gossip: %w", err))
	}
	return errors.Join(errs...)
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

// crash stops gossip without telling anyone, as a killed process would:
// the others' failure detectors must find out. For tests.
func (c *Cluster) crash() {
	c.view.close()
	c.disp.stop()
	if c.markDown() {
		c.ml.Shutdown()
	}
}
