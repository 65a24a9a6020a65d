package cluster

import (
	"context"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/topology"
)

// Config configures Join. JobID, Key, Self.Host, WorldSize, Gossip and (for
// a world of more than one) Seeds are required; every other field left zero
// takes the default its comment gives. Join works on a validated copy; the
// caller's struct is never modified.
type Config struct {
	// JobID names the job. Required. The gossip key is derived from it
	// and the Key, so processes of different jobs cannot gossip together
	// even if they share a key.
	JobID string
	// Key is the secret every process of the job shares; at least 16
	// bytes. Required. Gossip is encrypted and authenticated with AES-256
	// under HKDF-SHA256(Key, info "hiercomm gossip v1 "+JobID): a process
	// without it can neither join nor read anything.
	Key []byte
	// Self is this process as it announces itself: Rank (the launcher's
	// global rank, or -1 to have ranks assigned by host order), Host
	// (required), Local, Device and Addr (the data-plane address the
	// others dial, host:port; optional). Name is ignored: Join names the
	// member after its host, local index and a random suffix.
	Self topology.Member
	// WorldSize is the number of processes of the job, at least 1. Join
	// returns when that many are present.
	WorldSize int
	// Seeds are gossip addresses (host:port) of processes to join through;
	// required when WorldSize > 1. A host name that resolves to several
	// addresses (a Kubernetes headless Service) is joined through all of
	// them; an address of this process itself is skipped, so every process
	// may be given the same list.
	Seeds []string
	// Gossip are the bound gossip sockets. Required. Join takes them
	// over: they are closed when the Cluster leaves, or when Join fails.
	Gossip Sockets
	// JoinTimeout bounds the whole join, until the world is complete. If
	// zero, defaults to DefaultJoinTimeout (2m).
	JoinTimeout time.Duration
	// Detector sets the failure detector's timings; zero fields default.
	Detector Detector
	// Logger receives progress, warnings, failures and (at Debug)
	// memberlist's own log. If nil, defaults to slog.Default().
	Logger *slog.Logger
}

// maxJobIDLen bounds JobID (it travels in every member's metadata). The
// defaults of Config are shared with Launch: DefaultJoinTimeout, MinKeyLen.
const maxJobIDLen = 128

// Timings of the join loop.
const (
	maxSeedBackoff  = time.Second     // retry a seed that is not up yet at least this often
	rejoinInterval  = 5 * time.Second // after a successful join, join again this often while the world is incomplete (merges partitions)
	progressMinGap  = time.Second     // progress lines at most this often
	progressEvery   = 5 * time.Second // and at least this often while waiting
	leaveTimeout    = 5 * time.Second // Leave without a context deadline
	closeTimeout    = 2 * time.Second // Close
	maxStreamTimout = 10 * time.Second
)

// validate returns a copy of c with defaults filled in, or an error that
// names the field that is wrong.
func (c Config) validate() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("cluster: invalid Config: "+format, a...)
	}
	switch {
	case c.JobID == "":
		return bad("JobID is empty (HIERCOMM_JOB_ID)")
	case len(c.JobID) > maxJobIDLen:
		return bad("JobID has %d bytes, at most %d", len(c.JobID), maxJobIDLen)
	case len(c.Key) < MinKeyLen:
		return bad("Key has %d bytes, need at least %d: every process of the job must share the same random key (HIERCOMM_JOB_KEY; make one with `openssl rand -hex 32`)", len(c.Key), MinKeyLen)
	case c.WorldSize < 1:
		return bad("WorldSize %d: it must be at least 1", c.WorldSize)
	case c.Self.Host == "":
		return bad("Self.Host is empty: every process needs a host id (processes with the same one share a node)")
	case c.Self.Local < 0:
		return bad("Self.Local %d: it must be >= 0 (LOCAL_RANK)", c.Self.Local)
	case c.Self.Device < -1:
		return bad("Self.Device %d: it must be an accelerator ordinal >= 0, or -1 for none", c.Self.Device)
	case c.Self.Rank < -1 || c.Self.Rank >= c.WorldSize:
		return bad("Self.Rank %d is not in [0, %d) (WorldSize), nor -1 (assign)", c.Self.Rank, c.WorldSize)
	case c.JoinTimeout < 0:
		return bad("JoinTimeout %v is negative", c.JoinTimeout)
	case c.Gossip.TCP == nil || c.Gossip.UDP == nil:
		return bad("Gossip needs both TCP and UDP sockets (BindGossip binds them)")
	}
	if c.Self.Addr != "" {
		if err := checkHostPort(c.Self.Addr); err != nil {
			return bad("Self.Addr %q: %v", c.Self.Addr, err)
		}
	}
	if c.WorldSize > 1 && len(c.Seeds) == 0 {
		return bad("Seeds is empty: a world of %d needs at least one seed address to join through (MASTER_ADDR:port, HIERCOMM_SEEDS)", c.WorldSize)
	}
	for i, s := range c.Seeds {
		if err := checkHostPort(s); err != nil {
			return bad("Seeds[%d] %q: %v", i, s, err)
		}
	}
	d, err := c.Detector.validate()
	if err != nil {
		return bad("%v", err)
	}
	c.Detector = d
	if c.JoinTimeout == 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Key = slices.Clone(c.Key)
	c.Seeds = slices.Clone(c.Seeds)
	c.Self.Name = ""
	return c, nil
}

