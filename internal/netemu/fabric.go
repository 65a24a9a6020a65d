package netemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config describes a fabric. Setup copies it.
type Config struct {
	// RanksPerNode is the number of ranks on each node; its length is the
	// number of nodes. Required: 1 to 254 nodes of 1 to 256 ranks.
	RanksPerNode []int
	// Rate is the rate of every NIC in each direction, as tc writes it:
	// "1gbit", "500mbit" (see ParseRate). If empty, the links are not
	// limited.
	Rate string
	// PerNode gives every node one NIC that its ranks share. If false (the
	// default), every rank has a NIC of its own, as on GPU clusters with
	// one NIC per GPU (rail-optimized).
	PerNode bool
}

// maxNodes and maxRanksPerNode bound the addresses 10.0.l.(n+1).
const (
	maxNodes        = 254
	maxRanksPerNode = 256
)

// A Fabric is a set up emulated network. Its methods are safe for
// concurrent use.
type Fabric struct {
	cfg   Config
	bits  uint64   // Rate in bits/s; 0: unlimited
	ip    string   // path of the ip command
	tc    string   // path of the tc command ("" when there is no rate)
	name  string   // hcnet-<pid>-<k>
	sw    string   // the switch's namespace
	nodes []string // node n's namespace

	mu     sync.RWMutex // guards fds and closed
	fds    []int        // node n's namespace, open for setns
	closed bool
}

// seq numbers this process's fabrics (and Available's probe).
var seq atomic.Uint64

// testHookStep, when set (by tests), is called after each step of build
// ("namespaces", "nics", "switch", "nodes", "limits"); an error fails the
// build there, so that tests see what a failure half-way leaves.
var testHookStep func(step string) error

func step(name string) error {
	if testHookStep != nil {
		return testHookStep(name)
	}
	return nil
}

// Setup builds the fabric cfg describes. It needs root; Available says
// whether this host can. A Setup that fails removes what it made. Before
// building, it deletes the namespaces of fabrics whose creating process
// has died (see Sweep). ctx bounds the commands Setup runs; the fabric
// lives until Close, not until ctx ends.
func Setup(ctx context.Context, cfg Config) (*Fabric, error) {
	cfg.RanksPerNode = slices.Clone(cfg.RanksPerNode)
	f := &Fabric{cfg: cfg}
	if err := f.validate(); err != nil {
		return nil, err
	}
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("netemu.Setup: not root (euid %d): network namespaces, veth pairs and tc qdiscs need root; run as root or without a link rate", euid)
	}
	var err error
	if f.ip, err = lookTool("ip"); err != nil {
		return nil, fmt.Errorf("netemu.Setup: %w", err)
	}
	if f.bits > 0 {
		if f.tc, err = lookTool("tc"); err != nil {
			return nil, fmt.Errorf("netemu.Setup: %w", err)
		}
	}
	_, _ = sweep(ctx, f.ip) // best effort: a stale fabric in the way shows below

	f.name = fmt.Sprintf("%s%d-%d", namePrefix, os.Getpid(), seq.Add(1))
	f.sw = f.name + "-sw"
	for n := range cfg.RanksPerNode {
		f.nodes = append(f.nodes, f.name+"-n"+strconv.Itoa(n))
	}
	// The names hold this process's pid and a fresh number, so one that
	// exists is a leftover of a dead process that had the same pid; Close
	// deletes every name of the fabric, so it must not be taken over.
	for _, ns := range f.Namespaces() {
		if _, err := os.Lstat(nsPath(ns)); err == nil {
			return nil, fmt.Errorf("netemu.Setup: namespace %s exists already; delete it with `ip netns del %s`", ns, ns)
		}
	}
	if err := f.build(ctx); err != nil {
		if rerr := f.Close(); rerr != nil {
			err = fmt.Errorf("%w; removing what was made: %v", err, rerr)
		}
		return nil, fmt.Errorf("netemu.Setup %s: %w", f.name, err)
	}
	return f, nil
}

func (f *Fabric) validate() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("netemu.Setup: Config."+format, a...) }
	g := f.cfg.RanksPerNode
	switch {
	case len(g) == 0:
		return bad("RanksPerNode is empty: give the number of ranks on each node")
	case len(g) > maxNodes:
		return bad("RanksPerNode has %d nodes; at most %d fit the addresses 10.0.l.(n+1)", len(g), maxNodes)
	}
	for n, r := range g {
		if r < 1 || r > maxRanksPerNode {
			return bad("RanksPerNode: node %d has %d ranks, want 1 to %d", n, r, maxRanksPerNode)
		}
	}
	if f.cfg.Rate != "" {
		bits, err := ParseRate(f.cfg.Rate)
		if err != nil {
			return bad("Rate: %v", err)
		}
		f.bits = bits
	}
	return nil
}

// nics is the number of NICs of node n.
func (f *Fabric) nics(n int) int {
	if f.cfg.PerNode {
		return 1
	}
	return f.cfg.RanksPerNode[n]
}

