package nexar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// Failure news: what one rank learns of another's failure reaches every
// rank of the world over the connections still up, within a round trip,
// instead of at the pace of each rank's own detector.
//
// A rank that sees world rank X fail itself — its connection to X broke
// or fell silent (the transport), a detector outside the transport
// declared X dead (Comm.PeerFailed: the cluster's membership), or the
// composed communicator that owns the world aborted it for X (Abort: a
// node-mate saw X's process vanish) — sends every other live rank one
// transport.FramePeerDown naming X, itself as the observer, and what happened. A
// rank that hears it first takes X as failed, as if it had seen it: every
// communicator of the world that includes X (Split children too: they
// share the world's connections) is aborted with an error naming X and
// who saw it, and X's connections are cut. It passes the news on once,
// to every rank but X, the observer and the sender, so that a send the
// observer lost is made up. Each rank sends news of X at most once, so a
// failure costs at most n² small frames, and later news of X changes
// nothing.
//
// No false news: a rank tells only of a failure it saw, or heard with the
// observer named. It never tells of a clean close (nothing is aborted by
// one), nor of a peer whose connection it lost because it was itself
// stalled past the failure timeout or expelled by that peer (mesh.fail
// then blames this rank, ErrStalled or ErrExpelled, and that is not news
// of the peer). The observer tells X too, best effort (its connections
// are cut at once): an X that still runs (a false suspicion, a link cut
// between two ranks that both live) aborts every communicator with
// ErrExpelled naming itself, with the observer's reason, and tells no one
// else; if the news is lost, the cut connections say the same.

// maxNews is the longest account of a failure a notice carries.
const maxNews = 4096

// learned records that world rank peer failed, as this rank saw it
// (err, a *comm.PeerError naming peer) or heard it (from, observer ≥ 0),
// and tells every live rank, unless it knew already, the failure is a
// clean close, or err blames this rank rather than peer. Every
// communicator that includes peer is aborted; those aborts are not
// announced per communicator, the news covers them all.
//
// A later account of the same failure returns only once the first has
// been acted on. The caller may be the read loop of a peer that told of
// the failure and then closed (its caller exited on the failure): the
// loop must not go on to that close while the communicators are still
// unaborted, or a collective waiting on the closing peer fails on its
// close, naming a rank that did nothing wrong.
func (w *world) learned(peer int, err error, observer, from int) {
	closed := errors.Is(err, transport.ErrPeerClosed)
	b, ok := comm.CulpritOf(err)
	news := !closed && ok && !b.Outside && b.Rank == peer
	w.mu.Lock()
	if _, ok := w.dead[peer]; ok {
		acted := w.acted[peer]
		w.mu.Unlock()
		<-acted
		return
	}
	acted := make(chan struct{})
	w.acted[peer] = acted
	defer close(acted)
	// The news is held before the failure is visible: a call that the
	// failure fails may return, and its caller close the world, at once;
	// the world Comm's Close then waits for this news to go out (a peer
	// still waiting on this rank would otherwise see its close instead of
	// the failure).
	held := news && w.news.hold()
	w.dead[peer] = err
	close(w.deathCh)
	w.deathCh = make(chan struct{})
	var hit []*Comm
	for _, c := range w.comms {
		if c.commRank(peer) >= 0 {
			hit = append(hit, c)
		}
	}
	w.mu.Unlock()
	if closed {
		// A clean close delivered every frame the peer sent, so nothing
		// is aborted: an operation fails only if it waits for a frame that
		// will now never come, or sends to the peer.
		w.log.Debug("nexar: peer closed", "rank", w.rank, "peer", peer)
		return
	}
	w.log.Warn("nexar: peer failed", "rank", w.rank, "peer", peer, "err", err)
	if held {
		if observer < 0 {
			observer = w.rank
		}
		w.spread(peer, observer, b.How, from)
		w.news.release()
	}
	for _, c := range hit {
		// Without news (this rank blames itself) each communicator
		// announces its abort, so its peers hear this rank's account.
		c.abortAs(c.ownPeerError(err), !news, false)
	}
}

