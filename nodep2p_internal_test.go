package hiercomm

import (
	"testing"

	"github.com/hiercomm/hiercomm/cluster"
)

// TestNodeP2PViaWorldFromLaunch: HIERCOMM_NODE_P2P set to world or intra
// decides; unset, Options.Hierarchy.NodeP2PViaWorld stands.
func TestNodeP2PViaWorldFromLaunch(t *testing.T) {
	for _, c := range []struct {
		env       string
		set, want bool
	}{
		{"", false, false}, {"", true, true},
		{"world", false, true}, {"world", true, true},
		{"intra", false, false}, {"intra", true, false},
	} {
		if got := nodeP2PViaWorld(c.set, cluster.Launch{NodeP2P: c.env}); got != c.want {
			t.Errorf("HIERCOMM_NODE_P2P=%q, Options' %t: %t, want %t", c.env, c.set, got, c.want)
		}
	}
}
