package hiercomm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/topology"
)

// Grow admits the processes waiting to join this running job — started
// with HIERCOMM_JOIN=running and the job's id, key and settings: a
// replacement for a rank lost to Shrink, or an addition — and returns the
// World of the members and them. Every member calls it, at a point of its
// choosing (between steps); each newcomer's Init returns the same World.
// max, if positive, admits at most that many (the first in the order
// below); 0 admits every process waiting.
//
// Rank 0 decides who is admitted (those its membership shows waiting),
// and every member admits the same. The members keep their ranks; the
// newcomers follow, ordered by host (natural order), local index and
// name, and each takes the next local index on its host
// (topology.Topology.Grown). The grown World is built anew from that
// topology, as Init builds one (its Plan: a newcomer on a node of the
// job joins that node's shared memory or NCCL, a new node adds to every
// rail), over data-plane connections of its own.
//
// With nobody waiting, Grow returns w itself at once (every member sees
// the same: rank 0's answer). Otherwise, on success, Grow closes w's
// communicator (the grown World takes over the membership: Close it when
// done); re-create what was Split from w on the grown World. A failure
// during Grow — a newcomer or a member dies, a deadline — returns an
// error on every member and leaves w as it was: usable, unless the
// failure was one of its own members' (then w is aborted as any
// collective would leave it, and Shrink applies). A newcomer whose Grow
// failed gets the error from Init.
func (w *World) Grow(ctx context.Context, max int) (*World, error) {
	if max < 0 {
		return nil, fmt.Errorf("hiercomm: rank %d: Grow: max %d: %w", w.rank, max, &comm.ArgError{Arg: "max", Problem: "negative: give 0 to admit every process waiting, or the most to admit"})
	}
	cl := w.cluster
	if cl == nil {
		return nil, fmt.Errorf("hiercomm: rank %d: Grow: this World has no membership to admit newcomers through (a world of one that no launcher started, or a World that Shrink or Grow replaced)", w.rank)
	}
	newcomers, err := w.chooseNewcomers(ctx, cl, max)
	if err != nil {
		return nil, err
	}
	if len(newcomers) == 0 {
		return w, nil
	}
	fail := func(err error) (*World, error) {
		return nil, fmt.Errorf("hiercomm: rank %d: Grow by %d: %w", w.rank, len(newcomers), err)
	}

	// The grown topology: every member's new data-plane address, then the
	// newcomers after the members.
	data, err := w.bindGrown()
	if err := w.agree(ctx, err); err != nil {
		data.Close()
		return fail(err)
	}
	addrs, err := w.gatherAddrs(ctx, data.Addr)
	if err != nil {
		data.Close()
		return fail(err)
	}
	members := w.topo.Members()
	for r := range members {
		members[r].Addr = addrs[r]
	}
	now, err := topology.New(members)
	if err != nil {
		data.Close()
		return fail(err)
	}
	grown, err := now.Grown(newcomers)
	if err != nil {
		data.Close()
		return fail(err)
	}
	// Every member admits them; one that finds a newcomer gone makes
	// every member's Grow fail before anyone builds.
	gen := w.gen + 1
	err = cl.Admit(grown, gen)
	if err != nil && !errors.Is(err, cluster.ErrNewcomerGone) {
		w.log.Warn("hiercomm: Grow: some newcomers were not told by this rank (another member may have told them)", "rank", w.rank, "err", err)
		err = nil
	}
	if err := w.agree(ctx, err); err != nil {
		data.Close()
		cl.Withdraw(grown, gen, err.Error()) // the newcomers stop waiting
		return fail(err)
	}
	nw, err := grow(ctx, w, cl, grown, w.rank, gen, data)
	if err != nil {
		return fail(err)
	}
	w.failures.Store(false) // the grown World's communicator gets them now
	w.cluster = nil
	if err := w.Communicator.Close(); err != nil {
		w.log.Debug("hiercomm: Grow: closing the communicator grown out of", "rank", w.rank, "err", err)
	}
	return nw, nil
}

// chooseNewcomers is Grow's first step: rank 0's list of the processes
// waiting (at most max, if positive), broadcast to every member.
func (w *World) chooseNewcomers(ctx context.Context, cl *cluster.Cluster, max int) ([]topology.Member, error) {
	var list []byte
	if w.rank == 0 {
		ms := cl.Waiting()
		if max > 0 && len(ms) > max {
			ms = ms[:max]
		}
		if len(ms) > 0 {
			var err error
			if list, err = json.Marshal(ms); err != nil {
				return nil, err
			}
		}
	}
	n := []int64{int64(len(list))}
	if err := w.Broadcast(ctx, comm.Host(n), 0); err != nil {
		return nil, fmt.Errorf("hiercomm: rank %d: Grow: hearing rank 0's list of newcomers: %w", w.rank, err)
	}
	if n[0] == 0 {
		return nil, nil
	}
	if w.rank != 0 {
		list = make([]byte, n[0])
	}
	if err := w.Broadcast(ctx, comm.Host(list), 0); err != nil {
		return nil, fmt.Errorf("hiercomm: rank %d: Grow: hearing rank 0's list of newcomers: %w", w.rank, err)
	}
	var ms []topology.Member
	if err := json.Unmarshal(list, &ms); err != nil {
		return nil, fmt.Errorf("hiercomm: rank %d: Grow: rank 0's list of newcomers: %w", w.rank, err)
	}
	return ms, nil
}

