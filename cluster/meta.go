package cluster

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/topology"
)

// Member metadata.
//
// Each member publishes, in memberlist's node metadata, a small JSON object:
//
//	{"v":1,"job":"train-42","rank":-1,"host":"node-3","local":1,"device":1,"addr":"10.0.0.7:29600",
//	 "agree":["quic","auto","","1","host"]}
//
// agree holds the values of Config.Agree, the launch's settings every
// member must share (evaluate compares them before the world forms); their
// names are the receiver's own, since every member runs the same build.
// v is the format version; a member that reads another version reports it
// instead of guessing (every process of a job must run the same hiercomm).
// Fields may be added within a version (decoders ignore unknown ones); a
// change of meaning is a new version. The member's Name is memberlist's node
// name and is not repeated here. memberlist caps metadata at
// memberlist.MetaMaxSize (512) bytes: encodeMeta refuses more, naming the
// fields that take the room.

// metaVersion is the version of the metadata this build writes and reads.
const metaVersion = 1

type memberMeta struct {
	V      int      `json:"v"`
	Job    string   `json:"job"`
	Rank   int      `json:"rank"`
	Host   string   `json:"host"`
	Local  int      `json:"local"`
	Device int      `json:"device"`
	Addr   string   `json:"addr,omitempty"`
	Agree  []string `json:"agree,omitempty"`
	// Joining: the member joins a running job (Config.Joining); it
	// waits to be admitted by a Grow and counts in no forming world.
	Joining bool `json:"joining,omitempty"`
}

// A Setting is one value of Config.Agree: a setting every member of a job
// must have the same value of, named as the user sets it (the variable, or
// the option).
type Setting struct {
	Name, Value string
}

// values are the values of settings, in order.
func values(settings []Setting) []string {
	v := make([]string, len(settings))
	for i, s := range settings {
		v[i] = s.Value
	}
	return v
}

// errMetaVersion is wrapped by decodeMeta's error for metadata of another
// version.
var errMetaVersion = errors.New("member metadata of another version")

// encodeMeta is the metadata of member m of job, with the settings it
// must share with the others.
func encodeMeta(job string, m topology.Member, agree []Setting, joining bool) ([]byte, error) {
	b, err := json.Marshal(memberMeta{V: metaVersion, Job: job, Rank: m.Rank, Host: m.Host, Local: m.Local, Device: m.Device, Addr: m.Addr, Agree: values(agree), Joining: joining})
	if err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		n := 0
		for _, s := range agree {
			n += len(s.Value) + len(`"",`)
		}
		return nil, fmt.Errorf("the member metadata takes %d bytes, memberlist allows %d: shorten the job id (%d bytes), the host id (%d bytes), the address (%d bytes) or the settings to agree on (%d bytes)",
			len(b), memberlist.MetaMaxSize, len(job), len(m.Host), len(m.Addr), n)
	}
	return b, nil
}

// decodeMeta reads metadata written by encodeMeta. The member's Name is
// left empty.
func decodeMeta(b []byte) (job string, m topology.Member, agree []string, err error) {
	mm, err := decodeMemberMeta(b)
	if err != nil {
		return "", m, nil, err
	}
	return mm.Job, mm.member(), mm.Agree, nil
}

// decodeMemberMeta reads metadata written by encodeMeta, whole.
func decodeMemberMeta(b []byte) (memberMeta, error) {
	if len(b) == 0 {
		return memberMeta{}, errors.New("no member metadata (not a hiercomm process?)")
	}
	var v struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return memberMeta{}, fmt.Errorf("member metadata is not valid: %w", err)
	}
	if v.V != metaVersion {
		return memberMeta{}, fmt.Errorf("%w: version %d, this process reads %d: run the same hiercomm version in every process of a job", errMetaVersion, v.V, metaVersion)
	}
	var mm memberMeta
	if err := json.Unmarshal(b, &mm); err != nil {
		return memberMeta{}, fmt.Errorf("member metadata is not valid: %w", err)
	}
	if mm.Job == "" {
		return memberMeta{}, errors.New("member metadata has no job id")
	}
	return mm, nil
}

