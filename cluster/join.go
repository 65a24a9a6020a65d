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
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
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
	// zero, defaults to launchenv.DefaultJoinTimeout (2m).
	JoinTimeout time.Duration
	// Agree are the launch's settings every member of the job must share
	// (hiercomm.Init gives those its Plan is decided from: the network,
	// the tier within a node, ...), as name and value. Join compares
	// every member's with this process's before the world forms, and
	// fails with ErrWorldInvalid naming the member and every setting it
	// differs in, with both values, instead of forming a world whose
	// processes would build different communicators. Their values
	// travel in the member metadata (at most 512 bytes in all: keep them
	// short); the names are each process's own, the same in one build.
	// May be empty.
	Agree []Setting
	// Joining makes this process join a job that is already running (a
	// replacement for a failed process, or an addition) instead of
	// forming a world of WorldSize: Join joins the members' gossip
	// through the seeds and returns once a member admits it (Admit,
	// when the members grow), with the grown world's topology and this
	// process's rank in it; or fails, wrapping ErrNotAdmitted, within
	// JoinTimeout. Self.Rank is ignored: the grown world numbers its
	// newcomers (topology.Topology.Grown). launchenv.Launch.Joining.
	Joining bool
	// Detector sets the failure detector's timings; zero fields default.
	Detector Detector
	// Logger receives progress, warnings, failures and (at Debug)
	// memberlist's own log. If nil, defaults to slog.Default().
	Logger *slog.Logger
}

// maxJobIDLen bounds JobID (it travels in every member's metadata). The
// defaults of Config are the launch's (launchenv): DefaultJoinTimeout,
// MinKeyLen.
const maxJobIDLen = 128

// Timings of the join loop.
const (
	maxSeedBackoff  = time.Second     // retry a seed that is not up yet at least this often
	rejoinInterval  = 5 * time.Second // after a successful join, join again at least this often while the world is incomplete (merges partitions; sooner at first: resyncRounds)
	resyncRounds    = 2               // the first join again comes this many gossip intervals after a successful join, then twice as late each time
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
	case len(c.Key) < launchenv.MinKeyLen:
		return bad("Key has %d bytes, need at least %d: every process of the job must share the same random key (HIERCOMM_JOB_KEY; make one with `openssl rand -hex 32`)", len(c.Key), launchenv.MinKeyLen)
	case c.WorldSize < 1:
		return bad("WorldSize %d: it must be at least 1", c.WorldSize)
	case c.Self.Host == "":
		return bad("Self.Host is empty: every process needs a host id (processes with the same one share a node)")
	case c.Self.Local < 0:
		return bad("Self.Local %d: it must be >= 0 (LOCAL_RANK)", c.Self.Local)
	case c.Self.Device < -1:
		return bad("Self.Device %d: it must be an accelerator ordinal >= 0, or -1 for none", c.Self.Device)
	case c.Self.Rank < -1 || c.Self.Rank >= c.WorldSize && !c.Joining:
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
	if c.Joining && len(c.Seeds) == 0 {
		return bad("Seeds is empty: a process that joins a running job (Joining) needs the address of one of its members to join through (MASTER_ADDR:port, HIERCOMM_SEEDS)")
	}
	if c.Joining {
		c.Self.Rank = -1
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
		c.JoinTimeout = launchenv.DefaultJoinTimeout
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
	mu   sync.Mutex // guards topo, rank and gen, which Admit changes
	topo *topology.Topology
	rank int
	gen  int

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
	form := c.form
	if cfg.Joining {
		form = c.await
	}
	if err := form(ctx); err != nil {
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
	meta, err := encodeMeta(cfg.JobID, cfg.Self, cfg.Agree, cfg.Joining)
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
	v.seen[name] = &seenMember{member: self, agree: values(cfg.Agree)}

	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.Transport = tr
	mc.SecretKey = key
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	mc.Delegate = v
	mc.Events = v
	mc.Logger = log.New(newMemberlistLog(cfg.Logger), "", 0)
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

// Topology is the world's topology, the same on every member.
// After Admit, the grown world's.
func (c *Cluster) Topology() *topology.Topology {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topo
}

// Rank is this process's global rank in the world; after Admit, in the
// grown world.
func (c *Cluster) Rank() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rank
}

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