// bindGrown binds this member's data-plane socket for the grown World,
// on the address its current one is on.
func (w *World) bindGrown() (cluster.DataSocket, error) {
	host, _, err := net.SplitHostPort(w.topo.Member(w.rank).Addr)
	if err != nil {
		return cluster.DataSocket{}, fmt.Errorf("this rank has no data-plane address to bind another beside (%q): %w", w.topo.Member(w.rank).Addr, err)
	}
	return cluster.BindData(w.launch.Network, host, 0)
}

// agree makes a failure of one member a failure of all: every member
// passes its own (nil: none), and every one gets an error if any failed
// (tier.Agree: the others' names the lowest member that failed, and why).
func (w *World) agree(ctx context.Context, err error) error {
	return tier.Agree(ctx, w, err)
}

// addrSlot is the room each member's address takes in gatherAddrs.
const addrSlot = 256

// gatherAddrs gives every member each member's address.
func (w *World) gatherAddrs(ctx context.Context, mine string) ([]string, error) {
	if len(mine) > addrSlot {
		return nil, fmt.Errorf("the data-plane address %q is longer than %d bytes", mine, addrSlot)
	}
	send, recv := make([]byte, addrSlot), make([]byte, addrSlot*w.Size())
	copy(send, mine)
	if err := w.AllGather(ctx, comm.Host(send), comm.Host(recv)); err != nil {
		return nil, fmt.Errorf("gathering the members' data-plane addresses: %w", err)
	}
	addrs := make([]string, w.Size())
	for r := range addrs {
		addrs[r] = strings.TrimRight(string(recv[r*addrSlot:(r+1)*addrSlot]), "\x00")
	}
	return addrs, nil
}

// grow builds the World of grown, generation gen, as this process (rank)
// takes part in it, over data, which it owns; a member (Grow: w is its
// World) and a newcomer (Init: w holds only the launch, the log, the
// Options and the device) alike. It ends with an AllReduce on the new
// communicator that every process of it must pass: a process that could
// not build makes every other's fail too, at once where it can tell them
// (cluster.Withdraw), else by their deadlines.
func grow(ctx context.Context, w *World, cl *cluster.Cluster, grown *topology.Topology, rank, gen int, data cluster.DataSocket) (*World, error) {
	nw, err := buildGrown(ctx, w, cl, grown, rank, gen, data)
	if err != nil {
		cl.Withdraw(grown, gen, fmt.Sprintf("rank %d of the grown world: %v", rank, err))
	}
	return nw, err
}

// buildGrown is grow's work.
func buildGrown(ctx context.Context, w *World, cl *cluster.Cluster, grown *topology.Topology, rank, gen int, data cluster.DataSocket) (*World, error) {
	gpu := -1
	if w.device != nil {
		gpu = w.device.Ordinal()
	}
	plan, err := NewPlan(w.launch, grown, rank, gpu, w.opt)
	if err != nil {
		data.Close()
		return nil, err
	}
	in := setup{launch: w.launch, topo: grown, rank: rank, dev: w.device, opt: w.opt, data: data}
	in.launch.JobID = grownJobID(w.launch.JobID, gen)
	// A process of the grown world that dies meanwhile ends the build at
	// once, as the membership sees it, instead of at ConnectTimeout.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var building atomic.Bool
	building.Store(true)
	defer building.Store(false)
	names := make(map[string]bool, grown.Size())
	for _, m := range grown.Members() {
		names[m.Name] = true
	}
	cl.OnFailure(func(f *cluster.Failure) { // also called for earlier failures
		if building.Load() && names[f.Member.Name] {
			cancel(f)
		}
	})
	withdrawn, why := cl.Withdrawn(gen)
	go func() {
		select {
		case <-withdrawn:
			cancel(fmt.Errorf("another process gave this Grow up: %s", why()))
		case <-ctx.Done():
		}
	}()
	c, via, err := build(ctx, plan, in)
	if err != nil {
		if cause := context.Cause(ctx); cause != ctx.Err() && cause != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return nil, err
	}
	check := []int64{int64(grown.Size())}
	if err := c.AllReduce(ctx, comm.Host(check), comm.Host(check), comm.Min); err != nil {
		c.Close()
		return nil, fmt.Errorf("the grown world's first collective: %w", err)
	}
	nw := &World{Communicator: c, topo: grown, rank: rank, device: w.device, launch: w.launch, log: w.log, plan: plan, opt: w.opt,
		gen: gen, failures: new(atomic.Bool), tracing: w.tracing}
	if w.launched != nil {
		// A member's launcher ranks go on; a newcomer's is its rank.
		nw.launched = slices.Clone(w.launched)
		for r := len(nw.launched); r < grown.Size(); r++ {
			nw.launched = append(nw.launched, r)
		}
	}
	nw.ready(cl, via)
	if rank == 0 {
		w.log.Info("hiercomm: world grown", "size", grown.Size(), "of", w.topo.Size(), "nodes", grown.NumNodes(), "generation", gen, "via", via)
	}
	return nw, nil
}

// grownJobID is the job id the communicators of generation gen of a job
// are built under: their connections and shared-memory segments are
// apart from those of earlier generations, which may still be open.
func grownJobID(id string, gen int) string {
	if gen == 0 {
		return id
	}
	suffix := fmt.Sprintf("~g%d", gen)
	if len(id)+len(suffix) > 128 {
		id = id[:128-len(suffix)]
	}
	return id + suffix
}

// Generation is how many times the job had grown when this World was
// made: 0 for the World Init forms with the job's first processes (and
// what Shrink makes of it), n after the nth Grow. A World that Init
// returns with a Generation above 0 is a newcomer's: this process joined
// a running job (HIERCOMM_JOIN=running) and holds none of its state yet,
// which the members hand it (docs/errors.md, "Grow and go on").
func (w *World) Generation() int { return w.gen }