// addr is rank (n, l)'s address.
func addr(n, l int) string { return fmt.Sprintf("10.0.%d.%d", l, n+1) }

// build makes the namespaces, the switch, the NICs, the routes and the
// limiters. What it made is removed by Close.
func (f *Fabric) build(ctx context.Context) error {
	var b strings.Builder
	for _, ns := range f.Namespaces() {
		fmt.Fprintf(&b, "netns add %s\n", ns)
	}
	if err := run(ctx, b.String(), f.ip, "-batch", "-"); err != nil {
		return fmt.Errorf("creating the namespaces: %w", err)
	}
	if err := step("namespaces"); err != nil {
		return err
	}
	f.mu.Lock()
	for _, ns := range f.nodes {
		fd, err := syscall.Open(nsPath(ns), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			f.mu.Unlock()
			return fmt.Errorf("opening namespace %s: %w", nsPath(ns), err)
		}
		f.fds = append(f.fds, fd)
	}
	f.mu.Unlock()

	// The veth pairs are made with each end in its namespace at once, so
	// their names need to be unique only there.
	b.Reset()
	for n, ns := range f.nodes {
		for l := range f.nics(n) {
			fmt.Fprintf(&b, "link add name nic%d netns %s type veth peer name %s netns %s\n", l, ns, port(n, l), f.sw)
		}
	}
	if err := run(ctx, b.String(), f.ip, "-batch", "-"); err != nil {
		return fmt.Errorf("creating the NICs: %w", err)
	}
	if err := step("nics"); err != nil {
		return err
	}

	b.Reset()
	b.WriteString("link set lo up\nlink add sw0 type bridge\n")
	for n := range f.nodes {
		for l := range f.nics(n) {
			fmt.Fprintf(&b, "link set %s master sw0\nlink set %s up\n", port(n, l), port(n, l))
		}
	}
	b.WriteString("link set sw0 up\n")
	if err := run(ctx, b.String(), f.ip, "-n", f.sw, "-batch", "-"); err != nil {
		return fmt.Errorf("building the switch: %w", err)
	}
	if err := step("switch"); err != nil {
		return err
	}

	for n, ns := range f.nodes {
		if err := f.tune(n); err != nil {
			return err
		}
		if err := run(ctx, f.nodeScript(n), f.ip, "-n", ns, "-batch", "-"); err != nil {
			return fmt.Errorf("configuring node %d: %w", n, err)
		}
	}
	if err := step("nodes"); err != nil {
		return err
	}

	if f.bits == 0 {
		return nil
	}
	burst, limit := tbfParams(f.bits)
	tbf := fmt.Sprintf("root tbf rate %dbit burst %d limit %d", f.bits, burst, limit)
	b.Reset()
	for n, ns := range f.nodes {
		var nb strings.Builder
		for l := range f.nics(n) {
			fmt.Fprintf(&nb, "qdisc add dev nic%d %s\n", l, tbf)
			fmt.Fprintf(&b, "qdisc add dev %s %s\n", port(n, l), tbf)
		}
		if err := run(ctx, nb.String(), f.tc, "-n", ns, "-batch", "-"); err != nil {
			return fmt.Errorf("limiting node %d's NICs: %w", n, err)
		}
	}
	if err := run(ctx, b.String(), f.tc, "-n", f.sw, "-batch", "-"); err != nil {
		return fmt.Errorf("limiting the switch ports: %w", err)
	}
	return step("limits")
}

// port is the switch's end of node n's NIC l.
func port(n, l int) string { return fmt.Sprintf("n%dr%d", n, l) }

// nodeScript is node n's addresses, routes and rules, for ip -batch.
func (f *Fabric) nodeScript(n int) string {
	var b strings.Builder
	b.WriteString("link set lo up\n")
	if f.cfg.PerNode {
		for l := range f.cfg.RanksPerNode[n] {
			fmt.Fprintf(&b, "addr add %s/16 dev nic0\n", addr(n, l))
		}
		b.WriteString("link set nic0 up\n")
		return b.String()
	}
	for l := range f.nics(n) {
		a := addr(n, l)
		fmt.Fprintf(&b, "addr add %s/16 dev nic%d noprefixroute\n", a, l)
		fmt.Fprintf(&b, "link set nic%d up\n", l)
		// Unbound sockets: rail l's addresses by NIC l.
		fmt.Fprintf(&b, "route add 10.0.%d.0/24 dev nic%d src %s\n", l, l, a)
		// Bound sockets leave by the NIC of their address.
		fmt.Fprintf(&b, "route add 10.0.0.0/16 dev nic%d src %s table %d\n", l, a, 100+l)
		fmt.Fprintf(&b, "rule add from %s table %d pref %d\n", a, 100+l, 100+l)
	}
	// Rails this node lacks (heterogeneous nodes): by NIC 0.
	fmt.Fprintf(&b, "route add 10.0.0.0/16 dev nic0 src %s\n", addr(n, 0))
	return b.String()
}

