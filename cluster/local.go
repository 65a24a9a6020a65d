package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// A local job emulates a cluster on this host, the way users try things
// before they have one (`hiercomm run`): node n is the address 127.0.0.(n+1)
// with its own host id, and its ranks are processes started with the
// variables a real launcher would set (torchrun's, Slurm's or a Kubernetes
// indexed Job's). The launcher binds every process's sockets itself, on
// ports the kernel picks, and hands them over as file descriptors 3
// (gossip TCP), 4 (gossip UDP), 5 (data) and 6 (network quic: its TLS
// lane's TCP listener), so no two processes or jobs ever race for a port.
// Everything after that is the real path: the children read the
// environment with launchenv.LoadLaunch, join through memberlist and get
// their ranks from the topology.
//
// With a Fabric (LocalSpec.Fabric), the nodes are not loopback addresses
// but network namespaces joined by emulated, possibly rate-limited links:
// the launcher binds each process's sockets inside its node's namespace at
// the address the fabric gives the rank, advertises that address, and
// starts the process through the fabric's Wrap so that it runs there too.

// LocalSpec describes a local job of emulated nodes.
type LocalSpec struct {
	// RanksPerNode is the number of processes on each emulated node; its
	// length is the number of nodes. Entries may differ (heterogeneous
	// nodes). Required; at most 254 nodes.
	RanksPerNode []int
	// Style is the set of variables the children get: "torchrun", "slurm"
	// or "kubernetes". If empty, defaults to "torchrun".
	Style string
	// Placement is how global ranks map to nodes: "block" (node 0 has ranks
	// 0..G-1, the default) or "cyclic" (round-robin over the nodes, as
	// Slurm's -m cyclic). Kubernetes style assigns ranks in the cluster
	// layer and accepts only "block".
	Placement string
	// Network is the data plane: "quic", "quic-only" or "tcp" (see
	// launchenv.Launch.Network). If empty, defaults to "quic".
	Network string
	// JobID is the job's id. If empty, a random "local-…" id.
	JobID string
	// Path is the program; Args its arguments. Path is required.
	Path string
	Args []string
	// Env is added to this process's environment for every child. A child
	// whose environment does not set GOMAXPROCS gets its share of this
	// host's CPUs (NumCPU divided by the number of children, at least 1):
	// every rank runs on this one host.
	Env []string
	// Bind is how the children are bound to this host's CPUs: "none"
	// leaves them to the kernel's scheduler; "core" binds child i of n to
	// its share of the CPUs this process may use (procgroup.Spec.Bind), as
	// mpirun --bind-to core, also when they outnumber the CPUs (child i on
	// CPU i mod m: the processes each CPU runs stay the same ones). If
	// empty, the environment's HIERCOMM_BIND, else "none": on a host with
	// more ranks than cores, binding steadies the ranks that poll but makes
	// every wakeup of a sleeping rank cross CPUs (docs/deployment.md). A
	// replacement (Replace) is not bound.
	Bind string
	// Stdout and Stderr receive the children's output, each line prefixed
	// with "[rank r] ". If nil, default to os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// KeepOthers, for fault tests, lets the others run on when one fails
	// (by default they are stopped: Grace, SIGTERM, KillAfter, SIGKILL).
	KeepOthers bool
	// Grace is how long, after the first process fails, the others get to
	// exit by themselves before they are sent SIGTERM: time for every
	// survivor to see the failure and print its own report (it is seen
	// within the failure timeout, 10 s by default, and Close may linger 5
	// s more). If zero, defaults to DefaultGrace; if negative, SIGTERM
	// goes out at once.
	Grace time.Duration
	// KillAfter is how long a process gets after SIGTERM — after Grace,
	// or from Stop — before SIGKILL. If zero, defaults to
	// DefaultKillAfter; if negative, SIGKILL at once, without SIGTERM.
	KillAfter time.Duration
	// Notify, if set, is told in one line (no newline) each time the job
	// starts to stop its processes and each time it signals them: which
	// rank failed, what is sent to whom. Never called concurrently.
	Notify func(line string)
	// Replace, for an elastic job (KeepOthers), is how many failed
	// processes may be replaced: each time a process fails, while fewer
	// have been, a new one starts on its node with HIERCOMM_JOIN=running
	// (LocalJob.JoinerEnv), as a rescheduled pod or a requeued Slurm task
	// would, and joins the running job when its members Grow. 0: none.
	// Not with a Fabric.
	Replace int
	// Fabric, if set, is the emulated network the nodes live in (see
	// Fabric): rank (n, l) binds and advertises Fabric.Addr(n, l) inside
	// node n, and runs under Fabric.Wrap(n). If nil, node n is
	// 127.0.0.(n+1) on this host's loopback. The fabric must have been set
	// up for RanksPerNode; the caller closes it after the job.
	Fabric Fabric
}