// checkHostPort checks that s is host:port with a host that can be dialed
// and a port in [1, 65535].
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("not host:port: %v", err)
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%s is the unspecified address, which no one can dial", host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not in [1, 65535]", port)
	}
	return nil
}

// gossipInfo is the HKDF info of the gossip key. Changing it is a protocol
// version change.
const gossipInfo = "hiercomm gossip v1 "

// gossipKey derives the AES-256 gossip key of a job.
func gossipKey(key []byte, jobID string) ([]byte, error) {
	return hkdf.Key(sha256.New, key, nil, gossipInfo+jobID, 32)
}

// Cluster is this process's membership in a formed world: the agreed
// topology and rank, and the failure events of the other members. Its
// methods are safe for concurrent use.
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	ml   *memberlist.Memberlist
	tr   *gossipTransport
	view *view
	disp *dispatcher
	name string
	topo *topology.Topology
	rank int

	leaveOnce sync.Once
	leaveErr  error
	downMu    sync.Mutex
	down      bool // guarded by downMu: memberlist has been shut down
}

// Join makes this process a member of its job's world. It starts gossip on
// cfg.Gossip, joins through the seeds, and waits until WorldSize members of
// the job are present; then every member computes the same rank assignment
// (topology.New over the members) and Join returns.
//
// While it waits, Join retries seeds that are not up yet and logs progress
// ("7/16 ranks joined"). It fails with a *JoinError, within JoinTimeout or
// when ctx ends: the world did not complete (ErrWorldIncomplete, naming who
// is present and who is missing, and whether a seed was ever reached), a
// seed cannot be routed to from this interface (ErrSeedUnreachable, at
// once), the members cannot form a world (ErrWorldInvalid: more of them
// than WorldSize, two claiming one rank; every member says the same), or a
// member died or left before the world formed (ErrMemberLost). On failure
// the gossip sockets are closed.
func Join(ctx context.Context, cfg Config) (*Cluster, error) {
	c, err := newCluster(cfg)
	if err != nil {
		cfg.Gossip.Close()
		return nil, err
	}
	if err := c.form(ctx); err != nil {
		if errors.Is(err, ErrWorldInvalid) {
			// The others must see this process to reach the same
			// conclusion: a member that left before they heard of
			// it is never heard of.
			linger := time.NewTimer(c.grace())
			select {
			case <-linger.C:
			case <-ctx.Done():
				linger.Stop()
			}
		}
		c.abandon()
		return nil, err
	}
	return c, nil
}

// grace is how long gossip takes to tell every member of a join's news,
// with room to spare: how long Join waits, after a member is lost, for news
// that may explain it, and how long a process that found the world invalid
// stays before it leaves.
func (c *Cluster) grace() time.Duration {
	return 2*c.cfg.Detector.ProbeInterval + 10*c.cfg.Detector.GossipInterval
}

