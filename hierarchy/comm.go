package hierarchy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
	"github.com/hiercomm/hiercomm/topology"
)

// Defaults of Config.
const (
	// DefaultChunkBytes is the pipelining unit of the large paths, per
	// node-wide chunk of the message.
	DefaultChunkBytes = 4 << 20
)

// Config is what a hierarchical communicator is made of. Every rank of the
// hierarchy must use the same Topology, Cost, SmallBytes and ChunkBytes
// (the algorithm choice is computed from them; Build checks that they do).
type Config struct {
	// Topology is the job's shape; Rank is this process's rank in it.
	// Required.
	Topology *topology.Topology
	Rank     int
	// World holds every rank, with the Topology's rank numbers. It carries
	// Send/Recv to other nodes and the collectives without a 2D algorithm
	// (in the caller's memory), and Split's exchange (in host memory).
	// Required.
	World comm.Communicator
	// Intra holds the ranks of this node; its rank l is local rank l.
	// Required.
	Intra comm.Communicator
	// Rail holds the ranks with this local rank, one per node that has it,
	// in node order (topology.Topology.Rails). Required.
	Rail comm.Communicator
	// Cost is the α-β model that picks each AllReduce's, Broadcast's and
	// Reduce's route (schedule.Hierarchy.Route): the whole message over
	// one rail between the node steps (schedule.Leads), or split over
	// every rail (schedule.TwoD). Each zero field takes its default;
	// hiercomm.Init fills Intra and Inter from the parts' transports and
	// RanksPerCore from the host (see docs/hierarchy.md).
	Cost schedule.Hierarchy
	// SmallBytes, if set, is the switch Cost would compute, given
	// (Config.Switch, the one decision, takes it as its input): positive,
	// the leads route up to this many bytes and the 2D route above;
	// negative, the 2D route always (but for messages of fewer elements
	// than a node has ranks, which take the leads route). Zero: Cost
	// decides.
	SmallBytes int
	// ChunkBytes is the pipelining unit of the large paths. If zero,
	// defaults to DefaultChunkBytes.
	ChunkBytes int
	// Stager gives the large paths their scratch memory and decides which
	// memory the caller's buffers may be in (Stager.Check). If nil,
	// defaults to NewStager's, or, if that is nil too, to host memory
	// (NewHostStager), which serves host buffers.
	Stager Stager
	// NewStager makes a Stager for a communicator Split off this one (and
	// for this one when Stager is nil): a Stager serves one executor, and
	// a child runs beside its parent. If nil, children of a HostStager get
	// NewHostStager's, and Split of a hierarchy with another Stager fails
	// with an *comm.ArgError. A device hierarchy sets it, e.g.
	// func() Stager { return nccl.NewStager(dev) }. The hierarchy owns the
	// Stagers it makes: Close releases them (through their Close method,
	// if they have one).
	NewStager func() Stager
	// NewIntra, if set, makes the intra-node part of the hierarchy that
	// Shrink makes: each survivor calls it with the survivors' topology,
	// its rank there, and a generation that every survivor of that Shrink
	// passes alike and no other Shrink of the job passes (shared memory
	// needs fresh segment names). If nil, Shrink splits the intra-node
	// parts off the shrunk world. hiercomm.Init sets it to join a node's
	// shared memory again.
	NewIntra func(ctx context.Context, t *topology.Topology, rank int, generation string) (comm.Communicator, error)
	// Name names the communicator in errors. If empty, defaults to
	// "hierarchy".
	Name string
	// Logger receives the communicator's logs. If nil, defaults to
	// slog.Default().
	Logger *slog.Logger
	// NodeP2PViaWorld sends Send and Recv between two ranks of one node
	// through World instead of Intra: the network transport's loopback
	// instead of shared memory, as NCCL_SHM_DISABLE does for NCCL's. Every
	// rank must set the same (Build checks). Where more processes than
	// cores share a host, a small message between two of them measured
	// faster this way; a large one faster over TCP and slower over QUIC
	// (docs/hierarchy.md, "Send and Recv between node-mates"). One pair of
	// ranks always uses one part, so messages with one tag keep their
	// order either way. A communicator that is not a hierarchy (one a
	// Split or Shrink leaves on one node is the intra part's own) has no
	// such choice.
	NodeP2PViaWorld bool
	// NodeP2PViaWorldWhenCrowded sets NodeP2PViaWorld where more processes
	// than cores share a host: where Cost.RanksPerCore, which Build makes
	// the most crowded host's on every rank, exceeds 1. There a message
	// between two node-mates through shared memory waits for the engine
	// goroutines of both processes to be scheduled, and over loopback it
	// measured as fast as flat's at every size on 4 processes on 2 cores
	// (docs/hierarchy.md); with a core each, shared memory's 4 µs hop is
	// the faster. hiercomm.Init sets it on the host tier unless
	// HIERCOMM_NODE_P2P says otherwise. Every rank must set the same
	// (Build checks). New, called directly, agrees nothing: its callers
	// must give every rank the same Cost, RanksPerCore included, or
	// node-mates would send where their peers do not receive.
	NodeP2PViaWorldWhenCrowded bool
	// AskAfter is the least time a collective runs before this rank asks
	// every rank, over World, where it stands (a census: its last started
	// collective and the user's latest calls), so that ranks whose calls
	// took different routes and never met in a part get a
	// *comm.MismatchError instead of waiting for their deadline. A
	// collective asks after AskAfter plus four times the cost model's time
	// for it, then after twice as long each time, up to 2 s apart. If
	// zero, defaults to DefaultAskAfter; negative: only a part's own
	// mismatch and a deadline ask. It need not be the same on every rank.
	AskAfter time.Duration
	// FlightRecorder, if positive, makes the communicator (and its Split
	// children) keep its last FlightRecorder collectives as the user
	// called them (tier.FlightRecorder, with the part and phase each was
	// in, "rail 1 AllReduce") and write them to Logger at its first
	// deadline, abort, mismatch or peer failure, as
	// nexar.Options.FlightRecorder. The parts keep their own if their
	// configs say so. If zero, nothing is recorded.
	FlightRecorder int
}

