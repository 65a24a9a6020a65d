// Package hiercomm is the one call a Go trainer makes to get a working
// communicator on a cluster:
//
//	w, err := hiercomm.Init(ctx, hiercomm.Options{})
//	if err != nil { ... }
//	defer w.Close()
//	err = w.AllReduce(ctx, comm.Host(grads), comm.Host(grads), comm.Sum)
//
// Init reads the launch environment (hiercomm run, torchrun, Slurm,
// Kubernetes; see docs/environment.md) through cluster/launchenv's
// LoadLaunch, has cluster choose the interface and bind the sockets, joins the job's
// encrypted membership, computes the topology every rank agrees on,
// decides what to build for that layout (a Plan: NewPlan, printed by rank
// 0 at start), and builds it (see Init). The World it returns is that
// comm.Communicator plus the topology (which ranks share a node, this
// rank's local rank, the leads) and the Plan.
//
// On a GPU node (HIERCOMM_INTRA auto or nccl, NCCL and the driver found,
// a GPU visible) the World moves device memory: NCCL among the ranks of a
// node, device data staged through page-locked host memory between nodes
// (World.Device allocates it). Elsewhere it moves host memory.
//
// Options composes the tiers' own configs (nexar.Options, shm.Config,
// nccl.Config, hierarchy.Config); Init fills only what is left zero.
// Logging goes to Options.Logger, or, when it is nil, to stderr at the
// level HIERCOMM_DEBUG names (ERROR, WARN, INFO, DEBUG, TRACE).
//
// This package is the only place that wires the parts together: it imports
// cluster/launchenv (the launch environment), cluster (membership,
// sockets), topology, comm and the tiers — nexar (between nodes), shm
// (within a CPU node), nccl (within a GPU node) and hierarchy (the 2D
// composition) — and none of them imports it.
package hiercomm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// Options configure Init. The zero value reads everything from the
// environment.
//
// Each tier has its own config (Nexar, Shm, NCCL, Hierarchy), as its package
// defines it. Init copies them and fills only what the user left zero: the
// parts it wires (a shm communicator's Namespace, Rank and Size; an NCCL
// communicator's Device; a hierarchy's Topology, World, Intra and Rail),
// the Logger, the timeouts the tiers share (Timeout, FailureTimeout,
// ConnectTimeout: tier.Timeouts, the one vocabulary of every tier) and, on
// a GPU world, the hierarchy's device Stager. Every other zero field takes
// its package's default. The caller's Options are never modified; the
// Plan (World.Plan) says what each tier got.
type Options struct {
	// Launch says who this process is and how to find the others
	// (explicit options: Style "explicit"). If nil, it is read from the
	// environment with launchenv.LoadLaunch.
	Launch *launchenv.Launch
	// Getenv replaces os.Getenv when the environment is read (the launch
	// environment when Launch is nil, HIERCOMM_DEBUG when Logger is nil;
	// tests, embedding). If nil, defaults to os.Getenv.
	Getenv func(string) string
	// Detector tunes the membership failure detector. Zero fields take
	// cluster's defaults; cluster.Detector.Bound says how long a dead
	// process may go unnoticed.
	Detector cluster.Detector
	// Timeout, FailureTimeout and ConnectTimeout are the bounds every
	// tier takes, as tier.Timeouts defines them; each fills the tiers'
	// own where they are zero, and where it is zero too each tier takes
	// its default on its medium (tier.DefaultTimeouts; the Plan's
	// Timeouts say what each got).
	//
	// Timeout bounds one operation whose context has no earlier deadline:
	// the network tier's (Nexar.Timeout, where zero) and a node's shared
	// memory's (Shm.Timeout, where zero; Nexar.Timeout before it). If
	// zero, tier.DefaultTimeout (10 minutes).
	Timeout time.Duration
	// FailureTimeout is how long a peer may stay silent before the
	// transport declares it failed: a data connection's (nexar) and a
	// node's shared memory's (Shm.FailureTimeout, where zero). If zero,
	// each medium's default: 10 s on the network
	// (netmesh.DefaultFailureTimeout), 5 s on shared memory
	// (shm.DefaultFailureTimeout); tier's doc says why they differ. Every
	// rank must be given the same: Init fails, naming the rank that
	// differs, before the world forms.
	FailureTimeout time.Duration
	// ConnectTimeout bounds the forming of the data mesh once membership is
	// complete, and the attaching of a node's shared memory
	// (Shm.ConnectTimeout, where zero). If zero, tier.DefaultConnectTimeout
	// (60 s).
	ConnectTimeout time.Duration
	// Nexar tunes the network tier's collectives (timeouts, segment size,
	// cost model). Its Logger defaults to Logger; its Timeout to Timeout,
	// and it is also the shared-memory tier's (Shm.Timeout, where zero).
	Nexar nexar.Options
	// Shm tunes the shared-memory tier of a CPU node (slot and step
	// sizes, algorithm thresholds, timeouts). Init sets Namespace, Rank,
	// Size and Ranks (they are ignored here) and, on a world of several
	// nodes, Name where empty ("node 1 shm"); Timeout, FailureTimeout,
	// ConnectTimeout and Logger are filled as Options says where zero.
	Shm shm.Config
	// Hierarchy tunes the hierarchical communicator of a multi-node world
	// (SmallBytes, ChunkBytes, Stager). Init sets its parts (Topology,
	// Rank, World, Intra, Rail; ignored here), its Logger where nil and,
	// on a GPU world, NewStager where neither Stager nor NewStager is set.
	Hierarchy hierarchy.Config
	// NCCL tunes the GPU tier's communicator among the ranks of a node
	// (Stream: the caller's CUDA stream). Init sets Device (ignored here),
	// Name where empty and Logger where nil.
	NCCL nccl.Config
	// GPU, if set, is the CUDA driver and NCCL to use (tests pass the
	// fake of nccl/ncclfake). If nil, nccl.Shared loads them (the launch's
	// NCCLLibrary and CUDALibrary, else a search) when the launch
	// allows the GPU tier (HIERCOMM_INTRA auto or nccl).
	GPU *nccl.Library
	// Logger receives progress ("7/16 ranks joined"), warnings and
	// failures; each rank's start-up lines (its interface, its place in
	// the world, its communicator) at Debug, and rank 0's summary of the
	// world at Info. If nil, HIERCOMM_DEBUG (EnvDebug) names a level, like
	// NCCL_DEBUG, and the lines go to stderr at that level; without it,
	// slog.Default().
	Logger *slog.Logger
	// FlightRecorder, if positive, makes every communicator of every tier
	// keep its last FlightRecorder collectives (tier.FlightRecorder) and
	// write them to its logger at its first deadline, abort, mismatch or
	// peer failure: it fills Nexar.FlightRecorder, Shm.FlightRecorder,
	// Hierarchy.FlightRecorder and NCCL.FlightRecorder where they are
	// zero. SIGUSR1 writes every live recorder at any time (see
	// docs/errors.md). If zero, HIERCOMM_FLIGHT_RECORDER (EnvFlightRecorder)
	// says, and without it nothing is recorded.
	FlightRecorder int
}