// expelled handles news that names this rank: a peer (src) heard that
// this rank failed (observer saw it: how). Every communicator is aborted
// with this rank as the culprit (ErrStalled if this process was stalled,
// else ErrExpelled), and nothing is passed on.
func (w *world) expelled(src, observer int, how string) {
	w.mu.Lock()
	comms := make([]*Comm, 0, len(w.comms))
	for _, c := range w.comms {
		comms = append(comms, c)
	}
	w.mu.Unlock()
	cause := fmt.Errorf("rank %d told this rank that world rank %d saw it fail: %s", src, observer, how)
	var err error = &transport.ExpelledError{Peer: src, Cause: cause, Told: true}
	w.withTransport(func(tr transport.Transport) {
		if s, ok := tr.(transport.Staller); ok {
			if gap, timeout, stalled := s.Stalled(time.Now()); stalled {
				err = &comm.StalledError{Gap: gap, Timeout: timeout, Cause: cause, What: fmt.Sprintf("rank %d reports that it gave this rank up", src)}
			}
		}
	})
	w.log.Warn("nexar: this rank's peers gave it up", "rank", w.rank, "err", err)
	w.mu.Lock()
	if w.expelledErr == nil {
		// Kept for Shrink, which must refuse even on a communicator a
		// different failure aborted first; the waits watching deaths wake.
		w.expelledErr = err
		close(w.deathCh)
		w.deathCh = make(chan struct{})
	}
	w.mu.Unlock()
	for _, c := range comms {
		c.abort(&comm.PeerError{Peer: c.rank, Addr: "this rank", Err: err})
	}
}

// spread sends the news that world rank x failed (seen by observer: how)
// to every live rank but the observer and skip, and to x only from the
// observer, each send on its own goroutine, bounded (controlTimeout);
// the world Comm's Close waits for them, so a rank's last news reaches
// its peers.
func (w *world) spread(x, observer int, how string, skip int) {
	if len(how) > maxNews {
		how = how[:maxNews]
	}
	h := transport.Header{Kind: transport.FramePeerDown, Seq: uint64(observer), Sig: comm.Signature{Root: int32(x)}}
	payload := []byte(how)
	w.withTransport(func(tr transport.Transport) {
		for p := range w.size {
			if p == w.rank || p == observer || p == skip || p == x && observer != w.rank {
				continue
			}
			if _, dead := w.peerState(p); dead != nil && p != x {
				continue
			}
			w.news.run(func() {
				ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
				defer cancel()
				if err := tr.Send(ctx, p, h, payload); err != nil {
					w.log.Debug("nexar: failure news not sent", "rank", w.rank, "to", p, "failed", x, "err", err)
				}
			})
		}
	})
}

// onPeerDown handles a transport.FramePeerDown from world rank src: news that
// world rank Sig.Root failed, seen by world rank Seq.
func (w *world) onPeerDown(src int, h transport.Header, payload []byte) {
	how := string(payload)
	transport.PutBuf(payload)
	x, observer := int(h.Sig.Root), h.Seq
	if x < 0 || x >= w.size || observer >= uint64(w.size) {
		w.log.Warn("nexar: ignored failure news that names no rank of the world", "rank", w.rank, "from", src, "failed", x, "observer", observer)
		return
	}
	if x == w.rank {
		w.expelled(src, int(observer), how)
		return
	}
	via := fmt.Sprintf("seen by world rank %d", observer)
	if int(observer) != src {
		via += fmt.Sprintf(", told by world rank %d", src)
	}
	perr := &comm.PeerError{Peer: x, Err: &comm.ViaError{How: how, Via: via,
		Err: &comm.RemoteError{Peer: src, Reason: how, PeerFailed: true, Culprit: x}}}
	w.withTransport(func(tr transport.Transport) {
		perr.Addr = tr.PeerAddr(x)
		w.learned(x, perr, int(observer), src)
		if d, ok := tr.(transport.PeerDropper); ok {
			// Sends to it fail at once, Close does not wait for it, and
			// if it lives it learns that it was given up.
			d.DropPeer(x, perr)
		}
	})
}

// withTransport runs f with the transport, now or, when news comes before
// the transport is attached (a failure seen while the world forms), once
// it is.
func (w *world) withTransport(f func(transport.Transport)) {
	w.mu.Lock()
	tr := w.tr
	if tr == nil {
		w.pending = append(w.pending, f)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	f(tr)
}
