package hiercomm

import (
	"testing"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// TestNodeP2PRouteFromLaunch: HIERCOMM_NODE_P2P set to world, intra or
// auto decides; unset, Options.Hierarchy.NodeP2PViaWorld (or
// NodeP2PViaWorldWhenCrowded) stands, and without them the host tier
// takes the crowded hosts' rule, the GPU tier NCCL's route. What decided
// is returned, as the Plan names it.
func TestNodeP2PRouteFromLaunch(t *testing.T) {
	const (
		viaWorld = "Hierarchy.NodeP2PViaWorld"
		crowded  = "Hierarchy.NodeP2PViaWorldWhenCrowded"
	)
	for _, c := range []struct {
		env                   string
		set, crowds, host     bool
		wantWorld, wantCrowds bool
		wantBy                string
	}{
		{"", false, false, true, false, true, "default"}, {"", true, false, true, true, false, viaWorld},
		{"", false, false, false, false, false, "default"}, {"", true, false, false, true, false, viaWorld},
		{"", false, true, false, false, true, crowded}, {"", false, true, true, false, true, crowded},
		{"", true, true, true, true, true, viaWorld},
		{"world", false, false, true, true, false, "HIERCOMM_NODE_P2P=world"}, {"world", true, false, false, true, false, "HIERCOMM_NODE_P2P=world"},
		{"intra", false, false, true, false, false, "HIERCOMM_NODE_P2P=intra"}, {"intra", true, true, true, false, false, "HIERCOMM_NODE_P2P=intra"},
		{"intra", false, false, false, false, false, "HIERCOMM_NODE_P2P=intra"},
		{"auto", false, false, true, false, true, "HIERCOMM_NODE_P2P=auto"}, {"auto", true, false, true, false, true, "HIERCOMM_NODE_P2P=auto"},
		{"auto", false, false, false, false, true, "HIERCOMM_NODE_P2P=auto"},
	} {
		cfg := hierarchy.Config{NodeP2PViaWorld: c.set, NodeP2PViaWorldWhenCrowded: c.crowds}
		by := nodeP2PRoute(&cfg, launchenv.Launch{NodeP2P: c.env}, c.host)
		if cfg.NodeP2PViaWorld != c.wantWorld || cfg.NodeP2PViaWorldWhenCrowded != c.wantCrowds || by != c.wantBy {
			t.Errorf("HIERCOMM_NODE_P2P=%q, Options' %t and when crowded %t, host tier %t: via world %t, when crowded %t, by %q; want %t, %t, %q",
				c.env, c.set, c.crowds, c.host, cfg.NodeP2PViaWorld, cfg.NodeP2PViaWorldWhenCrowded, by, c.wantWorld, c.wantCrowds, c.wantBy)
		}
	}
}
