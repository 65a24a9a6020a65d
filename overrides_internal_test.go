package hiercomm

import (
	"math"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/shm"
)

// Each override is an input of the decision its tier makes, and reaches
// the Plan as that decision with its name: the hierarchy's routes are
// hierarchy.Config.Switch of the config Init builds (hierarchyConfig),
// shared memory's shm.Config.OneStepReduce, the node-mates' route
// nodeP2PRoute's; without an override, the cost model (or the default)
// is named. The Plan's rows say the same.
func TestOverridesReachThePlan(t *testing.T) {
	for _, tc := range []struct {
		name      string
		layout    []int
		l         launchenv.Launch
		opt       Options
		gpu       bool   // a GPU world (NCCL within nodes)
		hier      string // the hierarchy AllReduce's Choice, By; "" for the model's
		hierBy    string
		shmChoice string // shared memory's AllReduce
		shmBy     string
		nodeP2P   string
		nodeBy    string
	}{
		{name: "the models", layout: []int{2, 2}, hierBy: ByCostModel,
			shmChoice: "one step below 192001 B, two steps from it", shmBy: ByCostModel, nodeP2P: "world when crowded", nodeBy: "default"},
		{name: "Hierarchy.SmallBytes", layout: []int{2, 2}, opt: Options{Hierarchy: hierarchy.Config{SmallBytes: 1 << 10}},
			hier: "leads below 1025 B, 2d from 1025 B", hierBy: "Hierarchy.SmallBytes",
			shmChoice: "one step below 192001 B, two steps from it", shmBy: ByCostModel, nodeP2P: "world when crowded", nodeBy: "default"},
		{name: "Hierarchy.SmallBytes negative", layout: []int{2, 2}, opt: Options{Hierarchy: hierarchy.Config{SmallBytes: -1}},
			hier: "2d", hierBy: "Hierarchy.SmallBytes",
			shmChoice: "one step below 192001 B, two steps from it", shmBy: ByCostModel, nodeP2P: "world when crowded", nodeBy: "default"},
		{name: "Hierarchy.SmallBytes the largest", layout: []int{2, 2}, opt: Options{Hierarchy: hierarchy.Config{SmallBytes: math.MaxInt}},
			hier: "leads", hierBy: "Hierarchy.SmallBytes",
			shmChoice: "one step below 192001 B, two steps from it", shmBy: ByCostModel, nodeP2P: "world when crowded", nodeBy: "default"},
		{name: "Shm.SmallReduceBytes", layout: []int{2, 2}, opt: Options{Shm: shm.Config{SmallReduceBytes: 1 << 10}}, hierBy: ByCostModel,
			shmChoice: "one step below 513 B, two steps from it", shmBy: "Shm.SmallReduceBytes", nodeP2P: "world when crowded", nodeBy: "default"},
		{name: "Shm.SmallReduceBytes negative, one node", layout: []int{4}, opt: Options{Shm: shm.Config{SmallReduceBytes: -1}},
			shmChoice: "two steps", shmBy: "Shm.SmallReduceBytes"},
		{name: "Shm.SmallReduceBytes past half a slot", layout: []int{4}, opt: Options{Shm: shm.Config{SmallReduceBytes: 1 << 40}},
			shmChoice: "one step below 2097153 B, two steps from it", shmBy: "Shm.SmallReduceBytes"},
		{name: "HIERCOMM_NODE_P2P", layout: []int{2, 2}, l: launchenv.Launch{NodeP2P: "intra"}, opt: Options{Hierarchy: hierarchy.Config{NodeP2PViaWorld: true}}, hierBy: ByCostModel,
			shmChoice: "one step below 192001 B, two steps from it", shmBy: ByCostModel, nodeP2P: "intra", nodeBy: "HIERCOMM_NODE_P2P=intra"},
		{name: "Hierarchy.NodeP2PViaWorld", layout: []int{2, 2}, opt: Options{Hierarchy: hierarchy.Config{NodeP2PViaWorld: true}}, hierBy: ByCostModel,
			shmChoice: "one step below 192001 B, two steps from it", shmBy: ByCostModel, nodeP2P: "world", nodeBy: "Hierarchy.NodeP2PViaWorld"},
		{name: "Hierarchy.NodeP2PViaWorldWhenCrowded on GPUs", layout: []int{2, 2}, gpu: true, opt: Options{Hierarchy: hierarchy.Config{NodeP2PViaWorldWhenCrowded: true}}, hierBy: ByCostModel,
			nodeP2P: "world when crowded", nodeBy: "Hierarchy.NodeP2PViaWorldWhenCrowded"},
		{name: "NCCL's own route on GPUs", layout: []int{2, 2}, gpu: true, hierBy: ByCostModel, nodeP2P: "intra", nodeBy: "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpu := -1
			if tc.gpu {
				gpu = 0
			}
			topo := planTopology(t, tc.layout...)
			p, err := NewPlan(tc.l, topo, 0, gpu, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Route{}
			for _, r := range p.Routes {
				got[strings.Fields(r.Tier)[0]+" "+r.Op] = r
			}
			if tc.hierBy != "" {
				r, ok := got["hierarchy AllReduce"]
				want := tc.hier
				if want == "" {
					// The tier's own decision on the config Init gives it.
					cfg := hierarchyConfig(tc.opt.withDefaults(nil), p.intraCost(tc.opt.withDefaults(nil)), tc.l, topo, 0, gpu < 0)
					at, forced := cfg.Switch(schedule.AllReduceOp, 2, 2)
					if forced {
						t.Fatalf("the hierarchy's config has an override: %+v", cfg)
					}
					want = switchName(at)
				}
				if !ok || r.Choice != want || r.By != tc.hierBy {
					t.Errorf("hierarchy AllReduce: %+v (found %t), want %q by %q", r, ok, want, tc.hierBy)
				}
			}
			if r, ok := got["shm AllReduce"]; tc.shmBy != "" && (!ok || r.Choice != tc.shmChoice || r.By != tc.shmBy) {
				t.Errorf("shm AllReduce: %+v (found %t), want %q by %q", r, ok, tc.shmChoice, tc.shmBy)
			}
			if p.NodeP2P != tc.nodeP2P || p.NodeP2PBy != tc.nodeBy {
				t.Errorf("node p2p: %q by %q, want %q by %q", p.NodeP2P, p.NodeP2PBy, tc.nodeP2P, tc.nodeBy)
			}
			s := p.String()
			for _, r := range p.Routes {
				if row := r.Choice + " (" + r.By + ")"; !strings.Contains(s, row) {
					t.Errorf("the Plan's rows do not say %q:\n%s", row, s)
				}
			}
			if tc.nodeBy != "" && !strings.Contains(s, "("+tc.nodeBy+")") {
				t.Errorf("the Plan's node p2p row does not say %q:\n%s", tc.nodeBy, s)
			}
		})
	}
}