// Switch is the size, in bytes, from which collective c (AllReduce,
// Broadcast or Reduce) on m nodes of up to g ranks takes the 2D route,
// below it the leads route (0: the 2D route at every size; math.MaxInt:
// the leads route at every size), and whether SmallBytes decided it
// rather than Cost. It is the one decision of the route by size: New makes
// it for each collective, and hiercomm's Plan reports it. SmallBytes is
// its input, not a path beside it: positive, the switch is just above it;
// negative, at 0; zero, Cost's (schedule.Hierarchy.Switch). A message of
// fewer elements than a node has ranks takes the leads route whatever the
// switch (the 2D route splits it over them).
func (cfg Config) Switch(c schedule.Collective, g, m int) (at int, bySmallBytes bool) {
	switch {
	case cfg.SmallBytes == math.MaxInt:
		return math.MaxInt, true
	case cfg.SmallBytes > 0:
		return cfg.SmallBytes + 1, true
	case cfg.SmallBytes < 0:
		return 0, true
	}
	return cfg.Cost.Switch(c, g, m), false
}

// Comm is a hierarchical communicator. It owns its parts: Close closes
// them.
type Comm struct {
	tier.Blocking
	cfg Config
	// given is the Config New was given, before its defaults, without
	// the parts: Grow builds the grown hierarchy from it, as a newcomer's
	// Join builds from the Config it is given (Build compares them).
	given Config
	topo  *topology.Topology
	rank  int
	size  int
	node  int
	local int
	// g is the ranks per node; homogeneous says every node has g.
	g           int
	homogeneous bool
	// flat: one node, or one rank per node; everything runs on World.
	flat bool
	// ownStager says that cfg.Stager came from cfg.NewStager: Close
	// releases it.
	ownStager bool
	// switchAt[c] is the size from which collective c takes the 2D route
	// (Config.Switch for this shape).
	switchAt [schedule.BroadcastOp + 1]int
	// leadShardOnly plants a defect: the large AllReduce reduces only the
	// lead's shard across nodes. Only tests set it (export_test.go).
	leadShardOnly bool

	world, intra, rail comm.Communicator
	// intraP and railP are the parts as the phases see them; rails are the
	// topology's rails (rails[l][m]: local rank l of node m).
	intraP, railP part
	rails         [][]int
	// intraRanks[l] and railRanks[i] are the global ranks of the intra
	// part's rank l and the rail's rank i.
	intraRanks, railRanks []int
	log                   *slog.Logger

	exec *tier.Exec[splitRun] // numbers and runs the collectives and Splits
	rec  *tier.FlightRecorder // nil unless Config.FlightRecorder

	// watchers wait for a part to be aborted (comm.Control's Aborted) until
	// stop is closed (Close).
	watchers sync.WaitGroup
	stop     chan struct{}

	mu     sync.Mutex // guards the fields below
	closed bool
	// failure keeps the first failure that aborted the hierarchy, its
	// cause (tier.Failure.Abort); the census (stall) and the parts' watch
	// are the detectors that feed it.
	failure tier.Failure
	// abortedCh is closed when the failure machine aborts the hierarchy
	// (comm.Control's Aborted).
	abortedCh chan struct{}
	// deferred is a part's abort that watch saw while a collective or
	// Split was in its phases (stall.Running), applied when it ends.
	deferred error

	// stall keeps where this rank stands (its last started collective or
	// Split and the user's latest calls: what it answers a census on the
	// world part, comm.Control's census) and decides when to ask and what
	// the answers mean (tier.Watch, census.go); its Running is whether a
	// collective or Split is in its phases. census is the world part,
	// when it holds this hierarchy's answer (not another's built over
	// it); uncensus uninstalls it.
	stall    tier.Watch
	asked    bool // the first call after the abort asked (askOnce)
	census   comm.Control
	uncensus func()
}