// World is this process's place in the job: a comm.Communicator over every
// rank, and the topology.
type World struct {
	comm.Communicator
	topo    *topology.Topology
	rank    int
	cluster *cluster.Cluster // nil for a world of one
	device  *nccl.Device     // nil without the GPU tier
	launch  launchenv.Launch
	log     *slog.Logger
	plan    Plan
	// launched is the launcher's rank of each rank of this World; nil
	// where they are the same (a World Init made).
	launched []int
	// opt are the Options Init was given, after their defaults: Grow
	// builds the grown World with them.
	opt Options
	// gen is how many times the job had grown when this World was made
	// (Grow, grow.go).
	gen int
	// failures says whether the membership's failure reports still reach
	// this World's communicator: shared with the Worlds Shrink makes of it
	// (they share its connections), turned off when Grow replaces it.
	failures *atomic.Bool
	// tracing says that the log is at LevelTrace: every call is traced
	// (trace.go); traced counts them.
	tracing bool
	traced  atomic.Uint64
}

// osSys is what reading and resolving the launch ask of the operating
// system besides its variables (launchenv does no I/O of its own): the host
// name, and the job key file HIERCOMM_JOB_KEY_FILE names.
var osSys = launchenv.Sys{Hostname: os.Hostname, ReadFile: os.ReadFile}