// member is the member mm describes; its Name is left empty.
func (mm memberMeta) member() topology.Member {
	return topology.Member{Rank: mm.Rank, Host: mm.Host, Local: mm.Local, Device: mm.Device, Addr: mm.Addr}
}

// The record of the members.
//
// Each process keeps a view of its job's members, built from the metadata
// memberlist delivers with every join and update. Join judges it (evaluate,
// assign.go); failure.go turns departures after formation into Failures.

// memberState is a member's state as memberlist last reported it.
type memberState int

const (
	stateAlive memberState = iota
	stateLeft              // gone, after its leave notice
	stateDead              // gone without a notice: declared dead
)

// seenMember is a member of this job seen during the join.
type seenMember struct {
	member topology.Member // Name set
	agree  []string        // the values of the settings it was launched with (Config.Agree)
	state  memberState
	since  time.Time // when it left or died
}

// view is this process's record of the job's members. memberlist feeds it
// through the Delegate and EventDelegate methods below, one call at a time
// and possibly while holding memberlist's own locks, so view never calls
// into memberlist; Join reads it through evaluate.
type view struct {
	jobID       string
	self        string
	worldSize   int
	agree       []Setting // this process's Config.Agree, names and values
	meta        []byte
	log         *slog.Logger
	disp        *dispatcher
	changed     chan struct{}                    // capacity 1: the record changed (for Join's loop)
	notices     *memberlist.TransmitLimitedQueue // leave notices to gossip (failure.go)
	leaveWindow time.Duration                    // how long a member gone without a leave notice may wait for one

	mu        sync.Mutex
	seen      map[string]*seenMember     // guarded by mu: this job's members seen before formation, by name
	foreign   map[string]string          // guarded by mu: members not counted, by name, with the reason (warned once)
	formed    bool                       // guarded by mu
	world     map[string]topology.Member // guarded by mu: after formation, the world's members by name
	leaving   map[string]bool            // guarded by mu: members whose leave notice arrived
	pending   map[string]*time.Timer     // guarded by mu: world members gone without a notice, awaiting one
	closing   bool                       // guarded by mu: this process is leaving; nothing more is recorded
	failed    map[string]bool            // guarded by mu: names in failures
	failures  []*Failure                 // guarded by mu
	callbacks []func(*Failure)           // guarded by mu
	// Growing (grow.go). waiting: the processes that ask to join the
	// running job (Config.Joining), by name; admitted: this process's
	// admission, once it came (a joining process's own view).
	waiting   map[string]*seenMember  // guarded by mu
	gone      map[string]bool         // guarded by mu: processes that waited and left or died
	withdrawn map[int]*withdrawnState // guarded by mu: Grows given up, by generation (Withdraw)
	admitted  *admission              // guarded by mu
	joining   bool                    // this process joins a running job (Config.Joining)
}

func newView(cfg Config, self string, meta []byte, disp *dispatcher) *view {
	return &view{
		jobID:     cfg.JobID,
		self:      self,
		worldSize: cfg.WorldSize,
		agree:     cfg.Agree,
		meta:      meta,
		log:       cfg.Logger,
		disp:      disp,
		changed:   make(chan struct{}, 1),
		notices: &memberlist.TransmitLimitedQueue{
			NumNodes:       func() int { return cfg.WorldSize },
			RetransmitMult: noticeRetransmitMult,
		},
		leaveWindow: leaveWindow(cfg.Detector),
		seen:        make(map[string]*seenMember),
		foreign:     make(map[string]string),
		leaving:     make(map[string]bool),
		pending:     make(map[string]*time.Timer),
		failed:      make(map[string]bool),
		waiting:     make(map[string]*seenMember),
		gone:        make(map[string]bool),
		withdrawn:   make(map[int]*withdrawnState),
		joining:     cfg.Joining,
	}
}