// task is a collective or Split on the executor; X, when set, is a Split,
// run instead of a call.
type task = tier.Task[splitRun]

type splitRun func(t *task) error

// New returns the hierarchical communicator of cfg's rank. It checks that
// the parts match the topology (sizes and ranks) and fails with an error
// that names the part otherwise.
func New(cfg Config) (*Comm, error) {
	if cfg.Topology == nil {
		return nil, errors.New("hierarchy.New: Config.Topology is nil")
	}
	t := cfg.Topology
	given := cfg
	given.Topology, given.World, given.Intra, given.Rail = nil, nil, nil, nil
	if cfg.Rank < 0 || cfg.Rank >= t.Size() {
		return nil, fmt.Errorf("hierarchy.New: Config.Rank %d is not in [0, %d)", cfg.Rank, t.Size())
	}
	if cfg.FlightRecorder < 0 {
		return nil, fmt.Errorf("hierarchy.New: Config.FlightRecorder %d is negative", cfg.FlightRecorder)
	}
	if cfg.World == nil || cfg.Intra == nil || cfg.Rail == nil {
		return nil, fmt.Errorf("hierarchy.New: Config.World, Intra and Rail are all required (world %v, intra %v, rail %v)",
			cfg.World != nil, cfg.Intra != nil, cfg.Rail != nil)
	}
	if err := cfg.Cost.Validate(); err != nil {
		return nil, fmt.Errorf("hierarchy.New: Config.Cost: %w", err)
	}
	if cfg.ChunkBytes == 0 {
		cfg.ChunkBytes = DefaultChunkBytes
	}
	if cfg.AskAfter == 0 {
		cfg.AskAfter = DefaultAskAfter
	}
	if cfg.ChunkBytes < 0 {
		return nil, fmt.Errorf("hierarchy.New: Config.ChunkBytes %d is negative", cfg.ChunkBytes)
	}
	if cfg.Name == "" {
		cfg.Name = "hierarchy"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NodeP2PViaWorldWhenCrowded && cfg.Cost.RanksPerCore > 1 {
		cfg.NodeP2PViaWorld = true
	}
	r := cfg.Rank
	node, local := t.NodeOf(r), t.LocalRank(r)
	g, homogeneous := t.RanksPerNode()
	h := &Comm{
		cfg: cfg, given: given, topo: t, rank: r, size: t.Size(), node: node, local: local,
		g: g, homogeneous: homogeneous,
		world: cfg.World, intra: cfg.Intra, rail: cfg.Rail,
		intraRanks: t.Nodes()[node].Ranks,
		log:        cfg.Logger,
		abortedCh:  make(chan struct{}),
		failure:    tier.Failure{Rank: r},
	}
	for _, c := range []schedule.Collective{schedule.AllReduceOp, schedule.BroadcastOp, schedule.ReduceOp} {
		h.switchAt[c], _ = cfg.Switch(c, g, t.NumNodes())
	}
	h.Blocking = tier.Blocking{S: h}
	if cfg.FlightRecorder > 0 {
		h.rec = tier.NewFlightRecorder(cfg.FlightRecorder, cfg.Name, r, cfg.Logger)
	}
	h.exec = tier.NewExec(tier.ExecConfig[splitRun]{
		Recorder: h.rec,
		Run:      h.runTask,
		Recycle:  true, // runTask keeps nothing of its task once it returns
		Refuse: func(t *task, err error) error {
			return h.opError(t.Call.Kind, t.Seq, -1, err)
		},
	})
	h.flat = t.NumNodes() == 1 || (homogeneous && g == 1)
	h.rails = t.Rails()
	h.railRanks = h.rails[local]
	h.intraP = part{name: fmt.Sprintf("node %d %s", node, transportOf(h.intra)), c: h.intra, ranks: h.intraRanks}
	h.railP = part{name: fmt.Sprintf("rail %d", local), c: h.rail, ranks: h.railRanks}
	check := func(part string, c comm.Communicator, rank, size int) error {
		if c.Size() != size || c.Rank() != rank {
			return fmt.Errorf("hierarchy.New: rank %d: the %s part is rank %d of %d, want rank %d of %d (build it with topology.Colors)",
				r, part, c.Rank(), c.Size(), rank, size)
		}
		return nil
	}
	if err := check("world", h.world, r, t.Size()); err != nil {
		return nil, err
	}
	if err := check("intra", h.intra, local, len(h.intraRanks)); err != nil {
		return nil, err
	}
	if err := check("rail", h.rail, slices.Index(h.railRanks, r), len(h.railRanks)); err != nil {
		return nil, err
	}
	switch {
	case cfg.Stager != nil:
	case cfg.NewStager != nil:
		h.cfg.Stager, h.ownStager = cfg.NewStager(), true
		if h.cfg.Stager == nil {
			return nil, errors.New("hierarchy.New: Config.NewStager returned nil")
		}
	default:
		h.cfg.Stager = NewHostStager()
	}
	h.stop = make(chan struct{})
	h.stall = tier.Watch{Rank: r, AskAfter: cfg.AskAfter, AskAtMost: askAtMost, Expect: h.stallAfter}
	if remove, ok := h.world.SetProgress(h.standing); ok {
		h.census, h.uncensus = h.world, remove
	}
	for _, p := range []part{h.railP, h.intraP, h.worldPart()} {
		if p.c != nil {
			h.watchers.Go(func() { h.watch(p) })
		}
	}
	if h.census != nil && !h.flat && cfg.AskAfter > 0 {
		// A flat hierarchy runs everything on the world part, which sees
		// every call: nothing to ask.
		h.watchers.Go(func() { h.watchStalls(min(cfg.AskAfter, askAtMost) / 2) })
	}
	return h, nil
}

// watch aborts the hierarchy when part p is aborted by a rank's failure,
// a deadline or a cancel, as tier.Watch.PartAborted decides: news of it
// that reaches this rank through one part (a peer announced its abort
// there, a node-mate saw the process vanish) ends the operations waiting
// on the others. A mismatch is left to the phase that meets it, which
// reports it in the user's terms once every rank has reached the
// collective that differs (settle), since the ranks still in an earlier
// one would fail it if the hierarchy were aborted now. The hierarchy's
// own abort of its parts comes back here and changes nothing.
//
// A collective in its phases when news of a failure comes finishes
// first: the news may be of a failure in a later collective of ranks
// ahead of this one (a rank that left after a Barrier every rank had
// entered, found by a node-mate in the next call), and aborting now would
// fail this rank's phases on healthy parts, and its part-mates' with
// them, in a collective that every rank can complete. News of a deadline
// or a cancel asks the census first: a rank that stopped in this
// collective or before it means this one cannot complete, and the
// hierarchy aborts at once. The phases still fail on their own where the
// failure reaches them: on the aborted part, or on a part a peer aborted,
// or by its transport or liveness check.
func (h *Comm) watch(p part) {
	select {
	case <-h.stop:
		return
	case <-p.c.Aborted():
	}
	cause := p.c.AbortCause()
	h.mu.Lock()
	act := h.stall.PartAborted(cause)
	h.mu.Unlock()
	if act == tier.PartIgnore {
		return
	}
	if pe := h.blame(p, p.global(comm.PeerOf(cause)), cause); pe != nil {
		cause = pe
	} else {
		if re := (*comm.RemoteError)(nil); errors.As(cause, &re) {
			// The peer whose news it was, by its global rank (the
			// part's own operation around it, in the part's numbers, is
			// left out).
			cause = p.globalRemote(re)
		}
		cause = fmt.Errorf("%s was aborted: %w", p.name, cause)
	}
	if act == tier.PartAsk && h.stoppedIn() {
		act = tier.PartAbort
	}
	if act != tier.PartAbort {
		h.mu.Lock()
		running := h.stall.Running()
		if running && h.deferred == nil {
			h.deferred = cause
		}
		h.mu.Unlock()
		if running {
			return
		}
	}
	h.abort(cause)
}

// stoppedIn takes a census and reports whether it finds a rank that
// stopped in the running collective or before it (tier.Watch.StoppedIn).
func (h *Comm) stoppedIn() bool {
	answers, answered, ok := h.take()
	if !ok {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stall.StoppedIn(answers, answered)
}

// ended marks the end of runTask's collective or Split, and applies the
// abort watch deferred meanwhile.
func (h *Comm) ended() {
	h.mu.Lock()
	h.stall.Ended()
	cause := h.deferred
	h.deferred = nil
	h.mu.Unlock()
	if cause != nil {
		h.abort(cause)
	}
}

// Build splits world into the intra and rail parts the topology describes
// and returns the hierarchical communicator over them. If intra is not nil
// it is the intra part (a shared-memory or NCCL communicator of this
// node's ranks in local-rank order) and only the rails are split off. It is
// a collective on world. The hierarchy owns world, intra and the rails.
func Build(ctx context.Context, world comm.Communicator, t *topology.Topology, intra comm.Communicator, cfg Config) (*Comm, error) {
	if t == nil || world == nil {
		return nil, errors.New("hierarchy.Build: the world and its topology are required")
	}
	rank := world.Rank()
	if world.Size() != t.Size() {
		return nil, fmt.Errorf("hierarchy.Build: the world has %d ranks, the topology %d", world.Size(), t.Size())
	}
	col := t.Colors(rank)
	var made []comm.Communicator
	fail := func(err error) (*Comm, error) {
		for _, c := range made {
			c.Close()
		}
		return nil, fmt.Errorf("hierarchy.Build: rank %d: %w", rank, err)
	}
	if intra == nil {
		c, err := world.Split(ctx, col.Intra, col.IntraKey)
		if err != nil {
			return fail(fmt.Errorf("splitting the intra-node part: %w", err))
		}
		intra = c
		made = append(made, c)
	}
	rail, err := world.Split(ctx, col.Rail, col.RailKey)
	if err != nil {
		return fail(fmt.Errorf("splitting rail %d: %w", col.Rail, err))
	}
	made = append(made, rail)
	if err := agree(ctx, world, &cfg); err != nil {
		return fail(err)
	}
	cfg.Topology, cfg.Rank, cfg.World, cfg.Intra, cfg.Rail = t, rank, world, intra, rail
	h, err := New(cfg)
	if err != nil {
		return fail(err)
	}
	return h, nil
}

// agree makes every rank's choice of routes the same: the ranks exchange
// what the choice is computed from (agreed, field by field); they must
// have been given the same Cost (but for RanksPerCore), SmallBytes,
// ChunkBytes, NodeP2PViaWorld and NodeP2PViaWorldWhenCrowded (a
// node-mate's Send must go where its Recv waits), and they take the
// largest RanksPerCore (the most crowded host sets the pace), which each
// rank computes from its own host. A rank that differs is named with
// every field it differs in, its value and this rank's.
func agree(ctx context.Context, world comm.Communicator, cfg *Config) error {
	fields := agreed(cfg)
	send := make([]uint64, len(fields)+1)
	for i, f := range fields {
		send[i] = f.bits
	}
	send[len(fields)] = math.Float64bits(cfg.Cost.RanksPerCore)
	all := make([]uint64, len(send)*world.Size())
	if err := world.AllGather(ctx, comm.Host(send), comm.Host(all)); err != nil {
		return fmt.Errorf("agreeing on the cost model: %w", err)
	}
	for r := range world.Size() {
		theirs := all[r*len(send) : (r+1)*len(send)]
		var diff []string
		for i, f := range fields {
			if theirs[i] != f.bits {
				diff = append(diff, fmt.Sprintf("%s: %s here, %s there", f.name, f.show(f.bits), f.show(theirs[i])))
			}
		}
		if len(diff) > 0 {
			return fmt.Errorf("rank %d and rank %d were given different Config.Cost, SmallBytes, ChunkBytes, NodeP2PViaWorld or NodeP2PViaWorldWhenCrowded (%s): every rank must pick the same routes",
				world.Rank(), r, strings.Join(diff, "; "))
		}
		cfg.Cost.RanksPerCore = max(cfg.Cost.RanksPerCore, math.Float64frombits(theirs[len(fields)]))
	}
	return nil
}

// agreedField is one value the ranks of a hierarchy must agree on, as
// the bits they exchange.
type agreedField struct {
	name string
	bits uint64
	show func(uint64) string
}

// agreed lists the values of cfg every rank must share, named as Config
// names them.
func agreed(cfg *Config) []agreedField {
	dur := func(b uint64) string { return time.Duration(int64(b)).String() }
	rate := func(b uint64) string { return strconv.FormatFloat(math.Float64frombits(b), 'g', -1, 64) }
	num := func(b uint64) string { return strconv.FormatInt(int64(b), 10) }
	flag := func(b uint64) string { return strconv.FormatBool(b != 0) }
	bit := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	var fs []agreedField
	model := func(name string, m schedule.CostModel) {
		fs = append(fs,
			agreedField{name + ".Latency", uint64(m.Latency), dur},
			agreedField{name + ".BytesPerSec", math.Float64bits(m.BytesPerSec), rate},
			agreedField{name + ".ReduceBytesPerSec", math.Float64bits(m.ReduceBytesPerSec), rate},
			agreedField{name + ".CPUBytesPerSec", math.Float64bits(m.CPUBytesPerSec), rate},
			agreedField{name + ".Direct", bit(m.Direct), flag})
	}
	model("Cost.Intra", cfg.Cost.Intra)
	model("Cost.Inter", cfg.Cost.Inter)
	return append(fs,
		agreedField{"Cost.Wake", uint64(cfg.Cost.Wake), dur},
		agreedField{"SmallBytes", uint64(cfg.SmallBytes), num},
		agreedField{"ChunkBytes", uint64(cfg.ChunkBytes), num},
		agreedField{"NodeP2PViaWorld", bit(cfg.NodeP2PViaWorld), flag},
		agreedField{"NodeP2PViaWorldWhenCrowded", bit(cfg.NodeP2PViaWorldWhenCrowded), flag})
}

// Rank implements comm.Communicator.
func (h *Comm) Rank() int { return h.rank }

// Size implements comm.Communicator.
func (h *Comm) Size() int { return h.size }

// Topology is the shape the communicator was built for.
func (h *Comm) Topology() *topology.Topology { return h.topo }

// Flat is the world part: every rank, no hierarchy. Benchmarks compare the
// two on the same processes; the hierarchy keeps owning it.
func (h *Comm) Flat() comm.Communicator { return h.world }

// NodeP2PViaWorld reports whether Send and Recv between node-mates go
// through the world part (Config.NodeP2PViaWorld, or
// NodeP2PViaWorldWhenCrowded on a crowded host).
func (h *Comm) NodeP2PViaWorld() bool { return h.cfg.NodeP2PViaWorld }

// Parts are the intra-node part and this rank's rail.
func (h *Comm) Parts() (intra, rail comm.Communicator) { return h.intra, h.rail }

func (h *Comm) String() string {
	mode := "2D"
	switch {
	case h.flat:
		mode = "flat"
	case !h.homogeneous:
		mode = "lead-based (heterogeneous nodes)"
	}
	if h.cfg.NodeP2PViaWorld && (h.g > 1 || !h.homogeneous) { // some node has node-mates
		mode += "; node-mates' Send and Recv via the world part"
	}
	return fmt.Sprintf("%s rank %d of %d (node %d, local rank %d; %s)", h.cfg.Name, h.rank, h.size, h.node, h.local, mode)
}

// Start implements comm.Communicator. Collectives run one at a time, in
// the order they were started (tier.Exec: on the caller's goroutine when it
// blocks and nothing else is queued); Send and Recv go straight to the part
// that reaches the peer.
func (h *Comm) Start(ctx context.Context, call comm.Call) *comm.Work {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return h.startP2P(ctx, call)
	}
	return h.exec.Start(ctx, call, h.check(ctx, call), nil)
}

// Run implements tier.Runner: the blocking form of Start.
func (h *Comm) Run(ctx context.Context, call comm.Call) error {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return h.runP2P(ctx, call)
	}
	hoptrace.Mark(hoptrace.HierCall, h.rank, -1, 0, 0)
	defer hoptrace.Mark(hoptrace.HierReturn, h.rank, -1, 0, 0)
	return h.exec.Do(ctx, call, h.check(ctx, call), nil)
}