// Init joins this process to its job and returns its World. It fails
// within the launch's join timeout (membership) plus ConnectTimeout (data
// mesh), or when ctx ends, with an error that says what was missing.
//
// Init reads the launch, joins the membership, and then decides, before
// it builds anything, what this rank's World is made of: a Plan
// (NewPlan), which rank 0 writes to the log at Info and World.Plan
// returns. It then builds what the Plan says (build, below). The World's
// communicator depends on the layout the topology shows and on the
// launch's Intra (HIERCOMM_INTRA):
//
//   - one process: a *nexar.Comm world of one (in memory, without sockets,
//     unless `hiercomm run` handed it some); with a GPU, an *nccl.Comm over
//     it;
//   - one node, several ranks: an *shm.Comm over the node's shared memory;
//     with a GPU, an *nccl.Comm (shared memory carries its control); with
//     Intra "nexar", a flat *nexar.Comm over the network transport;
//   - several nodes, one rank on each: a flat *nexar.Comm (with GPUs, an
//     *nccl.Staged over it, device data staged through host memory);
//   - several nodes, several ranks on some node: a *hierarchy.Comm, with
//     shared memory (or NCCL on GPUs, or a nexar split with Intra "nexar")
//     within each node and a nexar communicator per rail between nodes.
//
// Split of a hierarchical World is hierarchical again where the child
// spans several nodes with several ranks on some node; a child on one
// node is a split of the node's communicator (shared memory stays shared
// memory), and a child with one rank per node a split of the flat world.
func Init(ctx context.Context, opt Options) (*World, error) {
	// Where the logs go, and the Options as every tier gets them.
	getenv := opt.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	log := opt.Logger
	if log == nil {
		var err error
		if log, err = envLogger(getenv, os.Stderr); err != nil {
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
	}
	if opt.FlightRecorder == 0 {
		n, err := envFlightRecorder(getenv)
		if err != nil {
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
		opt.FlightRecorder = n
	}
	opt = opt.withDefaults(log)
	dumpOnSIGUSR1(log)

	// Who this process is: the launch, and the GPU it runs on, if any.
	var l launchenv.Launch
	if opt.Launch != nil {
		l = *opt.Launch
	} else {
		var err error
		if l, err = launchenv.LoadLaunch(getenv, osSys); err != nil {
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
	}
	l, err := l.Resolve(osSys.Hostname)
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	dev, err := chooseDevice(l, opt, log)
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	gpu := -1
	if dev != nil {
		gpu = dev.Ordinal()
	}

	// Who the others are: the membership and the topology every rank
	// agrees on (a world of one has neither sockets nor membership).
	in := setup{launch: l, dev: dev, opt: opt}
	var cl *cluster.Cluster
	if l.WorldSize == 1 && !l.Inherited && !l.Joining {
		if l.Style == "single" {
			log.Info("hiercomm: no launcher environment found (torchrun, Slurm, Kubernetes or hiercomm run); running as a world of 1")
		}
		in.topo, err = topology.New([]topology.Member{{Rank: 0, Host: l.Host, Local: l.LocalRank, Device: l.Device, Name: l.Host}})
		if err != nil {
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
	} else {
		var gossip cluster.Sockets
		gossip, in.data, err = cluster.Bind(l, log)
		if err != nil {
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
		log.Debug("hiercomm: joining", "style", l.Style, "job", l.JobID, "world_size", l.WorldSize,
			"gossip", gossip.TCP.Addr().String(), "data", in.data.Addr, "seeds", l.Seeds)
		cl, err = cluster.Join(ctx, cluster.Config{
			JobID:       l.JobID,
			Key:         l.Key,
			Self:        topology.Member{Rank: l.Rank, Host: l.Host, Local: l.LocalRank, Device: l.Device, Addr: in.data.Addr},
			WorldSize:   l.WorldSize,
			Seeds:       l.Seeds,
			Gossip:      gossip,
			JoinTimeout: l.JoinTimeout,
			Agree:       planSettings(l, gpu, opt),
			Joining:     l.Joining,
			Detector:    opt.Detector,
			Logger:      log,
		})
		if err != nil {
			in.data.Close()
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
		in.topo, in.rank = cl.Topology(), cl.Rank()
	}

	// What to build, decided before anything is built; then build it.
	fail := func(err error) (*World, error) {
		if cl != nil {
			_ = leave(cl)
		}
		return nil, err
	}
	if cl != nil && cl.Generation() > 0 {
		// Admitted into a running job: the members build the grown
		// World as this process does (Grow).
		base := &World{launch: l, log: log, opt: opt, device: dev, topo: in.topo, tracing: tracing(log)}
		w, err := grow(ctx, base, cl, in.topo, in.rank, cl.Generation(), in.data)
		if err != nil {
			return fail(fmt.Errorf("hiercomm.Init: rank %d of the grown job: %w", in.rank, err))
		}
		return w, nil
	}
	plan, err := NewPlan(l, in.topo, in.rank, gpu, opt)
	if err != nil {
		in.data.Close()
		return fail(err)
	}
	if plan.Rank == 0 {
		for line := range strings.SplitSeq(plan.String(), "\n") {
			log.Info("hiercomm: plan: " + line)
		}
	}
	c, via, err := build(ctx, plan, in) // build owns the data sockets
	if err != nil {
		return fail(err)
	}
	w := &World{Communicator: c, topo: in.topo, rank: in.rank, device: dev, launch: l, log: log, plan: plan, opt: opt,
		failures: new(atomic.Bool), tracing: tracing(log)}
	if cl != nil {
		w.ready(cl, via)
	}
	return w, nil
}

// setup is what build needs beside the Plan: the launch, the topology,
// this rank, its GPU (nil: host memory), the Options (after their
// defaults) and the data-plane sockets bound for it (none for a world of
// one).
type setup struct {
	launch launchenv.Launch
	topo   *topology.Topology
	rank   int
	dev    *nccl.Device
	opt    Options
	data   cluster.DataSocket
}

// build makes the communicator p describes, in three steps: the data
// plane between processes (p.Network), the tier among the ranks of a node
// (p.Intra), and their composition (p.Layout). It returns the
// communicator and the account of it for the log. On failure everything
// it made is closed, in one place.
func build(ctx context.Context, p Plan, in setup) (comm.Communicator, string, error) {
	var world comm.Communicator
	switch p.Network {
	case "":
		// Published, but no one dials it: every rank is on this node.
		in.data.Close()
	case "memory":
		cs, err := nexar.NewMemoryWorld(1, in.opt.Nexar)
		if err != nil {
			return nil, "", fmt.Errorf("hiercomm.Init: %w", err)
		}
		world = cs[0]
	default:
		addrs := make([]string, in.topo.Size())
		for r, m := range in.topo.Members() {
			addrs[r] = m.Addr
		}
		c, err := nexar.Connect(ctx, nexar.Config{
			Net: in.opt.netConfig(nexar.NetConfig{
				Rank:         p.Rank,
				Addrs:        addrs,
				JobKey:       in.launch.Key,
				JobID:        in.launch.JobID,
				ConnsPerPeer: in.launch.ConnsPerPeer,
				PacketConn:   in.data.Packet,
				Listener:     in.data.Listener,
				Logger:       in.opt.Nexar.Logger,
			}),
			Network: p.Network,
			Options: in.opt.Nexar,
		})
		if err != nil {
			return nil, "", fmt.Errorf("hiercomm.Init: connecting rank %d to the data mesh: %w", p.Rank, err)
		}
		world = c
	}
	return compose(ctx, p, in, world)
}

// compose builds the node tier of p and composes it with world, the data
// plane (nil where p has none), which it owns from then on: on failure it
// closes what it made and world.
func compose(ctx context.Context, p Plan, in setup, world comm.Communicator) (c comm.Communicator, via string, err error) {
	var intra comm.Communicator
	defer func() {
		if err != nil {
			for _, c := range []comm.Communicator{intra, world} {
				if c != nil {
					c.Close()
				}
			}
		}
	}()
	if p.Staged {
		world = nccl.NewStaged(world, in.dev) // it owns the world
	}
	node := func(name string) (comm.Communicator, error) {
		control := world // NCCL over a world of one itself
		if p.Layout == LayoutSingle {
			world = nil
		} else {
			var err error
			if control, err = connectIntraHost(ctx, in.launch, in.topo, p.Rank, in.opt); err != nil {
				return nil, err
			}
		}
		if p.Intra == "shm" {
			return control, nil
		}
		c, err := nccl.New(ctx, control, in.opt.ncclConfig(in.dev, name)) // closes control on failure
		if err != nil {
			return nil, fmt.Errorf("hiercomm.Init: rank %d: NCCL among the ranks of node %d: %w", p.Rank, p.Node, err)
		}
		return c, nil
	}
	switch p.Intra {
	case "shm":
		intra, err = node("")
	case "nccl":
		name := ""
		if p.Layout == LayoutHierarchy {
			name = fmt.Sprintf("node %d nccl", p.Node)
		}
		intra, err = node(name)
	}
	if err != nil {
		return nil, "", err
	}
	switch p.Layout {
	case LayoutSingle:
		if intra != nil {
			return intra, p.Via(), nil
		}
		return world, p.Via(), nil
	case LayoutNode:
		if world != nil {
			// A GPU world of one that the launcher gave sockets: NCCL
			// carries everything.
			world.Close()
		}
		return intra, p.Via(), nil
	case LayoutFlat:
		return world, p.Via(), nil
	}
	return composeHierarchy(ctx, p, in, world, intra)
}

// composeHierarchy builds the hierarchical communicator of p over world
// and intra (nil: a split of the world within each node, Intra "nexar").
// On success it owns both; on failure it closes neither.
func composeHierarchy(ctx context.Context, p Plan, in setup, world, intra comm.Communicator) (comm.Communicator, string, error) {
	host := p.GPU < 0
	cfg := hierarchyConfig(in.opt, p.intraCost(in.opt), in.launch, in.topo, p.Rank, host)
	switch p.Intra {
	case "shm":
		if cfg.NewIntra == nil {
			cfg.NewIntra = shrunkIntra(in.launch, in.opt)
		}
	case "nccl":
		if cfg.Stager == nil && cfg.NewStager == nil {
			cfg.NewStager = func() hierarchy.Stager { return nccl.NewStager(in.dev) }
		}
		if cfg.NewIntra == nil {
			cfg.NewIntra = shrunkNCCL(in.launch, in.dev, in.opt)
		}
	}
	h, err := hierarchy.Build(ctx, world, in.topo, intra, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("hiercomm.Init: %w", err)
	}
	via := p.Via()
	if host {
		nameParts(h, in.topo, p.Rank)
		if h.NodeP2PViaWorld() && intra != nil {
			via += "; Send and Recv within nodes over " + p.Network
			if !cfg.NodeP2PViaWorld {
				via += " (more processes than cores)"
			}
		}
	}
	return h, via, nil
}

// ready wires membership failures into the World's communicator, writes
// the topology dump, and logs the World.
func (w *World) ready(cl *cluster.Cluster, via string) {
	// The failure detector sees processes that stop answering without
	// closing anything (a kill -9, a hung host, a cut cable): every
	// communicator that includes the dead rank is aborted with an error
	// naming it, on every survivor.
	// Failures name the member: its rank here is looked up by its name,
	// since the membership renumbers the world when it grows (Grow).
	c, topo, rank, l, log, on := w.Communicator, w.topo, w.rank, w.launch, w.log, w.failures
	w.cluster = cl
	on.Store(true)
	ranks := make(map[string]int, topo.Size())
	for r, m := range topo.Members() {
		ranks[m.Name] = r
	}
	cl.OnFailure(func(f *cluster.Failure) {
		if r, ok := ranks[f.Member.Name]; ok && on.Load() {
			c.PeerFailed(r, f)
		}
	})
	if rank == 0 && l.TopoDumpFile != "" {
		if err := dumpTopology(l.TopoDumpFile, topo); err != nil {
			log.Warn("hiercomm: could not write the topology dump", "file", l.TopoDumpFile, "err", err)
		}
	}
	log.Debug("hiercomm: ready", "rank", rank, "size", topo.Size(), "node", topo.NodeOf(rank),
		"local_rank", topo.LocalRank(rank), "local_size", topo.LocalSize(rank), "via", via, "style", l.Style)
	if rank == 0 {
		log.Info("hiercomm: world ready", "size", topo.Size(), "nodes", topo.NumNodes(), "via", via, "style", l.Style, "job", l.JobID)
	}
}

// Plan is what Init built this World from (see NewPlan); a World made by
// Shrink keeps the Plan of the World it shrank from.
func (w *World) Plan() Plan { return w.plan }

// Device is the GPU this rank's communicator moves data of, or nil when
// the world moves host memory: with a GPU, every collective takes device
// buffers of this device (allocate them with Device.Alloc, or pass a CUDA
// pointer with comm.Device).
func (w *World) Device() *nccl.Device { return w.device }

// dumpTopology writes topo as JSON to path.
func dumpTopology(path string, topo *topology.Topology) error {
	b, err := topo.MarshalJSON()
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// leave leaves the membership gracefully, so the others do not count this
// process as failed, waiting at most a few seconds for the leave to spread.
func leave(cl *cluster.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.Leave(ctx)
}

// Topology is the job's topology: nodes, local ranks, leads, rails. Every
// rank holds the same one.
func (w *World) Topology() *topology.Topology { return w.topo }

// Node is the index of this rank's node.
func (w *World) Node() int { return w.topo.NodeOf(w.rank) }

// LocalRank is this rank's index among the ranks of its node.
func (w *World) LocalRank() int { return w.topo.LocalRank(w.rank) }

// LocalSize is the number of ranks on this rank's node.
func (w *World) LocalSize() int { return w.topo.LocalSize(w.rank) }

// JobID is the job's id.
func (w *World) JobID() string { return w.launch.JobID }

// Close closes the communicator (its splits fail from then on) and leaves
// the membership gracefully, so the others do not count this process as
// failed. It waits at most a few seconds for the leave to spread.
func (w *World) Close() error {
	err := w.Communicator.Close()
	if w.cluster != nil {
		err = errors.Join(err, leave(w.cluster))
	}
	return err
}
