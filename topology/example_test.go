package topology_test

import (
	"fmt"

	"github.com/hiercomm/hiercomm/topology"
)

// Two hosts with two processes each announce themselves without ranks; New
// assigns them node-major, hosts in natural order, and derives the rails
// and the Split colors of the hierarchical communicator.
func ExampleNew() {
	t, err := topology.New([]topology.Member{
		{Rank: -1, Host: "node-10", Local: 1, Device: 1, Addr: "10.0.0.10:4001", Name: "w3"},
		{Rank: -1, Host: "node-2", Local: 0, Device: 0, Addr: "10.0.0.2:4000", Name: "w0"},
		{Rank: -1, Host: "node-10", Local: 0, Device: 0, Addr: "10.0.0.10:4000", Name: "w2"},
		{Rank: -1, Host: "node-2", Local: 1, Device: 1, Addr: "10.0.0.2:4001", Name: "w1"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(t)
	fmt.Println("rails:", t.Rails())
	fmt.Printf("colors of rank 3: %+v\n", t.Colors(3))
	// Output:
	// 4 ranks on 2 nodes, 2 ranks per node, node-major
	// node 0  host node-2   ranks 0 1  lead 0
	// node 1  host node-10  ranks 2 3  lead 2
	// rank  node  local  device  addr            name
	// 0     0     0/2    0       10.0.0.2:4000   w0
	// 1     0     1/2    1       10.0.0.2:4001   w1
	// 2     1     0/2    0       10.0.0.10:4000  w2
	// 3     1     1/2    1       10.0.0.10:4001  w3
	// rails: [[0 2] [1 3]]
	// colors of rank 3: {Intra:1 IntraKey:1 Rail:1 RailKey:1 Leads:-1 LeadsKey:1}
}

// A job of two nodes lost a process and grows by a replacement on the
// first node and a process on a new one: the members keep their ranks,
// the newcomers follow, each with the next local index on its host.
func ExampleTopology_Grown() {
	t, _ := topology.New([]topology.Member{
		{Rank: -1, Host: "node-1", Local: 0, Device: -1},
		{Rank: -1, Host: "node-2", Local: 0, Device: -1},
		{Rank: -1, Host: "node-2", Local: 1, Device: -1},
	})
	g, err := t.Grown([]topology.Member{
		{Host: "node-3", Local: 0, Device: -1},
		{Host: "node-1", Local: 1, Device: -1},
	})
	if err != nil {
		panic(err)
	}
	for _, m := range g.Members() {
		fmt.Printf("rank %d: %s local %d\n", m.Rank, m.Host, m.Local)
	}
	// Output:
	// rank 0: node-1 local 0
	// rank 1: node-2 local 0
	// rank 2: node-2 local 1
	// rank 3: node-1 local 1
	// rank 4: node-3 local 0
}