// check is this rank's own verdict on call's arguments.
func (h *Comm) check(ctx context.Context, call comm.Call) error {
	if err := tier.Validate(ctx, call, h.rank, h.size); err != nil {
		return err
	}
	return h.cfg.Stager.Check(call)
}

// runTask runs a task on the executor.
func (h *Comm) runTask(t *task) error {
	h.mu.Lock()
	aborted := h.failure.AbortCause()
	// The executor runs the tasks one at a time, in order. A call this
	// rank refuses (t.Err: a bad argument) is recorded as unknown: every
	// rank abandons it with the refusal, and the census must not take
	// the refused arguments for another call. So is a call refused because
	// the hierarchy was aborted by anything but a mismatch: it meets
	// nothing (a rank that called Abort and then a Barrier is not in a
	// mismatch with the peers still in the collective it left); after a
	// mismatch the call is kept, for the verdict (askOnce, below).
	sig := tier.SignatureOf(t.Ctx, t.Call) // with the comm.Batch it belongs to, if any
	recorded := sig
	if t.Err != nil || aborted != nil && !errors.Is(aborted, comm.ErrMismatch) {
		recorded = comm.Signature{}
	}
	h.stall.Started(t.Seq, recorded)
	h.mu.Unlock()
	defer h.ended()
	switch {
	case aborted != nil && t.Err == nil:
		if errors.Is(aborted, comm.ErrMismatch) && h.askOnce() {
			// A part's mismatch aborted the hierarchy without the
			// census's verdict (a rank had not reached the collective,
			// or the news came before this rank's call of it): with the
			// call recorded now, ask once more.
			if me := h.verdict(t.Seq); me != nil {
				aborted = me
			}
		}
		return h.opError(t.Call.Kind, t.Seq, culpritOr(aborted, -1), &comm.AbortedError{Cause: aborted})
	case t.X != nil:
		return t.X(t)
	}
	return h.run(t, sig)
}