// newCluster validates cfg and starts memberlist on its sockets.
func newCluster(cfg Config) (*Cluster, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	meta, err := encodeMeta(cfg.JobID, cfg.Self)
	if err != nil {
		return nil, fmt.Errorf("cluster: invalid Config: %w", err)
	}
	key, err := gossipKey(cfg.Key, cfg.JobID)
	if err != nil {
		return nil, fmt.Errorf("cluster: derive the gossip key: %w", err)
	}
	tr, err := newGossipTransport(cfg.Gossip, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("cluster: invalid Config: %w", err)
	}
	name, err := nodeName(cfg.Self)
	if err != nil {
		tr.Shutdown()
		return nil, err
	}
	disp := newDispatcher()
	v := newView(cfg, name, meta, disp)
	self := cfg.Self
	self.Name = name
	v.seen[name] = &seenMember{member: self}

	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.Transport = tr
	mc.SecretKey = key
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	mc.Delegate = v
	mc.Events = v
	mc.Logger = log.New(memberlistLog{cfg.Logger}, "", 0)
	mc.ProbeInterval = cfg.Detector.ProbeInterval
	mc.ProbeTimeout = cfg.Detector.ProbeTimeout
	mc.SuspicionMult = cfg.Detector.SuspicionMult
	mc.SuspicionMaxTimeoutMult = cfg.Detector.SuspicionMaxTimeoutMult
	mc.GossipInterval = cfg.Detector.GossipInterval
	mc.AwarenessMaxMultiplier = awarenessMax
	// The stream timeout bounds one join attempt (and push/pull syncs,
	// TCP fallback probes): never longer than the whole join.
	mc.TCPTimeout = min(maxStreamTimout, cfg.JoinTimeout)
	ml, err := memberlist.Create(mc)
	if err != nil {
		disp.stop()
		tr.Shutdown()
		return nil, fmt.Errorf("cluster: start gossip on %s: %w", tr.addr(), err)
	}
	return &Cluster{cfg: cfg, log: cfg.Logger, ml: ml, tr: tr, view: v, disp: disp, name: name, rank: -1}, nil
}

// nodeName is a memberlist node name for self: unique in the job (a
// restarted process gets a new one) and readable in logs.
func nodeName(self topology.Member) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cluster: node name: %w", err)
	}
	return fmt.Sprintf("%s-%d-%s", self.Host, self.Local, hex.EncodeToString(b[:])), nil
}

// abandon ends a Cluster whose Join failed: it leaves (so that the others
// see a departure, not a death) briefly, and shuts down.
func (c *Cluster) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, 5*c.cfg.Detector.GossipInterval))
	defer cancel()
	c.Leave(ctx)
}

// seedStatus is what Join knows about one configured seed.
type seedStatus struct {
	seed      string
	self      bool  // some address of it is this process
	others    int   // addresses of it that are not this process, last resolved
	joined    bool  // a join through it succeeded
	handshake bool  // a connection was made but the exchange failed (key or job id?)
	lastErr   error // the last failure
}

