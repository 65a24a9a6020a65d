package hiercomm_test

import (
	"fmt"
	"strings"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/topology"
)

// NewPlan says what Init would build, without starting anything: here for
// rank 1 of four nodes of one rank each over plain TCP, with the route
// each of the network's collectives takes by size. (Init logs the whole
// Plan on rank 0 at start; `hiercomm plan FILE` prints it for a topology
// file.)
func ExampleNewPlan() {
	var members []topology.Member
	for n := range 4 {
		members = append(members, topology.Member{Rank: n, Host: fmt.Sprintf("node-%d", n), Device: -1})
	}
	topo, err := topology.New(members)
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := hiercomm.NewPlan(launchenv.Launch{Network: "tcp"}, topo, 1, -1, hiercomm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Layout, "-", p.Via())
	for _, r := range p.Routes {
		fmt.Printf("%s %s: %s\n", r.Tier, r.Op, strings.Join(strings.Fields(r.Choice), " "))
	}
	// Output:
	// flat - tcp
	// tcp (4 ranks) AllReduce: doubling below 246154 B, ring from it
	// tcp (4 ranks) ReduceScatter: halving below 400001 B, ring from it
	// tcp (4 ranks) Broadcast: tree below 730361 B, chain from it
}
