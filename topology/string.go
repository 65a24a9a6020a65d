package topology

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// String is a human table of the topology: a summary line, one line per
// node and one per rank, e.g.
//
//	4 ranks on 2 nodes, 2 ranks per node, node-major
//	node 0  host a  ranks 0 1  lead 0
//	node 1  host b  ranks 2 3  lead 2
//	rank  node  local  device  addr            name
//	0     0     0/2    0       127.0.0.1:4000  a-0
//	...
//
// An empty field prints as "-". It is for logs and people; programs read
// the JSON dump.
func (t *Topology) String() string {
	if t == nil {
		return "<nil topology>"
	}
	var b strings.Builder
	b.WriteString(t.summary())
	b.WriteByte('\n')
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for i, n := range t.nodes {
		fmt.Fprintf(w, "node %d\thost %s\tranks %s\tlead %d\n", i, n.Host, formatInts(n.Ranks, " "), n.Ranks[0])
	}
	w.Flush()
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "rank\tnode\tlocal\tdevice\taddr\tname\n")
	for r, m := range t.members {
		device := "-"
		if m.Device >= 0 {
			device = strconv.Itoa(m.Device)
		}
		fmt.Fprintf(w, "%d\t%d\t%d/%d\t%s\t%s\t%s\n", r, t.nodeOf[r], m.Local, t.LocalSize(r), device, orDash(m.Addr), orDash(m.Name))
	}
	w.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// summary is String's first line.
func (t *Topology) summary() string {
	s := fmt.Sprintf("%s on %s, ", plural(len(t.members), "rank"), plural(len(t.nodes), "node"))
	g, homogeneous := t.RanksPerNode()
	if !homogeneous {
		return s + fmt.Sprintf("%d to %d ranks per node", t.minLocal, g)
	}
	s += plural(g, "rank") + " per node, "
	if t.nodeMajor {
		return s + "node-major"
	}
	return s + "not node-major"
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