// form runs the join loop until the world is complete, and records it.
func (c *Cluster) form(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
	defer cancel()

	seeds := make([]*seedStatus, len(c.cfg.Seeds))
	for i, s := range c.cfg.Seeds {
		seeds[i] = &seedStatus{seed: s}
	}
	grace := c.grace()
	var (
		nextJoin     = start
		backoff      = 50 * time.Millisecond
		lastProgress = start.Add(-progressMinGap) // the first line at once
		lastCount    = 0
		timer        = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		now := time.Now()
		topo, wake, err := c.view.evaluate(now, grace)
		if err != nil {
			return c.joinError(err, start, seeds)
		}
		if topo != nil {
			c.formed(topo, start)
			return nil
		}
		count := c.view.aliveCount()
		if (count != lastCount && now.Sub(lastProgress) >= progressMinGap) || now.Sub(lastProgress) >= progressEvery {
			c.log.Info(fmt.Sprintf("cluster: %d/%d ranks joined", count, c.cfg.WorldSize),
				"job", c.cfg.JobID, "waited", now.Sub(start).Round(time.Millisecond))
			lastProgress, lastCount = now, count
		}
		if c.cfg.WorldSize > 1 && !now.Before(nextJoin) {
			joined, err := c.contactSeeds(ctx, seeds)
			if err != nil {
				return c.joinError(err, start, seeds)
			}
			if joined {
				nextJoin, backoff = time.Now().Add(rejoinInterval), 50*time.Millisecond
			} else {
				nextJoin, backoff = time.Now().Add(backoff), min(2*backoff, maxSeedBackoff)
			}
			continue // evaluate what the join brought
		}
		next := nextJoin
		if c.cfg.WorldSize == 1 {
			next = now.Add(progressEvery)
		}
		if count != lastCount {
			next = minTime(next, lastProgress.Add(progressMinGap))
		}
		next = minTime(next, lastProgress.Add(progressEvery))
		if !wake.IsZero() {
			next = minTime(next, wake)
		}
		timer.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-c.view.changed:
		case <-timer.C:
		case <-ctx.Done():
			return c.joinError(c.incomplete(ctx, start), start, seeds)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// formed records the topology and logs it.
func (c *Cluster) formed(topo *topology.Topology, start time.Time) {
	c.topo = topo
	for _, m := range topo.Members() {
		if m.Name == c.name {
			c.rank = m.Rank
		}
	}
	summary, table, _ := strings.Cut(topo.String(), "\n")
	c.log.Info(fmt.Sprintf("cluster: %d/%d ranks joined; world formed: %s", topo.Size(), c.cfg.WorldSize, summary),
		"job", c.cfg.JobID, "rank", c.rank, "name", c.name, "waited", time.Since(start).Round(time.Millisecond))
	c.log.Debug("cluster: topology\n"+table, "job", c.cfg.JobID)
}

// contactSeeds resolves the seeds and joins through every address that is
// not this process's. joined reports whether some join succeeded; err is
// set, with ErrSeedUnreachable, only when a seed cannot be routed to from
// this interface.
func (c *Cluster) contactSeeds(ctx context.Context, seeds []*seedStatus) (joined bool, err *JoinError) {
	self := c.tr.addr()
	var targets []string
	owner := make(map[string]*seedStatus)
	for _, s := range seeds {
		host, port, _ := net.SplitHostPort(s.seed) // validated
		var ips []net.IP
		if ip := net.ParseIP(host); ip != nil {
			ips = []net.IP{ip}
		} else {
			addrs, rerr := net.DefaultResolver.LookupIPAddr(ctx, host)
			if rerr != nil {
				s.lastErr = fmt.Errorf("resolving %s: %w", host, rerr)
				continue
			}
			// A dual-stack name: only the addresses of this
			// process's family can be reached from its socket.
			for _, a := range addrs {
				if (a.IP.To4() != nil) == (c.tr.ip.To4() != nil) {
					ips = append(ips, a.IP)
				}
			}
			if len(ips) == 0 {
				s.lastErr = fmt.Errorf("%s resolves to no address of this process's family (it gossips on %s)", host, c.tr.ip)
				continue
			}
		}
		s.others = 0
		for _, ip := range ips {
			a := net.JoinHostPort(ip.String(), port)
			if a == self {
				s.self = true
				continue
			}
			s.others++
			if _, dup := owner[a]; !dup {
				owner[a] = s
				targets = append(targets, a)
			}
		}
	}
	if len(targets) == 0 {
		return false, nil // this process is the seed, or no name resolved yet
	}
	result := make(chan error, 1)
	go func() {
		_, err := c.ml.Join(targets)
		result <- err
	}()
	var jerr error
	select {
	case jerr = <-result:
	case <-ctx.Done():
		return false, nil // the caller reports the timeout
	}
	text := ""
	if jerr != nil {
		text = jerr.Error()
	}
	for _, a := range targets {
		s := owner[a]
		// memberlist reports no failure at all once one address worked.
		if jerr == nil || !strings.Contains(text, "failed to join "+a+": ") {
			s.joined, s.handshake, s.lastErr = true, false, nil
			joined = true
			continue
		}
		why := joinFailure(text, a)
		dial, dialed := c.tr.lastDial(a)
		switch {
		case dialed && dial.err != nil && unroutable(dial.err):
			return false, &JoinError{Err: ErrSeedUnreachable, Cause: dial.err,
				msg: fmt.Sprintf("cannot reach seed %s (%s) from %s, this process's gossip address: %v: the interface this process gossips on has no route to the seed; pick another with HIERCOMM_SOCKET_IFNAME (or set HIERCOMM_ADDR)",
					a, s.seed, self, dial.err)}
		case dialed && dial.err != nil:
			s.lastErr = dial.err
		case dialed:
			// Connected, then the exchange failed: the peer could not
			// decrypt our state and hung up, or we could not decrypt
			// its answer.
			s.handshake = true
			s.lastErr = fmt.Errorf("connected to %s, but the exchange failed: %s", a, why)
		default:
			s.lastErr = errors.New(why)
		}
	}
	return joined, nil
}

// joinFailure extracts the reason memberlist gave for addr from its
// combined error text.
func joinFailure(text, addr string) string {
	_, rest, ok := strings.Cut(text, "failed to join "+addr+": ")
	if !ok {
		return text
	}
	if i := strings.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	return strings.TrimSpace(rest)
}

// unroutable reports whether a dial error says that this host cannot route
// to the address from the bound local IP: waiting does not help. (Linux
// refuses a connection from a loopback address to another host with
// EINVAL; an IPv4 socket cannot reach an IPv6 seed at all.)
func unroutable(err error) bool {
	var ae *net.AddrError
	return errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EINVAL) || errors.As(err, &ae)
}

// Topology is the world's topology, the same on every member.
func (c *Cluster) Topology() *topology.Topology { return c.topo }

// Rank is this process's global rank in the world.
func (c *Cluster) Rank() int { return c.rank }

// Name is this process's membership name, as the others' messages give it.
func (c *Cluster) Name() string { return c.name }

// OnFailure registers fn to be called once for every member of the world
// that the failure detector declares dead (not for one that leaves
// gracefully), including, at once, those already declared. Callbacks run
// one at a time, on a goroutine of the Cluster, in the order of the
// failures and, for one failure, in the order they were registered. fn must
// not block for long: later failures wait for it. After Leave no callback
// is called.
func (c *Cluster) OnFailure(fn func(*Failure)) {
	c.view.onFailure(fn)
}

// Failures returns the members declared dead so far, in the order they
// were.
func (c *Cluster) Failures() []*Failure {
	return c.view.failureList()
}

// Leave leaves the world gracefully: it gossips a leave notice (the others
// log the departure and raise no Failure), tells memberlist, waiting for
// both to go out at most until ctx's deadline (5s without one; not at all
// if ctx is already done), and shuts gossip down, closing the sockets. From
// its start no failure is recorded and no callback called. Leave is
// idempotent: later calls return the first one's result.
func (c *Cluster) Leave(ctx context.Context) error {
	c.leaveOnce.Do(func() { c.leaveErr = c.leave(ctx) })
	return c.leaveErr
}

func (c *Cluster) leave(ctx context.Context) error {
	c.view.close()
	c.disp.stop()
	if !c.markDown() {
		return nil
	}
	deadline := time.Now().Add(leaveTimeout)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	var errs []error
	if ctx.Err() == nil && time.Until(deadline) > 0 {
		if c.ml.NumMembers() > 1 {
			// The notice goes first: memberlist's own leave message
			// cannot be told from a death (see failure.go).
			// At the end of a job everyone leaves at once: stop waiting
			// for the notice to go out once nobody is left to hear it.
			wait := time.NewTimer(time.Until(deadline))
			poll := time.NewTicker(c.cfg.Detector.GossipInterval)
			sent := c.view.announceLeave()
		notice:
			for {
				select {
				case <-sent:
					break notice
				case <-poll.C:
					if c.view.nobodyListening() || c.ml.NumMembers() <= 1 {
						break notice
					}
				case <-wait.C:
					break notice
				case <-ctx.Done():
					break notice
				}
			}
			wait.Stop()
			poll.Stop()
		}
		if left := time.Until(deadline); ctx.Err() == nil && left > 0 && !c.view.nobodyListening() {
			if err := c.ml.Leave(left); err != nil {
				errs = append(errs, fmt.Errorf("cluster: leave: %w (the others may see this process's exit as a failure)", err))
			}
		}
	}
	if err := c.ml.Shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: shut down gossip: %w", err))
	}
	return errors.Join(errs...)
}

