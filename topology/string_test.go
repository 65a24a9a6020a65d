package topology

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, c := range []struct {
		name    string
		members []Member
		want    string
	}{
		{
			name: "homogeneous",
			members: []Member{
				{Rank: 0, Host: "a", Local: 0, Device: 0, Addr: "127.0.0.1:4000", Name: "a-0"},
				{Rank: 1, Host: "a", Local: 1, Device: 1, Addr: "127.0.0.1:4001", Name: "a-1"},
				{Rank: 2, Host: "b", Local: 0, Device: 0, Addr: "127.0.0.2:4000", Name: "b-0"},
				{Rank: 3, Host: "b", Local: 1, Device: 1, Addr: "127.0.0.2:4001", Name: "b-1"},
			},
			want: `
4 ranks on 2 nodes, 2 ranks per node, node-major
node 0  host a  ranks 0 1  lead 0
node 1  host b  ranks 2 3  lead 2
rank  node  local  device  addr            name
0     0     0/2    0       127.0.0.1:4000  a-0
1     0     1/2    1       127.0.0.1:4001  a-1
2     1     0/2    0       127.0.0.2:4000  b-0
3     1     1/2    1       127.0.0.2:4001  b-1`,
		},
		{
			name: "heterogeneous, no devices or addresses",
			members: []Member{
				{Rank: -1, Host: "cpu-10", Local: 0, Device: -1},
				{Rank: -1, Host: "cpu-9", Local: 0, Device: -1},
				{Rank: -1, Host: "cpu-10", Local: 1, Device: -1},
				{Rank: -1, Host: "cpu-10", Local: 2, Device: -1},
				{Rank: -1, Host: "cpu-9", Local: 1, Device: -1},
			},
			want: `
5 ranks on 2 nodes, 2 to 3 ranks per node
node 0  host cpu-9   ranks 0 1    lead 0
node 1  host cpu-10  ranks 2 3 4  lead 2
rank  node  local  device  addr  name
0     0     0/2    -       -     -
1     0     1/2    -       -     -
2     1     0/3    -       -     -
3     1     1/3    -       -     -
4     1     2/3    -       -     -`,
		},
		{
			name:    "cyclic",
			members: []Member{mem(0, "a", 0), mem(1, "b", 0), mem(2, "a", 1), mem(3, "b", 1)},
			want: `
4 ranks on 2 nodes, 2 ranks per node, not node-major
node 0  host a  ranks 0 2  lead 0
node 1  host b  ranks 1 3  lead 1
rank  node  local  device  addr  name
0     0     0/2    0       -     a-0
1     1     0/2    0       -     b-0
2     0     1/2    1       -     a-1
3     1     1/2    1       -     b-1`,
		},
		{
			name:    "one rank",
			members: []Member{{Rank: 0, Host: "solo", Local: 0, Device: -1}},
			want: `
1 rank on 1 node, 1 rank per node, node-major
node 0  host solo  ranks 0  lead 0
rank  node  local  device  addr  name
0     0     0/1    -       -     -`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			top, err := New(c.members)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.TrimPrefix(c.want, "\n")
			if got := top.String(); got != want {
				t.Errorf("String() =\n%s\nwant\n%s", got, want)
			}
		})
	}
}
