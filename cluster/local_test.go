package cluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

func TestSplitRanksPerNode(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		s     string
		want  string // fmt of the result, or an error substring
	}{
		{2, "2", "[2 2]"},
		{3, "1,2,3", "[1 2 3]"},
		{1, "4", "[4]"},
		{0, "2,3", "[2 3]"},
		{2, "1,2,3", "--nodes is 2"},
		{2, "0", "count ≥ 1"},
		{2, "x", "count ≥ 1"},
	} {
		g, err := SplitRanksPerNode(tc.nodes, tc.s)
		got := fmt.Sprint(g)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("SplitRanksPerNode(%d, %q) = %s, want %s", tc.nodes, tc.s, got, tc.want)
		}
	}
}

// The launcher's placement decides which rank each process is started as.
func TestLocalPlacement(t *testing.T) {
	for _, tc := range []struct {
		layout    []int
		placement string
		want      string // node/local:rank per process, node by node
	}{
		{[]int{2, 2}, "block", "0/0:0 0/1:1 1/0:2 1/1:3"},
		{[]int{2, 2}, "cyclic", "0/0:0 0/1:2 1/0:1 1/1:3"},
		{[]int{2, 3}, "cyclic", "0/0:0 0/1:2 1/0:1 1/1:3 1/2:4"},
		{[]int{1, 1, 1}, "cyclic", "0/0:0 1/0:1 2/0:2"},
	} {
		spec := LocalSpec{RanksPerNode: tc.layout, Placement: tc.placement, Path: "x"}
		procs, err := spec.plan()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range procs {
			if p.ip != fmt.Sprintf("127.0.0.%d", p.node+1) {
				t.Errorf("node %d on %s", p.node, p.ip)
			}
			got = append(got, fmt.Sprintf("%d/%d:%d", p.node, p.local, p.rank))
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("%v %s: %s, want %s", tc.layout, tc.placement, s, tc.want)
		}
	}
}

func TestLocalSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		spec LocalSpec
		want string
	}{
		{LocalSpec{Path: "x"}, "RanksPerNode is empty"},
		{LocalSpec{RanksPerNode: []int{1, 0}, Path: "x"}, "node 1 has 0 ranks"},
		{LocalSpec{RanksPerNode: make([]int, 255), Path: "x"}, "at most 254"},
		{LocalSpec{RanksPerNode: []int{1}, Style: "mpi", Path: "x"}, `Style "mpi"`},
		{LocalSpec{RanksPerNode: []int{1}, Placement: "spread", Path: "x"}, `Placement "spread"`},
		{LocalSpec{RanksPerNode: []int{1}, Style: "kubernetes", Placement: "cyclic", Path: "x"}, "use block"},
		{LocalSpec{RanksPerNode: []int{1}, Network: "rdma", Path: "x"}, `Network "rdma"`},
		{LocalSpec{RanksPerNode: []int{1}}, "Path is empty"},
		{LocalSpec{RanksPerNode: []int{1}, Path: "x", Bind: "socket"}, `Bind "socket" (or HIERCOMM_BIND): want none or core`},
	} {
		if len(tc.spec.RanksPerNode) == 255 {
			for i := range tc.spec.RanksPerNode {
				tc.spec.RanksPerNode[i] = 1
			}
		}
		_, err := tc.spec.plan()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
}

// TestLocalSpecBind: Bind defaults to HIERCOMM_BIND, else none, and a bad
// value in the environment is named as such.
func TestLocalSpecBind(t *testing.T) {
	for _, tc := range []struct{ env, spec, want, err string }{
		{"", "", "none", ""},
		{"core", "", "core", ""},
		{"core", "none", "none", ""},
		{"numa", "", "", `Bind "numa" (or HIERCOMM_BIND)`},
	} {
		t.Setenv(launchenv.EnvBind, tc.env)
		spec := LocalSpec{RanksPerNode: []int{1}, Path: "x", Bind: tc.spec}
		_, err := spec.plan()
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("HIERCOMM_BIND=%q, Bind %q: %v, want an error containing %q", tc.env, tc.spec, err, tc.err)
		case tc.err == "" && (err != nil || spec.Bind != tc.want):
			t.Errorf("HIERCOMM_BIND=%q, Bind %q: Bind %q, %v; want %q", tc.env, tc.spec, spec.Bind, err, tc.want)
		}
	}
}