// localProc is one process of a local job before it starts.
type localProc struct {
	node, local, rank int
	ip                string
	gossip            Sockets
	data              DataSocket
}

// maxLocalNodes bounds the nodes of a local job: one 127.0.0.x address
// each.
const maxLocalNodes = 254

// Defaults of LocalSpec.
const (
	// DefaultGrace is LocalSpec.Grace's default: twice the default failure
	// timeout.
	DefaultGrace = 20 * time.Second
	// DefaultKillAfter is LocalSpec.KillAfter's default, the time
	// docs/deployment.md promises a process between SIGTERM and SIGKILL.
	DefaultKillAfter = 10 * time.Second
)

// StartLocal starts a local job. When one process fails, the others get
// Grace to exit by themselves, then SIGTERM, then KillAfter later SIGKILL
// (unless KeepOthers); Wait returns the first failure.
func StartLocal(ctx context.Context, spec LocalSpec) (*LocalJob, error) {
	procs, err := spec.plan()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range procs {
			p.gossip.Close()
			p.data.Close()
		}
	}()
	if spec.Style == "kubernetes" {
		err = bindPods(procs, spec.inNode)
	} else {
		err = bindGossipAll(procs, spec.inNode)
	}
	if err != nil {
		return nil, err
	}
	for i := range procs {
		p := &procs[i]
		if err := spec.inNode(p.node, func() (err error) {
			p.data, err = BindData(spec.Network, p.ip, 0)
			return err
		}); err != nil {
			return nil, fmt.Errorf("cluster.StartLocal: %w", err)
		}
	}
	keyBytes := make([]byte, 32)
	if _, err := rand.Read(keyBytes); err != nil {
		return nil, err
	}
	key := hex.EncodeToString(keyBytes)
	jobID := spec.JobID
	if jobID == "" {
		jobID = "local-" + key[:12]
	}
	seed := procs[0].gossip.TCP.Addr().(*net.TCPAddr)
	for _, p := range procs {
		if p.rank == 0 {
			seed = p.gossip.TCP.Addr().(*net.TCPAddr)
		}
	}
	pg := procgroup.Spec{Stdout: spec.Stdout, Stderr: spec.Stderr, KeepOthers: spec.KeepOthers,
		Grace: max(spec.Grace, 0), KillAfter: max(spec.KillAfter, 0), Notify: spec.Notify, Bind: spec.Bind == "core"}
	job := &LocalJob{spec: spec, seed: seed, env: []string{
		launchenv.EnvJobID + "=" + jobID,
		launchenv.EnvJobKey + "=" + key,
		launchenv.EnvNetwork + "=" + spec.Network,
	}}
	for _, p := range procs {
		files, err := p.files()
		if err != nil {
			closeFiles(pg.Procs)
			return nil, fmt.Errorf("cluster.StartLocal: handing sockets to a child: %w", err)
		}
		env := append(os.Environ(), spec.Env...)
		env = append(env, job.env...)
		env = append(env,
			launchenv.EnvAddr+"="+p.ip,
			launchenv.EnvLauncherSockets+"=1",
		)
		env = append(env, spec.styleEnv(p, len(procs), seed)...)
		path, args := spec.Path, spec.Args
		if spec.Fabric != nil {
			wrap := spec.Fabric.Wrap(p.node)
			path, args = wrap[0], append(append(wrap[1:len(wrap):len(wrap)], spec.Path), spec.Args...)
		}
		pg.Procs = append(pg.Procs, procgroup.Proc{
			Path:   path,
			Args:   args,
			Env:    env,
			Files:  files,
			Prefix: fmt.Sprintf("[rank %d] ", p.rank),
			Name:   fmt.Sprintf("rank %d", p.rank),
		})
		job.ranks = append(job.ranks, p.rank)
		job.nodes = append(job.nodes, p.node)
	}
	job.procs = len(procs)
	if spec.Replace > 0 {
		pg.OnExit = func(i int, err error) {
			if err != nil {
				job.replace(i)
			}
		}
	}
	// A replacement (OnExit) waits until the group is recorded.
	job.mu.Lock()
	defer job.mu.Unlock()
	g, err := procgroup.Start(ctx, pg)
	closeFiles(pg.Procs)
	if err != nil {
		return nil, fmt.Errorf("cluster.StartLocal: %w", err)
	}
	job.g = g
	return job, nil
}

