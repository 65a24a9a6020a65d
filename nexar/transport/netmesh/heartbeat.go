package netmesh

import (
	"fmt"
	"time"
)

// Heartbeats: the TCP transport's own silence detector. A stopped
// process's kernel keeps acknowledging its peers' data and keepalives, so
// TCP alone never sees a SIGSTOPped or hung rank (QUIC does: its idle
// timeout is the peers' own, and its keepalives are sent by the process).
// So every link that wrote nothing for a while writes a heartbeat record,
// and a link on which nothing at all arrived for longer than
// FailureTimeout fails its peer — the rule QUIC's idle timeout gives.
//
// One goroutine per mesh ticks every FailureTimeout/4: a link that
// carried no frame since the last tick gets a heartbeat (unless a writer
// holds it: that is traffic, or a stalled peer's full window), so a live
// peer hears something at least every FailureTimeout/2; a link that
// brought nothing for FailureTimeout fails, seen within FailureTimeout
// plus a tick. A tick that comes far late (this process was stopped or
// starved) judges no silence over the time it did not watch; if the
// peers expelled this rank meanwhile, its reads meet their expel records
// or ended links, and the stall watch names this rank (ErrStalled).

// silenceError is a link on which nothing arrived for d.
type silenceError struct {
	d       time.Duration
	timeout time.Duration
}

func (e *silenceError) Error() string {
	return fmt.Sprintf("no frame or heartbeat from it for %v (FailureTimeout %v): its process is stopped, hung or dead, or the network is cut",
		e.d.Round(time.Millisecond), e.timeout)
}

// heartbeats runs the heartbeat goroutine until stop is closed; the mesh
// counts it in loops (it reports failures to the handler).
func (m *mesh) heartbeats(stop <-chan struct{}) {
	defer m.loops.Done()
	every := m.cfg.FailureTimeout / 4
	t := time.NewTicker(every)
	defer t.Stop()
	var links []*link
	for _, p := range m.peers {
		if p != nil {
			links = append(links, m.linksOf(p)...)
		}
	}
	prev := time.Now()
	heard := make([]time.Time, len(links)) // when each link last brought something, as this goroutine saw it
	for i := range heard {
		heard[i] = prev
	}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		late := now.Sub(prev) > 2*every
		prev = now
		for i, l := range links {
			p := l.peer
			if p.err.Load() != nil {
				continue
			}
			switch {
			case l.heard.Swap(false), late:
				heard[i] = now
			case now.Sub(heard[i]) > m.cfg.FailureTimeout:
				m.fail(p, &silenceError{d: now.Sub(heard[i]), timeout: m.cfg.FailureTimeout}, false)
				continue
			}
			if !l.wrote.Swap(false) {
				m.beat(l)
			}
		}
	}
}

// beat writes a heartbeat on l, on a goroutine of its own (a peer that
// stopped reading would block it), unless a writer holds l.
func (m *mesh) beat(l *link) {
	select {
	case l.sem <- struct{}{}:
	default:
		return
	}
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		<-l.sem
		return
	}
	m.loops.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.loops.Done()
		defer func() { <-l.sem }()
		if l.finished {
			return
		}
		if _, err := l.w.Write(heartbeatRecord); err != nil && !m.closing.Load() {
			m.fail(l.peer, err, true)
		}
	}()
}