// tune sets node n's sysctls: no reverse-path filter, and ARP answered and
// announced only by the NIC that holds the address (see the package doc).
func (f *Fabric) tune(n int) error {
	return f.Do(n, func() error {
		set := func(key, v string) error {
			p := "/proc/sys/net/ipv4/conf/" + key
			if err := os.WriteFile(p, []byte(v+"\n"), 0); err != nil {
				return fmt.Errorf("configuring node %d: %w", n, err)
			}
			return nil
		}
		keys := [][2]string{{"all/rp_filter", "0"}, {"default/rp_filter", "0"}, {"all/arp_ignore", "1"}, {"all/arp_announce", "2"}}
		for l := range f.nics(n) {
			keys = append(keys, [2]string{fmt.Sprintf("nic%d/rp_filter", l), "0"})
		}
		for _, kv := range keys {
			if err := set(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Addr is the address rank (node, local) binds, for gossip and data: its
// own NIC's, or its node's NIC's with Config.PerNode. It is "" for a rank
// the fabric does not have.
func (f *Fabric) Addr(node, local int) string {
	if node < 0 || node >= len(f.cfg.RanksPerNode) || local < 0 || local >= f.cfg.RanksPerNode[node] {
		return ""
	}
	return addr(node, local)
}

// Do runs fn on an OS thread that is in node's network namespace: sockets
// fn creates belong to that node. fn must do its work on the calling
// goroutine (a goroutine fn starts runs on some other thread, in this
// process's own namespace). The thread is never switched back: it ends
// with fn.
func (f *Fabric) Do(node int, fn func() error) error {
	if node < 0 || node >= len(f.nodes) {
		return fmt.Errorf("netemu: Do: node %d is not in [0, %d)", node, len(f.nodes))
	}
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: a goroutine that exits locked takes its
		// thread with it, so no other goroutine ever runs in the node's
		// namespace by accident.
		runtime.LockOSThread()
		if err := f.enter(node); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (f *Fabric) enter(node int) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed || node >= len(f.fds) {
		return fmt.Errorf("netemu: Do: fabric %s is closed", f.name)
	}
	if _, _, e := syscall.RawSyscall(sysSetns, uintptr(f.fds[node]), syscall.CLONE_NEWNET, 0); e != 0 {
		return fmt.Errorf("netemu: Do: entering namespace %s: setns: %w", f.nodes[node], e)
	}
	return nil
}

// Wrap is the command prefix that runs a program in node's namespace
// ("ip netns exec NAME"); the program's environment and open file
// descriptors pass through. It is nil for a node the fabric does not have.
func (f *Fabric) Wrap(node int) []string {
	if node < 0 || node >= len(f.nodes) {
		return nil
	}
	return []string{f.ip, "netns", "exec", f.nodes[node]}
}

// Describe says in one line what the fabric emulates, for benchmark
// output: "2 nodes × 2 ranks, one 1gbit link per rank (tbf), unlimited
// within a node".
func (f *Fabric) Describe() string {
	g := f.cfg.RanksPerNode
	var s string
	if slices.Min(g) == slices.Max(g) {
		s = fmt.Sprintf("%s × %s", plural(len(g), "node"), plural(g[0], "rank"))
	} else {
		parts := make([]string, len(g))
		for i, r := range g {
			parts[i] = strconv.Itoa(r)
		}
		s = fmt.Sprintf("%s (%s ranks)", plural(len(g), "node"), strings.Join(parts, "+"))
	}
	link := "one unlimited link"
	if f.bits > 0 {
		link = "one " + formatRate(f.bits) + " link"
	}
	if f.cfg.PerNode {
		link += " per node shared by its ranks"
	} else {
		link += " per rank"
	}
	if f.bits > 0 {
		link += " (tbf)"
	}
	return s + ", " + link + ", unlimited within a node"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// Namespaces are the names of the fabric's network namespaces, the switch
// first, then node 0, 1, ...
func (f *Fabric) Namespaces() []string { return append([]string{f.sw}, f.nodes...) }

// Close deletes the fabric's namespaces, and with them its NICs and the
// switch. Processes still running in a namespace keep it alive (without
// its name) until they exit. Closing twice is a no-op.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	for _, fd := range f.fds {
		syscall.Close(fd)
	}
	f.fds = nil
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return deleteNamespaces(ctx, f.ip, f.Namespaces())
}

// deleteNamespaces deletes those of names that exist and checks that they
// are gone.
func deleteNamespaces(ctx context.Context, ip string, names []string) error {
	var b strings.Builder
	for _, ns := range names {
		if _, err := os.Lstat(nsPath(ns)); err == nil {
			fmt.Fprintf(&b, "netns del %s\n", ns)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	err := run(ctx, b.String(), ip, "-force", "-batch", "-")
	var left []string
	for _, ns := range names {
		if _, serr := os.Lstat(nsPath(ns)); serr == nil {
			left = append(left, ns)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("netemu: namespaces %s are left (delete them with `ip netns del NAME`): %w", strings.Join(left, ", "), errors.Join(err, errors.New("still listed")))
	}
	return nil
}