// markDown records that memberlist is being shut down; it returns false if
// it already was.
func (c *Cluster) markDown() bool {
	c.downMu.Lock()
	defer c.downMu.Unlock()
	if c.down {
		return false
	}
	c.down = true
	return true
}

// Close is Leave with a 2s timeout.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return c.Leave(ctx)
}

// crash stops gossip without telling anyone, as a killed process would:
// the others' failure detectors must find out. For tests.
func (c *Cluster) crash() {
	c.view.close()
	c.disp.stop()
	if c.markDown() {
		c.ml.Shutdown()
	}
}

// evaluate decides, from the members seen, whether the world has formed
// (topo set: the record switches to the formed world), cannot form (err, a
// *JoinError), or Join must wait (wake, if set, is when to look again
// without news).
//
// Every member that has seen the same members decides the same: the set
// of this job's members ever seen, dead or alive, is judged as a whole.
// Members that claim the same rank or the same host and local index are an
// error as soon as both are seen; a full set that topology.New rejects is
// an error; a member lost before formation is an error once the set is
// full, or after grace (time for the gossip that may complete the set and
// name the real problem, as when the first to see a duplicate rank leaves).
func (v *view) evaluate(now time.Time, grace time.Duration) (topo *topology.Topology, wake time.Time, err *JoinError) {
	v.mu.Lock()
	defer v.mu.Unlock()
	all := make([]topology.Member, 0, len(v.seen))
	var lost []*seenMember
	for _, s := range v.seen {
		all = append(all, s.member)
		if s.state != stateAlive {
			lost = append(lost, s)
		}
	}
	slices.SortFunc(all, compareClaims)
	if msg := conflicts(all, v.worldSize); msg != "" {
		return nil, time.Time{}, &JoinError{Err: ErrWorldInvalid, msg: msg}
	}
	if len(all) == v.worldSize {
		t, err := topology.New(all)
		if err != nil {
			return nil, time.Time{}, &JoinError{Err: ErrWorldInvalid, Cause: err,
				msg: fmt.Sprintf("the %d members of job %q cannot form a world: %v", len(all), v.jobID, err)}
		}
		if len(lost) == 0 {
			v.formed = true
			v.world = make(map[string]topology.Member, len(all))
			for _, m := range t.Members() {
				v.world[m.Name] = m
			}
			return t, time.Time{}, nil
		}
	}
	if len(lost) > 0 {
		slices.SortFunc(lost, func(a, b *seenMember) int { return a.since.Compare(b.since) })
		if first := lost[0].since.Add(grace); len(all) < v.worldSize && now.Before(first) {
			return nil, first, nil
		}
		var parts []string
		for _, s := range lost {
			how := "left"
			if s.state == stateDead {
				how = "was declared dead (it left no notice)"
			}
			parts = append(parts, describeMember(s.member)+" "+how)
		}
		return nil, time.Time{}, &JoinError{Err: ErrMemberLost,
			msg: fmt.Sprintf("%s before the world of job %q formed: check its log (a process whose join fails leaves)", strings.Join(parts, ", "), v.jobID)}
	}
	if len(all) > v.worldSize {
		return nil, time.Time{}, &JoinError{Err: ErrWorldInvalid,
			msg: fmt.Sprintf("%d processes of job %q joined, but the world size is %d: %s: check WORLD_SIZE and that no process was started twice",
				len(all), v.jobID, v.worldSize, describeMembers(all))}
	}
	return nil, time.Time{}, nil
}