// transportOf names what an intra-node part runs on, for errors: "shm",
// "nccl", "nexar", from its package; "intra-node part" for another.
func transportOf(c comm.Communicator) string {
	t := fmt.Sprintf("%T", c)
	if i := strings.IndexByte(t, '.'); i > 0 {
		switch pkg := strings.TrimPrefix(t[:i], "*"); pkg {
		case "shm", "nccl", "nexar":
			return pkg
		}
	}
	return "intra-node part"
}

// where says where global rank g is, beside its rank in errors: "node 1,
// local 2", and its address when the topology has one.
func (h *Comm) where(g int) string {
	s := fmt.Sprintf("node %d, local %d", h.topo.NodeOf(g), h.topo.LocalRank(g))
	if a := h.topo.Member(g).Addr; a != "" {
		s += ", " + a
	}
	return s
}

// culpritOr is the rank err blames in the hierarchy's terms (a
// *comm.PeerError the hierarchy made), or else def.
func culpritOr(err error, def int) int {
	if b, ok := comm.CulpritOf(err); ok && !b.Outside {
		return b.Rank
	}
	return def
}

// opError wraps err as an error of this rank's operation.
func (h *Comm) opError(kind comm.Kind, seq uint64, peer int, err error) error {
	return &comm.OpError{Rank: h.rank, Peer: peer, Kind: kind, Seq: seq, Comm: h.cfg.Name, Err: err}
}

