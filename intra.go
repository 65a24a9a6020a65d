package hiercomm

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// useSHM reports whether a one-node world talks through shared memory
// alone: a world on one node with several ranks, unless the launch asks
// for the network transport. (A multi-node world is hierarchical, with
// shared memory inside each node: see buildHierarchy.)
func useSHM(l cluster.Launch, topo *topology.Topology) bool {
	return l.Intra != "nexar" && topo.NumNodes() == 1 && topo.Size() > 1
}

// hierarchical reports whether the world gets the 2D communicator: more
// than one node, and more than one rank on some node.
func hierarchical(topo *topology.Topology) bool {
	g, homogeneous := topo.RanksPerNode()
	return topo.NumNodes() > 1 && (g > 1 || !homogeneous)
}

// buildHierarchy composes the hierarchical communicator over the flat
// world: shared memory among the ranks of each node (or a split of the
// world with HIERCOMM_INTRA=nexar) and one split of the world per rail.
func buildHierarchy(ctx context.Context, world comm.Communicator, l cluster.Launch, topo *topology.Topology, rank int, opt Options) (comm.Communicator, string, error) {
	var intra comm.Communicator
	via := "hierarchy: nexar within nodes, " + l.Network + " between"
	if l.Intra != "nexar" {
		c, err := connectIntraHost(ctx, l, topo, rank, opt)
		if err != nil {
			return nil, "", err
		}
		intra = c
		via = "hierarchy: shm within nodes, " + l.Network + " between"
	}
	intraCost := opt.Nexar.Cost
	if intra != nil {
		intraCost = opt.Shm.Cost.Or(shm.DefaultCost)
	}
	cfg := hierarchyConfig(opt, intraCost, l, topo, rank, true)
	if intra != nil && cfg.NewIntra == nil {
		cfg.NewIntra = shrunkIntra(l, opt) // shrink.go
	}
	h, err := hierarchy.Build(ctx, world, topo, intra, cfg)
	if err != nil {
		if intra != nil {
			intra.Close()
		}
		return nil, "", fmt.Errorf("hiercomm.Init: %w", err)
	}
	nameParts(h, topo, rank)
	if h.NodeP2PViaWorld() && intra != nil {
		via += "; Send and Recv within nodes over " + l.Network
		if !cfg.NodeP2PViaWorld {
			via += " (more processes than cores)"
		}
	}
	return h, via, nil
}

// nameParts names the parts that hierarchy.Build split off the world as
// the hierarchy's errors name them, in their own errors, logs and flight
// recorders too: "rail 0", and "node 1 nexar" for a node's part with
// HIERCOMM_INTRA=nexar (a node's shared memory is named as it is made:
// connectIntraHost).
func nameParts(h *hierarchy.Comm, topo *topology.Topology, rank int) {
	type namer interface{ SetName(string) }
	intra, rail := h.Parts()
	if n, ok := rail.(namer); ok {
		n.SetName(fmt.Sprintf("rail %d", topo.LocalRank(rank)))
	}
	if n, ok := intra.(namer); ok {
		n.SetName(fmt.Sprintf("node %d nexar", topo.NodeOf(rank)))
	}
}

// hierarchyConfig is the Options' hierarchy.Config as the launch completes
// it, for the host tier (host) and the GPU tier alike: its cost model
// (hierarchyCost, with intra the node part's model) and the node-mates'
// route (nodeP2PRoute).
func hierarchyConfig(opt Options, intra schedule.CostModel, l cluster.Launch, topo *topology.Topology, rank int, host bool) hierarchy.Config {
	cfg := opt.Hierarchy
	cfg.Cost = hierarchyCost(cfg.Cost, intra, opt.Nexar.Cost, l, topo, rank)
	nodeP2PRoute(&cfg, l, host)
	return cfg
}

