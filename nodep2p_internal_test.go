package hiercomm

import (
	"testing"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// TestNodeP2PRouteFromLaunch: HIERCOMM_NODE_P2P set to world, intra or
// auto decides; unset, Options.Hierarchy.NodeP2PViaWorld stands, and
// without it the host tier takes the crowded hosts' rule, the GPU tier
// NCCL's route.
func TestNodeP2PRouteFromLaunch(t *testing.T) {
	for _, c := range []struct {
		env                   string
		set, host             bool
		wantWorld, wantCrowds bool
	}{
		{"", false, true, false, true}, {"", true, true, true, false},
		{"", false, false, false, false}, {"", true, false, true, false},
		{"world", false, true, true, false}, {"world", true, false, true, false},
		{"intra", false, true, false, false}, {"intra", true, true, false, false}, {"intra", false, false, false, false},
		{"auto", false, true, false, true}, {"auto", true, true, false, true}, {"auto", false, false, false, true},
	} {
		cfg := hierarchy.Config{NodeP2PViaWorld: c.set}
		nodeP2PRoute(&cfg, launchenv.Launch{NodeP2P: c.env}, c.host)
		if cfg.NodeP2PViaWorld != c.wantWorld || cfg.NodeP2PViaWorldWhenCrowded != c.wantCrowds {
			t.Errorf("HIERCOMM_NODE_P2P=%q, Options' %t, host tier %t: via world %t, when crowded %t; want %t, %t",
				c.env, c.set, c.host, cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded, c.wantWorld, c.wantCrowds)
		}
	}
}