// conflicts checks claims that no later member can fix: a rank out of
// range, a rank claimed twice, a host and local index claimed twice. all is
// in claim order. It returns "" if there is none.
func conflicts(all []topology.Member, worldSize int) string {
	byRank := make(map[int]topology.Member)
	type hostLocal struct {
		host  string
		local int
	}
	byLocal := make(map[hostLocal]topology.Member)
	for _, m := range all {
		if m.Rank >= worldSize {
			return fmt.Sprintf("%s claims rank %d, but the world size is %d: check RANK and WORLD_SIZE", describeMember(m), m.Rank, worldSize)
		}
		if m.Rank >= 0 {
			if o, ok := byRank[m.Rank]; ok {
				return fmt.Sprintf("two processes claim rank %d: %s and %s: every process needs its own RANK", m.Rank, describeMember(o), describeMember(m))
			}
			byRank[m.Rank] = m
		}
		k := hostLocal{m.Host, m.Local}
		if o, ok := byLocal[k]; ok {
			return fmt.Sprintf("two processes claim host %s, local index %d: %s and %s: every process of a host needs its own LOCAL_RANK (or its own HIERCOMM_HOST_ID)", m.Host, m.Local, describeMember(o), describeMember(m))
		}
		byLocal[k] = m
	}
	return ""
}