// plan validates spec (filling its defaults) and lays out the processes:
// node by node, with the rank each is started as.
// Check reports what StartLocal would refuse in spec, without starting
// anything: a launcher checks its flags with it before it builds what
// comes first (an emulated network, a program to run). A Fabric, which
// such a launcher sets up after, is checked by StartLocal.
func (spec LocalSpec) Check() error {
	_, err := spec.plan()
	return err
}

func (spec *LocalSpec) plan() ([]localProc, error) {
	bad := func(format string, a ...any) ([]localProc, error) {
		return nil, fmt.Errorf("cluster.StartLocal: "+format, a...)
	}
	nodes := len(spec.RanksPerNode)
	if nodes == 0 {
		return bad("RanksPerNode is empty: give the number of ranks on each node")
	}
	if nodes > maxLocalNodes {
		return bad("%d nodes: at most %d can be emulated (one 127.0.0.x address each)", nodes, maxLocalNodes)
	}
	for n, g := range spec.RanksPerNode {
		if g < 1 {
			return bad("node %d has %d ranks, want at least 1", n, g)
		}
	}
	switch spec.Style {
	case "":
		spec.Style = "torchrun"
	case "torchrun", "slurm", "kubernetes":
	default:
		return bad("Style %q: want torchrun, slurm or kubernetes", spec.Style)
	}
	switch spec.Placement {
	case "":
		spec.Placement = "block"
	case "block":
	case "cyclic":
		if spec.Style == "kubernetes" {
			return bad("Placement cyclic: Kubernetes style gets its ranks from the cluster layer, which places them by node (use block)")
		}
	default:
		return bad("Placement %q: want block or cyclic", spec.Placement)
	}
	switch spec.Network {
	case "":
		spec.Network = "quic"
	default:
		if !launchenv.KnownNetwork(spec.Network) {
			return bad("Network %q: want %s", spec.Network, launchenv.NetworkNames)
		}
	}
	if spec.Path == "" {
		return bad("Path is empty: which program should run?")
	}
	if spec.Bind == "" {
		if spec.Bind = os.Getenv(launchenv.EnvBind); spec.Bind == "" {
			spec.Bind = "none"
		}
	}
	switch spec.Bind {
	case "core", "none":
	default:
		return bad("Bind %q (or %s): want none or core", spec.Bind, launchenv.EnvBind)
	}
	switch {
	case spec.Replace < 0:
		return bad("Replace %d: want 0 (no replacements) or more", spec.Replace)
	case spec.Replace > 0 && !spec.KeepOthers:
		return bad("Replace %d: replacing failed processes needs an elastic job (KeepOthers, hiercomm run --elastic): the others must go on to admit the replacement", spec.Replace)
	case spec.Replace > 0 && spec.Fabric != nil:
		return bad("Replace %d: an emulated fabric has no address for a replacement (run without --link-rate)", spec.Replace)
	}
	if spec.Grace == 0 {
		spec.Grace = DefaultGrace
	}
	if spec.KillAfter == 0 {
		spec.KillAfter = DefaultKillAfter
	}
	var procs []localProc
	for n, g := range spec.RanksPerNode {
		if spec.Fabric != nil && len(spec.Fabric.Wrap(n)) == 0 {
			return bad("Fabric.Wrap(%d) is empty: the fabric has no node %d; was it set up for RanksPerNode %v?", n, n, spec.RanksPerNode)
		}
		for l := range g {
			ip := fmt.Sprintf("127.0.0.%d", n+1)
			if spec.Fabric != nil {
				ip = spec.Fabric.Addr(n, l)
				if a := net.ParseIP(ip); a == nil || a.IsUnspecified() {
					return bad("Fabric.Addr(%d, %d) = %q is not an IP address to bind; was the fabric set up for RanksPerNode %v?", n, l, ip, spec.RanksPerNode)
				}
			}
			procs = append(procs, localProc{node: n, local: l, ip: ip})
		}
	}
	if spec.Placement == "block" {
		for i := range procs {
			procs[i].rank = i
		}
		return procs, nil
	}
	// Cyclic: local index 0 of every node, then local index 1, ...
	rank := 0
	for l := 0; rank < len(procs); l++ {
		for i := range procs {
			if procs[i].local == l {
				procs[i].rank = rank
				rank++
			}
		}
	}
	return procs, nil
}