// abort aborts the hierarchy and every part with cause; only the first
// call has an effect. Parts that cannot be aborted from outside are closed,
// so that their peers see an error rather than wait.
func (h *Comm) abort(cause error) {
	h.mu.Lock()
	if h.closed || h.failure.Abort(cause, false, false).Aborted == nil {
		h.mu.Unlock()
		return
	}
	close(h.abortedCh)
	announce := h.census != nil && h.stall.Aborting(cause)
	mine := h.stall.Progress()
	h.mu.Unlock()
	if announce {
		h.census.Announce(mine)
	}
	h.log.Debug("hierarchy: aborted", "comm", h.cfg.Name, "rank", h.rank, "cause", cause)
	for _, p := range h.partsOwned() {
		p.Abort(cause)
	}
}

// Abort implements comm.Control: the hierarchy and its parts are aborted
// with cause on every rank.
func (h *Comm) Abort(cause error) { h.abort(cause) }

// Aborted implements comm.Control: the channel is closed once the
// hierarchy is aborted, by Abort, by a failure one of its collectives
// met, or by a part's abort that news of a failed rank caused (watch).
func (h *Comm) Aborted() <-chan struct{} { return h.abortedCh }

// AbortCause implements comm.Control: the failure that aborted the
// hierarchy, nil before.
func (h *Comm) AbortCause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failure.AbortCause()
}

