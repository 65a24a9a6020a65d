// Package hiercomm is the one call a Go trainer makes to get a working
// communicator on a cluster:
//
//	w, err := hiercomm.Init(ctx, hiercomm.Options{})
//	if err != nil { ... }
//	defer w.Close()
//	err = w.AllReduce(ctx, comm.Host(grads), comm.Host(grads), comm.Sum)
//
// Init reads the launch environment (hiercomm run, torchrun, Slurm,
// Kubernetes; see docs/environment.md) through cluster.LoadLaunch, has
// cluster choose the interface and bind the sockets, joins the job's
// encrypted membership, computes the topology every rank agrees on, and
// builds the communicator that layout calls for (see Init). The World it
// returns is that comm.Communicator plus the topology: which ranks share a
// node, this rank's local rank, the leads.
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
// cluster (membership, launch environment, sockets), topology, comm and the
// tiers — nexar (between nodes), shm (within a CPU node), nccl (within a
// GPU node) and hierarchy (the 2D composition) — and none of them imports
// it.
package hiercomm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
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
// the Logger, the timeouts
// the tiers share (FailureTimeout, ConnectTimeout, Nexar.Timeout) and, on
// a GPU world, the hierarchy's device Stager. Every other zero field takes
// its package's default. The caller's Options are never modified.
type Options struct {
	// Launch says who this process is and how to find the others
	// (explicit options: Style "explicit"). If nil, it is read from the
	// environment with cluster.LoadLaunch.
	Launch *cluster.Launch
	// Getenv replaces os.Getenv when the environment is read (the launch
	// environment when Launch is nil, HIERCOMM_DEBUG when Logger is nil;
	// tests, embedding). If nil, defaults to os.Getenv.
	Getenv func(string) string
	// Detector tunes the membership failure detector. Zero fields take
	// cluster's defaults; cluster.Detector.Bound says how long a dead
	// process may go unnoticed.
	Detector cluster.Detector
	// FailureTimeout is how long a peer may stay silent before the
	// transport declares it failed: a data connection's (nexar) and a
	// node's shared memory's (Shm.FailureTimeout, where zero). If zero,
	// each tier's default (nexar.DefaultFailureTimeout,
	// shm.DefaultFailureTimeout).
	FailureTimeout time.Duration
	// ConnectTimeout bounds the forming of the data mesh once membership is
	// complete, and the attaching of a node's shared memory
	// (Shm.ConnectTimeout, where zero). If zero, each tier's default
	// (nexar.DefaultConnectTimeout, shm.DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Nexar tunes the network tier's collectives (timeouts, segment size,
	// cost model). Its Logger defaults to Logger; its Timeout, if set, is
	// also the shared-memory tier's (Shm.Timeout, where zero).
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
	launch  cluster.Launch
	log     *slog.Logger
}

