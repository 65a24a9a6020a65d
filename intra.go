package hiercomm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// useSHM reports whether the ranks talk through shared memory: a world on
// one node with several ranks, unless the launch asks for the network
// transport. A multi-node world needs the hierarchical communicator to put
// shared memory inside each node; until it exists, such a world is flat.
func useSHM(l cluster.Launch, topo *topology.Topology, log *slog.Logger) bool {
	oneNode := topo.NumNodes() == 1 && topo.Size() > 1
	switch l.Intra {
	case "nexar":
		return false
	case "shm":
		if !oneNode {
			log.Warn("hiercomm: shared memory carries only the ranks of one node, and this world spans several: using the network transport for every rank (" + cluster.EnvIntra + "=shm)")
		}
	}
	return oneNode
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

// connectSHM builds the shared-memory communicator of a one-node world.
func connectSHM(ctx context.Context, l cluster.Launch, topo *topology.Topology, rank int, opt Options, log *slog.Logger) (comm.Communicator, error) {
	c, err := shm.New(ctx, shm.Config{
		Namespace:      shmNamespace(l, topo.Member(rank).Host),
		Rank:           rank,
		Size:           topo.Size(),
		Timeout:        opt.Collectives.Timeout,
		FailureTimeout: opt.FailureTimeout,
		ConnectTimeout: opt.ConnectTimeout,
		Logger:         log,
	})
	if err != nil {
		return nil, fmt.Errorf("hiercomm.Init: joining rank %d to the node's shared memory: %w", rank, err)
	}
	return c, nil
}
