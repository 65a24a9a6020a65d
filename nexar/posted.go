package nexar

import (
	"context"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// Posted receives. A Recv of one frame started with Start (MPI_Irecv)
// does not get a goroutine that waits for its frame: it is posted in
// Comm.posted under the frame's key, and the read loop that delivers the
// frame takes it from there, copies the payload into the Recv's buffer and
// completes its Work. The caller's Wait is then the only wakeup between
// the wire and the caller, and the message costs one Work, not a goroutine,
// a Work and a handoff.
//
// A posted Recv ends the ways a waiting one does (Comm.await): its frame
// arrives, the caller's context ends (context.AfterFunc), Timeout passes,
// the peer dies or closes its side, or the communicator is aborted or
// closes (which end the posted Recvs themselves: endPosted). One
// goroutine per communicator, the watcher, keeps the deaths, the closed
// sides and the deadlines: it
// runs while Recvs are posted (and a second after), sleeping on the
// world's news of a death, the communicator's news of closed sides, and a
// timer set to the earliest deadline. Whoever removes a Recv from the map,
// under Comm.mu, is the one that completes it.

// posted is a Recv of one frame waiting in Comm.posted.
type posted struct {
	c        *Comm
	call     comm.Call
	num      uint64
	key      mkey
	work     *comm.Work
	deadline time.Time
	unwatch  func() bool // stops the watch of the caller's context (nil: none); guarded by Comm.mu
	// land is the landing it offered its frame (landing.go), once it is
	// taken from Comm.posted (takePostedLocked); nil if none.
	land *landing
}

// postedLinger is how long the watcher stays once no Recv is posted, so a
// stream of messages does not start one per message.
const postedLinger = time.Second

// postRecv starts message num of a Recv of one frame.
func (c *Comm) postRecv(ctx context.Context, call comm.Call, num uint64) *comm.Work {
	p := &posted{c: c, call: call, num: num, key: p2pFrameKey(call, num, 0), deadline: time.Now().Add(c.opt.Timeout)}
	c.mu.Lock()
	if f, ok := c.arrived[p.key]; ok {
		delete(c.arrived, p.key)
		c.mu.Unlock()
		hoptrace.Mark(hoptrace.Woken, c.w.rank, c.members[call.Peer], num, 0)
		if err := c.takePiece(call, num, 0, f); err != nil {
			return comm.Failed(c.p2pError(call, err))
		}
		return comm.Succeeded()
	}
	if err := c.refuseLocked(); err != nil {
		c.mu.Unlock()
		return comm.Failed(c.p2pError(call, err))
	}
	p.work = comm.NewSpinningWork(p.spin)
	c.posted[p.key] = p
	if l := c.offer(call.Recv.Bytes(), p2pSig(call.Recv, call.Tag)); l != nil {
		c.landings[p.key] = l
	}
	if !c.watching {
		c.watching = true
		go c.watchPosted()
	}
	gone := call.Peer != c.rank && c.goneLocked(call.Peer)
	c.mu.Unlock()
	// A peer that died or closed its side before the Recv was posted sends
	// the watcher no news: the Recv ends now, as a waiting one would.
	if peer := call.Peer; peer != c.rank {
		if _, dead := c.w.peerState(c.members[peer]); dead != nil {
			c.unpost(p, c.deadPeerError(peer, dead))
		} else if gone {
			c.unpost(p, c.closedPeerError(peer))
		}
	}
	if ctx.Done() != nil {
		// Watched once it is posted: an end of ctx from now on finds it.
		stop := context.AfterFunc(ctx, func() { c.unpost(p, context.Cause(ctx)) })
		c.mu.Lock()
		if c.posted[p.key] == p {
			p.unwatch = stop
			stop = nil
		}
		c.mu.Unlock()
		if stop != nil {
			stop() // already done
		}
	}
	return p.work
}

// spin is the Recv's Work's: its Wait reads the peer's connections
// before it sleeps (Comm.spin).
func (p *posted) spin(done <-chan struct{}) {
	p.c.spin(p.call.Peer, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}

// takePostedLocked removes the Recv posted for k, if any, for its caller
// to complete.
func (c *Comm) takePostedLocked(k mkey) *posted {
	p := c.posted[k]
	if p == nil {
		return nil
	}
	delete(c.posted, k)
	p.land = c.landings[k]
	delete(c.landings, k)
	if p.unwatch != nil {
		p.unwatch()
		p.unwatch = nil
	}
	return p
}

// fill completes p with its frame f.
func (c *Comm) fill(p *posted, f frame) {
	hoptrace.Mark(hoptrace.Matched, c.w.rank, c.members[f.src], p.num, 0)
	if err := c.takePiece(p.call, p.num, 0, f); err != nil {
		p.fail(err)
		return
	}
	p.work.Complete(nil)
}

// fail completes p, taken from Comm.posted, with err, once its landing,
// if a pump is filling it, is taken back: the caller may reuse its
// buffer when Wait returns (landing.go).
func (p *posted) fail(err error) {
	if l := p.land; l != nil && l.by != nil {
		l.by.Divert(l.buf)
	}
	p.work.Complete(p.c.p2pError(p.call, err))
}

// unpost ends p with err unless something else ended it first.
func (c *Comm) unpost(p *posted, err error) {
	c.mu.Lock()
	if c.posted[p.key] != p {
		c.mu.Unlock()
		return
	}
	c.takePostedLocked(p.key)
	c.mu.Unlock()
	p.fail(err)
}

// watchPosted is the watcher: it ends the posted Recvs whose peer died
// or closed its side, or whose deadline passed, and every one when the
// communicator closes. It returns once none has been posted for
// postedLinger, or the communicator closed.
func (c *Comm) watchPosted() {
	timer := time.NewTimer(min(postedLinger, c.opt.Timeout))
	defer timer.Stop()
	var (
		mine  []*posted
		ended []*posted
		errs  []error
	)
	for {
		died := c.w.deaths()
		// Which peers are dead is asked of the world without Comm.mu.
		c.mu.Lock()
		mine = mine[:0]
		for _, p := range c.posted {
			mine = append(mine, p)
		}
		c.mu.Unlock()
		dead := make(map[int]error)
		for _, p := range mine {
			if peer := p.call.Peer; peer != c.rank {
				if _, err := c.w.peerState(c.members[peer]); err != nil {
					dead[peer] = err
				}
			}
		}
		now := time.Now()
		next := now.Add(min(postedLinger, c.opt.Timeout))
		ended, errs = ended[:0], errs[:0]
		c.mu.Lock()
		for _, p := range mine {
			if c.posted[p.key] != p {
				continue // its frame came meanwhile
			}
			peer := p.call.Peer
			var err error
			switch {
			case dead[peer] != nil:
				err = c.deadPeerError(peer, dead[peer])
			case peer != c.rank && c.goneLocked(peer):
				err = c.closedPeerError(peer)
			case !now.Before(p.deadline):
				err = context.DeadlineExceeded
			default:
				next = earlier(next, p.deadline)
				continue
			}
			c.takePostedLocked(p.key)
			ended, errs = append(ended, p), append(errs, err)
		}
		idle := len(c.posted) == 0 && len(ended) == 0
		left := c.leftCh
		c.mu.Unlock()
		for i, p := range ended {
			p.fail(errs[i])
		}
		timer.Reset(time.Until(next))
		select {
		case <-died:
		case <-left:
		case <-c.done:
			c.mu.Lock()
			c.watching = false
			c.mu.Unlock()
			return // Close ended every posted Recv
		case <-timer.C:
			if idle {
				c.mu.Lock()
				if len(c.posted) == 0 {
					c.watching = false
					c.mu.Unlock()
					return
				}
				c.mu.Unlock()
			}
		}
	}
}

// endPosted ends every posted Recv with err (Close, abort).
func (c *Comm) endPosted(err error) {
	c.mu.Lock()
	var all []*posted
	for k := range c.posted {
		all = append(all, c.takePostedLocked(k))
	}
	c.mu.Unlock()
	for _, p := range all {
		p.fail(err)
	}
}