// inNode runs fn where node's sockets are made: inside the fabric's
// namespace of the node, or in this process's own network.
func (spec *LocalSpec) inNode(node int, fn func() error) error {
	if spec.Fabric == nil {
		return fn()
	}
	return spec.Fabric.Do(node, fn)
}

// nodeAddr is the address that names node n in launcher variables (Slurm's
// node list, the Kubernetes service): its first rank's.
func (spec *LocalSpec) nodeAddr(n int) string {
	if spec.Fabric == nil {
		return fmt.Sprintf("127.0.0.%d", n+1)
	}
	return spec.Fabric.Addr(n, 0)
}

// bindGossipAll binds every process's gossip sockets on kernel-chosen
// ports, each inside its node (in).
func bindGossipAll(procs []localProc, in func(node int, fn func() error) error) error {
	for i := range procs {
		p := &procs[i]
		if err := in(p.node, func() (err error) {
			p.gossip, err = BindGossip(p.ip, 0)
			return err
		}); err != nil {
			return fmt.Errorf("cluster.StartLocal: %w", err)
		}
	}
	return nil
}

// bindPods binds the gossip sockets of a Kubernetes-style job: local rank
// 0 of every pod (node) listens on the same port, as the pods of a
// headless Service do, so the Service name resolves to every pod's seed.
// The port is the kernel's choice for the first pod; if it is taken on
// another pod's address, the whole choice is retried.
func bindPods(procs []localProc, in func(node int, fn func() error) error) error {
	var err error
	for range 20 {
		err = bindPodsOnce(procs, in)
		if err == nil {
			return nil
		}
		for i := range procs {
			procs[i].gossip.Close()
			procs[i].gossip = Sockets{}
		}
	}
	return fmt.Errorf("cluster.StartLocal: binding one gossip port on every pod: %w", err)
}

func bindPodsOnce(procs []localProc, in func(node int, fn func() error) error) error {
	port := 0
	for i := range procs {
		p := &procs[i]
		want := 0
		if p.local == 0 {
			want = port
		}
		if err := in(p.node, func() (err error) {
			p.gossip, err = BindGossip(p.ip, want)
			return err
		}); err != nil {
			return err
		}
		if p.local == 0 && port == 0 {
			port = p.gossip.TCP.Addr().(*net.TCPAddr).Port
		}
	}
	return nil
}

