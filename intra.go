package hiercomm

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

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
func hierarchyConfig(opt Options, intra schedule.CostModel, l launchenv.Launch, topo *topology.Topology, rank int, host bool) hierarchy.Config {
	cfg := opt.Hierarchy
	cfg.Cost = hierarchyCost(cfg.Cost, intra, opt.Nexar.Cost, l, topo, rank)
	nodeP2PRoute(&cfg, l, host)
	return cfg
}

// intraCost is the cost model of p's node tier, which a hierarchy's
// model takes for its intra part where the user gave none: shared
// memory's, the network's for a split of it (Intra "nexar"), and for
// NCCL, which has no model of its own yet, the defaults.
func (p Plan) intraCost(opt Options) schedule.CostModel {
	switch p.Intra {
	case "shm":
		return opt.Shm.Cost.Or(shm.DefaultCost)
	case "nccl":
		return schedule.CostModel{}
	}
	return opt.Nexar.Cost
}

// nodeP2PRoute sets cfg's route for Send and Recv between node-mates as
// the launch says (HIERCOMM_NODE_P2P): "world" and "intra" choose it,
// "auto" leaves it to the hosts' crowding
// (hierarchy.Config.NodeP2PViaWorldWhenCrowded), and unset leaves the
// Options' choice, which on the host tier is auto unless they chose the
// world. (On the GPU tier unset means NCCL's own route: the world's
// would stage every message through host memory.) It returns what chose
// the route, as the Plan names it: the launch's variable and value, the
// Options' field, or "default".
func nodeP2PRoute(cfg *hierarchy.Config, l launchenv.Launch, host bool) (by string) {
	switch l.NodeP2P {
	case "world":
		cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded = true, false
	case "intra":
		cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded = false, false
	case "auto":
		cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded = false, true
	}
	switch {
	case l.NodeP2P != "":
		return launchenv.EnvNodeP2P + "=" + l.NodeP2P
	case cfg.NodeP2PViaWorld:
		return "Hierarchy.NodeP2PViaWorld"
	case cfg.NodeP2PViaWorldWhenCrowded:
		return "Hierarchy.NodeP2PViaWorldWhenCrowded"
	case host:
		cfg.NodeP2PViaWorldWhenCrowded = true
	}
	return "default"
}

// hierarchyCost is the hierarchy's cost model: the user's (c), each part
// of it left zero filled from its transport's model (intra, inter), and
// RanksPerCore, if zero, from the processes that share this host's cores:
// those the local launcher started together (Launch.HostProcs), else the
// ranks of this node. (hierarchy.Build takes the largest over the ranks.)
func hierarchyCost(c schedule.Hierarchy, intra, inter schedule.CostModel, l launchenv.Launch, topo *topology.Topology, rank int) schedule.Hierarchy {
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
		c.RanksPerCore = ranksPerCore(l, topo.LocalSize(rank))
	}
	return c
}

// ranksPerCore is how many processes share each of this host's cores:
// those the local launcher started together (Launch.HostProcs), else
// localSize, the ranks of this node.
func ranksPerCore(l launchenv.Launch, localSize int) float64 {
	procs := l.HostProcs
	if procs == 0 {
		procs = localSize
	}
	return float64(procs) / float64(runtime.NumCPU())
}

// connectIntraHost joins this rank to the shared memory of its node's
// ranks (local rank order). On a world of several nodes it is a part,
// named as the hierarchy's errors name it ("node 1 shm", unless
// Options.Shm names it), whose logs name this process by its global rank
// first (shm.Config.Ranks).
func connectIntraHost(ctx context.Context, l launchenv.Launch, topo *topology.Topology, rank int, opt Options) (comm.Communicator, error) {
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
func shmNamespace(l launchenv.Launch, host string) string {
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
