package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/topology"
)

// form runs the join loop until the world is complete, and records it.
func (c *Cluster) form(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
	defer cancel()

	seeds := c.seedStatuses()
	grace := c.grace()
	var (
		nextJoin     = start
		backoff      = 50 * time.Millisecond
		resync       = min(resyncRounds*c.cfg.Detector.GossipInterval, rejoinInterval)
		lastProgress = start.Add(-progressMinGap) // the first line at once
		lastCount    = 0
		timer        = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		now := time.Now()
		topo, wake, err := c.view.evaluate(now, grace)
		if err != nil {
			return c.joinError(err, start, seeds)
		}
		if topo != nil {
			c.formed(topo, start)
			return nil
		}
		count := c.view.aliveCount()
		if (count != lastCount && now.Sub(lastProgress) >= progressMinGap) || now.Sub(lastProgress) >= progressEvery {
			// The first line is a start-up line of every rank (Debug);
			// later ones say that this rank is still waiting (Info).
			level := slog.LevelInfo
			if lastCount == 0 {
				level = slog.LevelDebug
			}
			c.log.Log(ctx, level, fmt.Sprintf("cluster: %d/%d ranks joined", count, c.cfg.WorldSize),
				"job", c.cfg.JobID, "waited", now.Sub(start).Round(time.Millisecond))
			lastProgress, lastCount = now, count
		}
		if c.cfg.WorldSize > 1 && !now.Before(nextJoin) {
			joined, err := c.contactSeeds(ctx, seeds)
			if err != nil {
				return c.joinError(err, start, seeds)
			}
			if joined {
				// Members that reached the seeds after this exchange
				// come by gossip, which at start-up, when every member
				// knows few others, can miss this process: each member
				// passes a newcomer on a few times, to random members
				// it knows. The seeds know them: ask again soon, then
				// twice as late each time, up to rejoinInterval.
				nextJoin, backoff = time.Now().Add(resync), 50*time.Millisecond
				resync = min(2*resync, rejoinInterval)
			} else {
				nextJoin, backoff = time.Now().Add(backoff), min(2*backoff, maxSeedBackoff)
			}
			continue // evaluate what the join brought
		}
		next := nextJoin
		if c.cfg.WorldSize == 1 {
			next = now.Add(progressEvery)
		}
		if count != lastCount {
			next = minTime(next, lastProgress.Add(progressMinGap))
		}
		next = minTime(next, lastProgress.Add(progressEvery))
		if !wake.IsZero() {
			next = minTime(next, wake)
		}
		timer.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-c.view.changed:
		case <-timer.C:
		case <-ctx.Done():
			return c.joinError(c.incomplete(ctx, start), start, seeds)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// formed records the topology and logs it.
func (c *Cluster) formed(topo *topology.Topology, start time.Time) {
	c.topo = topo
	for _, m := range topo.Members() {
		if m.Name == c.name {
			c.rank = m.Rank
		}
	}
	summary, table, _ := strings.Cut(topo.String(), "\n")
	// Every rank's line at Debug; rank 0's, the world's summary, at Info.
	level := slog.LevelDebug
	if c.rank == 0 {
		level = slog.LevelInfo
	}
	c.log.Log(context.Background(), level, fmt.Sprintf("cluster: %d/%d ranks joined; world formed: %s", topo.Size(), c.cfg.WorldSize, summary),
		"job", c.cfg.JobID, "rank", c.rank, "name", c.name, "waited", time.Since(start).Round(time.Millisecond))
	// The table one row a line, as a reader of the log sees a table
	// (a handler that quotes would write one line of \n escapes).
	for line := range strings.SplitSeq(table, "\n") {
		c.log.Debug("cluster: topology: " + line)
	}
}

// seedStatuses are the join loops' record of each seed, none tried yet.
func (c *Cluster) seedStatuses() []*seedStatus {
	seeds := make([]*seedStatus, len(c.cfg.Seeds))
	for i, s := range c.cfg.Seeds {
		seeds[i] = &seedStatus{seed: s}
	}
	return seeds
}