// nodeP2PRoute sets cfg's route for Send and Recv between node-mates as
// the launch says (HIERCOMM_NODE_P2P): "world" and "intra" choose it,
// "auto" leaves it to the hosts' crowding
// (hierarchy.Config.NodeP2PViaWorldWhenCrowded), and unset leaves the
// Options' choice, which on the host tier is auto unless they chose the
// world. (On the GPU tier unset means NCCL's own route: the world's
// would stage every message through host memory.)
func nodeP2PRoute(cfg *hierarchy.Config, l cluster.Launch, host bool) {
	switch l.NodeP2P {
	case "world":
		cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded = true, false
	case "intra":
		cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded = false, false
	case "auto":
		cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded = false, true
	default:
		if host && !cfg.NodeP2PViaWorld {
			cfg.NodeP2PViaWorldWhenCrowded = true
		}
	}
}

// hierarchyCost is the hierarchy's cost model: the user's (c), each part
// of it left zero filled from its transport's model (intra, inter), and
// RanksPerCore, if zero, from the processes that share this host's cores:
// those the local launcher started together (Launch.HostProcs), else the
// ranks of this node. (hierarchy.Build takes the largest over the ranks.)
func hierarchyCost(c schedule.Hierarchy, intra, inter schedule.CostModel, l cluster.Launch, topo *topology.Topology, rank int) schedule.Hierarchy {
	if c.Intra == (schedule.CostModel{}) {
		c.Intra = intra
	}
	if c.Inter == (schedule.CostModel{}) {
		c.Inter = inter
	}
	if c.Wake == 0 {
		c.Wake = schedule.DefaultWake
	}
	if c.RanksPerCore == 0 {
		procs := l.HostProcs
		if procs == 0 {
			procs = len(topo.Nodes()[topo.NodeOf(rank)].Ranks)
		}
		c.RanksPerCore = float64(procs) / float64(runtime.NumCPU())
	}
	return c
}

// connectIntraHost joins this rank to the shared memory of its node's
// ranks (local rank order). On a world of several nodes it is a part,
// named as the hierarchy's errors name it ("node 1 shm", unless
// Options.Shm names it), whose logs name this process by its global rank
// first (shm.Config.Ranks).
func connectIntraHost(ctx context.Context, l cluster.Launch, topo *topology.Topology, rank int, opt Options) (comm.Communicator, error) {
	node := topo.Nodes()[topo.NodeOf(rank)]
	cfg := opt.Shm
	cfg.Namespace, cfg.Rank, cfg.Size = shmNamespace(l, topo.Member(rank).Host), topo.LocalRank(rank), len(node.Ranks)
	cfg.Ranks = nil
	if topo.NumNodes() > 1 {
		cfg.Name = cmp.Or(cfg.Name, fmt.Sprintf("node %d shm", topo.NodeOf(rank)))
		cfg.Ranks = node.Ranks
		// A part runs without eager broadcasts: the hierarchy refuses a
		// part's call without its buffers once the collective failed
		// elsewhere (tier.WithoutBuffers), and shared memory
		// chooses the eager or the staged way by the call's size, so a
		// refusing rank and its node-mates would choose apart
		// (shm.Config.EagerBytes).
		cfg.EagerBytes = -1
	}
	if cfg.HostProcs == 0 {
		cfg.HostProcs = l.HostProcs
	}
	c, err := shm.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: joining rank %d to its node's shared memory: %w", rank, err)
	}
	return c, nil
}

// shmNamespace names the job's shared-memory segments on this host: the
// job id, a hash of the job key and id (two jobs that reuse an id never
// meet, and the key is not guessable from the name), and the host id.
func shmNamespace(l cluster.Launch, host string) string {
	h := sha256.New()
	h.Write([]byte("hiercomm shm namespace v1\x00"))
	h.Write([]byte(l.JobID))
	h.Write([]byte{0})
	h.Write(l.Key)
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	clean := func(s string, n int) string {
		s = strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
				return r
			}
			return '_'
		}, s)
		if len(s) > n {
			s = s[:n]
		}
		return s
	}
	return fmt.Sprintf("%s-%s-%s", clean(l.JobID, 40), sum, clean(host, 40))
}