// SetProgress implements comm.Control with the census of the world part,
// which has every rank: it installs nothing (ok false) while this
// hierarchy's own Progress is installed there, as it is whenever the
// world part carries a census.
func (h *Comm) SetProgress(f func() comm.Progress) (remove func(), ok bool) {
	return h.world.SetProgress(f)
}

// Progress implements comm.Control: the world part's census, whose
// answers are each rank's hierarchy's Progress.
func (h *Comm) Progress(ctx context.Context) (answers []comm.Progress, answered []bool) {
	return h.world.Progress(ctx)
}

// Announce implements comm.Control over the world part.
func (h *Comm) Announce(p comm.Progress) { h.world.Announce(p) }

// PeerFailed reports that the process of global rank peer is gone, as the
// cluster layer's failure detector saw it: the world part (and with it
// every communicator split from it) is told, and the hierarchy is aborted
// with a *comm.PeerError naming the rank.
func (h *Comm) PeerFailed(peer int, cause error) {
	if peer < 0 || peer >= h.size || peer == h.rank {
		return
	}
	h.world.PeerFailed(peer, cause)
	h.abort(&comm.PeerError{Peer: peer, Addr: h.where(peer), Err: cause})
}

// partsOwned lists the parts, rails and intra before the world.
func (h *Comm) partsOwned() []comm.Communicator {
	return []comm.Communicator{h.rail, h.intra, h.world}
}