func (v *view) signal() {
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

// NodeMeta is this process's metadata; encodeMeta kept it within the limit.
func (v *view) NodeMeta(limit int) []byte { return v.meta }

// The rest of memberlist.Delegate: no state rides on push/pull syncs. The
// only user messages are leave notices (NotifyMsg, GetBroadcasts in
// failure.go) and admissions (grow.go).

func (v *view) LocalState(join bool) []byte            { return nil }
func (v *view) MergeRemoteState(buf []byte, join bool) {}

// member decodes n's metadata, and the settings it was launched with; ok
// is false (and the node recorded as foreign, warned once) if n is not a
// member of this job.
func (v *view) member(n *memberlist.Node) (m topology.Member, agree []string, joining, ok bool) {
	mm, err := decodeMemberMeta(n.Meta)
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case mm.Job != v.jobID:
		// Impossible with keys derived from the job id, unless a key
		// was reused with another derivation: be safe.
		why = fmt.Sprintf("it belongs to job %q", mm.Job)
	default:
		m = mm.member()
		m.Name = n.Name
		return m, mm.Agree, mm.Joining, true
	}
	if _, warned := v.foreign[n.Name]; !warned {
		desc := fmt.Sprintf("%s at %s (%s)", n.Name, n.Address(), why)
		v.foreign[n.Name] = desc
		v.log.Warn("cluster: ignoring a gossip member that is not of this job: "+desc, "job", v.jobID)
	}
	return m, nil, false, false
}

// NotifyJoin records a member that became alive.
func (v *view) NotifyJoin(n *memberlist.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m, agree, joining, ok := v.member(n)
	if !ok {
		return
	}
	if joining {
		v.newcomerLocked(m, agree)
		return
	}
	if v.formed {
		if w, ok := v.world[n.Name]; ok {
			if t, ok := v.pending[n.Name]; ok {
				t.Stop()
				delete(v.pending, n.Name)
				v.log.Warn("cluster: a member declared dead refuted it and is alive again: "+describeMember(w), "job", v.jobID)
			} else if v.failed[n.Name] {
				v.log.Warn("cluster: a member declared dead is alive again; it stays failed: "+describeMember(w), "job", v.jobID)
			}
			return
		}
		v.log.Warn("cluster: a process of this job joined after the world formed without asking to join a running job ("+launchenv.EnvJoin+"=running); ignored: "+describeMember(m), "job", v.jobID)
		return
	}
	v.seen[n.Name] = &seenMember{member: m, agree: agree}
	v.signal()
}

// NotifyUpdate records a member whose metadata changed. hiercomm never
// changes a member's metadata once it is up.
func (v *view) NotifyUpdate(n *memberlist.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m, agree, joining, ok := v.member(n)
	if !ok || joining {
		return
	}
	if v.formed {
		if _, ok := v.world[n.Name]; ok {
			v.log.Warn("cluster: a member changed its metadata after the world formed; ignored: "+describeMember(m), "job", v.jobID)
		}
		return
	}
	if s, ok := v.seen[n.Name]; ok {
		s.member, s.agree = m, agree
		v.signal()
	}
}

// aliveCount is the number of this job's members alive before formation.
func (v *view) aliveCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, s := range v.seen {
		if s.state == stateAlive {
			n++
		}
	}
	return n
}

// snapshot returns the members of the job seen before formation, in claim
// order, descriptions of those among them that left or died, and of the
// foreign nodes seen.
func (v *view) snapshot() (seen []topology.Member, lost, foreign []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var ss []*seenMember
	for _, s := range v.seen {
		ss = append(ss, s)
	}
	slices.SortFunc(ss, func(a, b *seenMember) int { return compareClaims(a.member, b.member) })
	for _, s := range ss {
		seen = append(seen, s.member)
		switch s.state {
		case stateLeft:
			lost = append(lost, describeMember(s.member)+" left")
		case stateDead:
			lost = append(lost, describeMember(s.member)+" was declared dead (it left no notice)")
		}
	}
	for _, f := range v.foreign {
		foreign = append(foreign, f)
	}
	slices.Sort(foreign)
	return seen, lost, foreign
}

// compareClaims orders members by rank claim, host, local index and name:
// every process lists a member set in the same order.
func compareClaims(a, b topology.Member) int {
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), strings.Compare(a.Host, b.Host),
		cmp.Compare(a.Local, b.Local), strings.Compare(a.Name, b.Name))
}