// styleEnv is the launcher's variables for process p of a world of n.
func (spec *LocalSpec) styleEnv(p localProc, n int, seed *net.TCPAddr) []string {
	g := 1 // a node the job did not start with (LocalJob.JoinerEnv)
	if p.node < len(spec.RanksPerNode) {
		g = spec.RanksPerNode[p.node]
	}
	switch spec.Style {
	case "slurm":
		// Slurm's host-list syntax; the first host is the seed.
		nodes := fmt.Sprintf("127.0.0.[1-%d]", len(spec.RanksPerNode))
		if spec.Fabric != nil {
			addrs := make([]string, len(spec.RanksPerNode))
			for n := range addrs {
				addrs[n] = spec.nodeAddr(n)
			}
			nodes = strings.Join(addrs, ",")
		}
		return []string{
			"SLURM_PROCID=" + strconv.Itoa(p.rank),
			"SLURM_NTASKS=" + strconv.Itoa(n),
			"SLURM_LOCALID=" + strconv.Itoa(p.local),
			"SLURM_NODEID=" + strconv.Itoa(p.node),
			"SLURM_JOB_ID=" + strconv.Itoa(os.Getpid()),
			"SLURM_STEP_NODELIST=" + nodes,
			"SLURMD_NODENAME=" + spec.nodeAddr(p.node),
			launchenv.EnvPort + "=" + strconv.Itoa(seed.Port),
		}
	case "kubernetes":
		// A headless Service's name resolves to every pod; here
		// "localhost" resolves to the first pod's address. In a fabric,
		// localhost is each node's own: name the first pod's address.
		svc := "localhost"
		if spec.Fabric != nil {
			svc = spec.nodeAddr(0)
		}
		return []string{
			launchenv.EnvK8sService + "=" + svc,
			launchenv.EnvPort + "=" + strconv.Itoa(seed.Port),
			"WORLD_SIZE=" + strconv.Itoa(n),
			"LOCAL_RANK=" + strconv.Itoa(p.local),
			// One process per pod: the index is the rank. Several: the
			// cluster layer assigns ranks node by node.
			"LOCAL_WORLD_SIZE=" + strconv.Itoa(g),
			"JOB_COMPLETION_INDEX=" + strconv.Itoa(p.node),
			launchenv.EnvHostID + "=pod-" + strconv.Itoa(p.node),
		}
	}
	return []string{
		"RANK=" + strconv.Itoa(p.rank),
		"WORLD_SIZE=" + strconv.Itoa(n),
		"LOCAL_RANK=" + strconv.Itoa(p.local),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(g),
		"GROUP_RANK=" + strconv.Itoa(p.node),
		"MASTER_ADDR=" + seed.IP.String(),
		"MASTER_PORT=" + strconv.Itoa(seed.Port),
	}
}

// files are p's sockets as the child's descriptors 3, 4, 5 and (network
// quic) 6.
func (p *localProc) files() ([]*os.File, error) {
	var files []*os.File
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	add := func(f *os.File, err error) error {
		if err == nil {
			files = append(files, f)
		}
		return err
	}
	if err := add(p.gossip.TCP.File()); err != nil {
		return fail(err)
	}
	if err := add(p.gossip.UDP.File()); err != nil {
		return fail(err)
	}
	if p.data.Packet == nil && p.data.Listener == nil {
		return fail(errors.New("no data socket bound"))
	}
	// The UDP socket, then the TCP listener: those the network has.
	if p.data.Packet != nil {
		if err := add(p.data.Packet.(*net.UDPConn).File()); err != nil {
			return fail(err)
		}
	}
	if p.data.Listener != nil {
		if err := add(p.data.Listener.(*net.TCPListener).File()); err != nil {
			return fail(err)
		}
	}
	return files, nil
}

func closeFiles(procs []procgroup.Proc) {
	for _, p := range procs {
		for _, f := range p.Files {
			f.Close()
		}
	}
}

// SplitRanksPerNode parses a --ranks-per-node value for n nodes: one count
// for every node ("2") or one per node ("2,3").
func SplitRanksPerNode(nodes int, s string) ([]int, error) {
	parts := strings.Split(s, ",")
	var g []int
	for _, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("ranks per node %q: want a count ≥ 1 or a comma list of them", s)
		}
		g = append(g, v)
	}
	if len(g) == 1 && nodes > 0 {
		for len(g) < nodes {
			g = append(g, g[0])
		}
	}
	if nodes > 0 && len(g) != nodes {
		return nil, fmt.Errorf("ranks per node %q gives %d nodes, but --nodes is %d", s, len(g), nodes)
	}
	return g, nil
}