// Close implements comm.Communicator: operations in flight and queued fail
// with comm.ErrClosed, and the parts are closed.
func (h *Comm) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	close(h.stop)
	h.watchers.Wait()
	if h.uncensus != nil {
		h.uncensus()
	}
	h.exec.Close()
	var errs []error
	for _, p := range h.partsOwned() {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	h.exec.Wait()
	// The executor has ended: nothing uses the Stager any more.
	if c, ok := h.cfg.Stager.(interface{ Close() }); ok && h.ownStager {
		c.Close()
	}
	return errors.Join(errs...)
}

// startP2P sends or receives directly: through the intra part to a rank of
// this node (unless Config.NodeP2PViaWorld), through the world to another
// node's. One pair of ranks always uses the same part, so messages with
// one tag keep their order.
func (h *Comm) startP2P(ctx context.Context, call comm.Call) *comm.Work {
	part, pc, intra, err := h.routeP2P(ctx, call)
	if err != nil {
		return comm.Failed(err)
	}
	w := part.Start(ctx, pc)
	if !intra {
		return w
	}
	return h.intraWork(w, call.Kind, call.Peer)
}

// intraWork is the Work of a Send or Recv to peer that the intra-node
// part carries as w: w's, with the hierarchy's error. (A function of its
// own, taking no Call, so that the world's route moves nothing to the
// heap: the Call captured here did, a few hundred bytes a message.)
func (h *Comm) intraWork(w *comm.Work, kind comm.Kind, peer int) *comm.Work {
	mapErr := func(err error) error { return h.intraP2PError(kind, peer, err) }
	if done, _ := w.Test(); done {
		return w.Map(mapErr) // a Send that shared memory wrote at once
	}
	// A goroutine passes the intra part's Work on with the hierarchy's
	// error. Waiting on the part's Work itself (w.Map) measured slower:
	// in the bench's 4 processes on 2 cores the 8–256 B hierarchical
	// sendrecv took 210–240 µs against 115–170 µs with this goroutine
	// (two alternating runs each), as did completing the caller's Work
	// from the part's engine, which took 150–220 µs against 105–140.
	next := comm.NewWork()
	go func() { next.Complete(mapErr(w.Wait())) }()
	return next
}

// runP2P is the blocking Send or Recv: on the calling goroutine when the
// part that carries it can (tier.Runner).
func (h *Comm) runP2P(ctx context.Context, call comm.Call) error {
	part, pc, intra, err := h.routeP2P(ctx, call)
	if err != nil {
		return err
	}
	if r, ok := part.(tier.Runner); ok {
		err = r.Run(ctx, pc)
	} else {
		err = part.Start(ctx, pc).Wait()
	}
	if !intra {
		return err
	}
	return h.intraP2PError(call.Kind, call.Peer, err)
}

// routeP2P checks a Send or Recv and returns the part that reaches its
// peer with the call as that part numbers its ranks, and whether that is
// the intra-node part.
func (h *Comm) routeP2P(ctx context.Context, call comm.Call) (part comm.Communicator, pc comm.Call, intra bool, err error) {
	// The same memory as the collectives, whichever part carries it.
	if err := h.check(ctx, call); err != nil {
		return nil, call, false, h.opError(call.Kind, 0, call.Peer, err)
	}
	h.mu.Lock()
	closed, aborted := h.closed, h.failure.AbortCause()
	h.mu.Unlock()
	switch {
	case closed:
		return nil, call, false, h.opError(call.Kind, 0, call.Peer, comm.ErrClosed)
	case aborted != nil:
		return nil, call, false, h.opError(call.Kind, 0, call.Peer, &comm.AbortedError{Cause: aborted})
	}
	if h.topo.NodeOf(call.Peer) != h.node || h.cfg.NodeP2PViaWorld {
		return h.world, call, false, nil
	}
	call.Peer = h.topo.LocalRank(call.Peer)
	return h.intra, call, true, nil
}

// intraP2PError is the error of a Send or Recv that the intra-node part
// carried and ended with err, in the hierarchy's ranks.
func (h *Comm) intraP2PError(kind comm.Kind, peer int, err error) error {
	if err == nil {
		return nil
	}
	return h.opError(kind, 0, peer, fmt.Errorf("via the intra-node part (local rank %d): %w", h.topo.LocalRank(peer), err))
}