// Init joins this process to its job and returns its World. It fails
// within the launch's join timeout (membership) plus ConnectTimeout (data
// mesh), or when ctx ends, with an error that says what was missing.
//
// The World's communicator depends on the layout the topology shows and
// on the launch's Intra (HIERCOMM_INTRA):
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
	var l cluster.Launch
	if opt.Launch != nil {
		l = *opt.Launch
	} else {
		var err error
		if l, err = cluster.LoadLaunch(getenv); err != nil {
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
	}
	l, err := l.Resolve()
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	dev, err := chooseDevice(l, opt, log)
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	if l.WorldSize == 1 && !l.Inherited {
		return initSingle(ctx, l, dev, opt, log)
	}
	gossip, data, err := l.Bind(log)
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	log.Debug("hiercomm: joining", "style", l.Style, "job", l.JobID, "world_size", l.WorldSize,
		"gossip", gossip.TCP.Addr().String(), "data", data.Addr, "seeds", l.Seeds)
	cl, err := cluster.Join(ctx, cluster.Config{
		JobID:       l.JobID,
		Key:         l.Key,
		Self:        topology.Member{Rank: l.Rank, Host: l.Host, Local: l.LocalRank, Device: l.Device, Addr: data.Addr},
		WorldSize:   l.WorldSize,
		Seeds:       l.Seeds,
		Gossip:      gossip,
		JoinTimeout: l.JoinTimeout,
		Detector:    opt.Detector,
		Logger:      log,
	})
	if err != nil {
		data.Close()
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	topo, rank := cl.Topology(), cl.Rank()
	if topo.NumNodes() == 1 && topo.Size() > 1 && (dev != nil || useSHM(l, topo)) {
		data.Close() // published, but no one dials it: every rank is here
		var c comm.Communicator
		c, err = connectIntraHost(ctx, l, topo, rank, opt)
		via := "shm"
		if err == nil && dev != nil {
			c, err = nccl.New(ctx, c, opt.ncclConfig(dev, ""))
			via = "nccl"
		}
		if err != nil {
			_ = leave(cl)
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
		return ready(c, cl, topo, rank, l, log, via).withDevice(dev), nil
	}
	addrs := make([]string, topo.Size())
	for r, m := range topo.Members() {
		addrs[r] = m.Addr
	}
	c, err := nexar.Connect(ctx, nexar.Config{
		Net: nexar.NetConfig{
			Rank:           rank,
			Addrs:          addrs,
			JobKey:         l.Key,
			JobID:          l.JobID,
			FailureTimeout: opt.FailureTimeout,
			ConnectTimeout: opt.ConnectTimeout,
			ConnsPerPeer:   l.ConnsPerPeer,
			PacketConn:     data.Packet,
			Listener:       data.Listener,
			Logger:         log,
		},
		Network: l.Network,
		Options: opt.Nexar,
	})
	if err != nil {
		_ = leave(cl)
		return nil, fmt.Errorf("hiercomm.Init: connecting rank %d to the data mesh: %w", rank, err)
	}
	if dev != nil {
		g, via, err := connectGPU(ctx, c, l, topo, rank, dev, opt)
		if err != nil {
			_ = leave(cl)
			return nil, err
		}
		return ready(g, cl, topo, rank, l, log, via).withDevice(dev), nil
	}
	if !hierarchical(topo) {
		return ready(c, cl, topo, rank, l, log, l.Network), nil
	}
	h, via, err := buildHierarchy(ctx, c, l, topo, rank, opt)
	if err != nil {
		c.Close()
		_ = leave(cl)
		return nil, err
	}
	return ready(h, cl, topo, rank, l, log, via), nil
}

// ready wires membership failures into c, writes the topology dump, and
// returns the World.
func ready(c comm.Communicator, cl *cluster.Cluster, topo *topology.Topology, rank int, l cluster.Launch, log *slog.Logger, via string) *World {
	// The failure detector sees processes that stop answering without
	// closing anything (a kill -9, a hung host, a cut cable): every
	// communicator that includes the dead rank is aborted with an error
	// naming it, on every survivor.
	cl.OnFailure(func(f *cluster.Failure) { c.PeerFailed(f.Rank, f) })
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
	return &World{Communicator: c, topo: topo, rank: rank, cluster: cl, launch: l, log: log}
}

// initSingle is a world of one process: no membership, no sockets.
func initSingle(ctx context.Context, l cluster.Launch, dev *nccl.Device, opt Options, log *slog.Logger) (*World, error) {
	if l.Style == "single" {
		log.Info("hiercomm: no launcher environment found (torchrun, Slurm, Kubernetes or hiercomm run); running as a world of 1")
	}
	topo, err := topology.New([]topology.Member{{Rank: 0, Host: l.Host, Local: l.LocalRank, Device: l.Device, Name: l.Host}})
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	cs, err := nexar.NewMemoryWorld(1, opt.Nexar)
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: %w", err)
	}
	w := &World{Communicator: cs[0], topo: topo, launch: l, log: log}
	if dev != nil {
		c, err := nccl.New(ctx, cs[0], opt.ncclConfig(dev, ""))
		if err != nil {
			return nil, fmt.Errorf("hiercomm.Init: %w", err)
		}
		w.Communicator, w.device = c, dev
	}
	return w, nil
}

// withDevice records the GPU the world's buffers live on.
func (w *World) withDevice(dev *nccl.Device) *World {
	w.device = dev
	return w
}

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
