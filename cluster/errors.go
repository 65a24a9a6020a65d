package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/topology"
)

// Sentinels wrapped by the errors of Join and of the Cluster; compare with
// errors.Is.
var (
	// ErrWorldIncomplete: the join ended (JoinTimeout, or the caller's
	// context) before WorldSize members of the job were present.
	ErrWorldIncomplete = errors.New("cluster: the world did not complete")
	// ErrSeedUnreachable: this process has no route from its gossip
	// address to a seed. Retrying does not help; another interface
	// (HIERCOMM_SOCKET_IFNAME) or another seed address does.
	ErrSeedUnreachable = errors.New("cluster: seed unreachable from this interface")
	// ErrWorldInvalid: the members present cannot form a world: more of
	// them than the world size, two claiming the same rank or the same
	// host and local index, or any other set topology.New rejects (its
	// error is wrapped as well). Every member reaches the same conclusion.
	ErrWorldInvalid = errors.New("cluster: the members cannot form a world")
	// ErrMemberLost: a member of the job died or left before the world
	// formed.
	ErrMemberLost = errors.New("cluster: a member was lost before the world formed")
	// ErrMemberFailed is wrapped by every *Failure: a member of the formed
	// world was declared dead by the failure detector.
	ErrMemberFailed = errors.New("cluster: member failed")
)

// JoinError is the error of a Join that did not form the world. Its message
// says what happened and what to check; its fields are for programs.
type JoinError struct {
	// Err is the sentinel: ErrWorldIncomplete, ErrSeedUnreachable,
	// ErrWorldInvalid or ErrMemberLost.
	Err error
	// Cause is the underlying error, if any: topology.New's, the
	// context's. errors.Is and errors.As see both Err and Cause.
	Cause error
	// JobID is the job's id.
	JobID string
	// Joined is the number of members of the job that joined before Join
	// gave up, this process included (some may have left or died since);
	// WorldSize the number expected.
	Joined, WorldSize int
	// Elapsed is how long Join ran.
	Elapsed time.Duration
	// Present are the members of the job that joined, Name set, in rank
	// claim order.
	Present []topology.Member

	msg string
}

func (e *JoinError) Error() string { return e.msg }

// Unwrap returns Err and, if set, Cause.
func (e *JoinError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// incomplete is the error of a join that ran out of time (or whose caller
// gave up): ErrWorldIncomplete, with the context's error as cause when the
// caller canceled.
func (c *Cluster) incomplete(ctx context.Context, start time.Time) *JoinError {
	var cause error
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) < c.cfg.JoinTimeout {
		cause = context.Cause(ctx)
	}
	return &JoinError{Err: ErrWorldIncomplete, Cause: cause}
}

// joinError completes je, from evaluate, contactSeeds or incomplete, into
// the error Join returns.
func (c *Cluster) joinError(je *JoinError, start time.Time, seeds []*seedStatus) error {
	elapsed := time.Since(start)
	je.JobID, je.WorldSize, je.Elapsed = c.cfg.JobID, c.cfg.WorldSize, elapsed
	present, lost, foreign := c.view.snapshot()
	je.Present, je.Joined = present, len(present)

	var b strings.Builder
	b.WriteString("cluster: ")
	if je.Err != ErrWorldIncomplete {
		b.WriteString(je.msg)
		if je.Err == ErrMemberLost {
			fmt.Fprintf(&b, " (%d/%d ranks had joined)", je.Joined, je.WorldSize)
		}
	} else {
		fmt.Fprintf(&b, "%d/%d ranks joined after %v", je.Joined, je.WorldSize, elapsed.Round(100*time.Millisecond))
		if je.Cause != nil {
			fmt.Fprintf(&b, " (%v)", je.Cause)
		}
		fmt.Fprintf(&b, "; job %q; present: %s", c.cfg.JobID, describeMembers(present))
		if len(lost) > 0 {
			b.WriteString("; since lost: " + strings.Join(lost, ", "))
		}
		if m := missing(present, c.cfg.WorldSize); m != "" {
			b.WriteString("; missing: " + m)
		}
		if len(foreign) > 0 {
			b.WriteString("; also seen, not counted: " + strings.Join(foreign, ", "))
		}
		b.WriteString("; " + describeSeeds(seeds))
		var handshake []string
		for _, s := range seeds {
			if s.handshake {
				handshake = append(handshake, s.seed)
			}
		}
		if len(handshake) > 0 {
			fmt.Fprintf(&b, "; %s accepted the connection but the encrypted exchange failed: most likely the processes do not share HIERCOMM_JOB_KEY and HIERCOMM_JOB_ID (the gossip key is derived from both)",
				strings.Join(handshake, ", "))
		}
		fmt.Fprintf(&b, "; check that every process was started, that they share HIERCOMM_JOB_KEY and HIERCOMM_JOB_ID, and that %s open between the hosts", c.portsToOpen(seeds))
	}
	je.msg = b.String()
	return je
}

// portsToOpen names the gossip ports (TCP and UDP) that must be open.
func (c *Cluster) portsToOpen(seeds []*seedStatus) string {
	ports := []string{strconv.Itoa(c.tr.port)}
	for _, s := range seeds {
		if _, p, err := net.SplitHostPort(s.seed); err == nil && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	if len(ports) == 1 {
		return "TCP and UDP port " + ports[0] + " are"
	}
	return "TCP and UDP ports " + strings.Join(ports, ", ") + " are"
}

// describeSeeds says, for every seed, whether it was ever reached.
func describeSeeds(seeds []*seedStatus) string {
	if len(seeds) == 0 {
		return "no seeds"
	}
	var parts []string
	for _, s := range seeds {
		switch {
		case s.joined:
			parts = append(parts, s.seed+" reached")
		case s.handshake:
			parts = append(parts, s.seed+" answered, but never let this process join: "+s.lastErr.Error())
		case s.self && s.others == 0:
			parts = append(parts, s.seed+" is this process (it waits for the others to join it)")
		case s.lastErr != nil:
			why := s.lastErr.Error()
			if strings.Contains(why, "connection refused") {
				why += " (nothing listens there: not started yet, or the wrong port)"
			}
			parts = append(parts, s.seed+" never reached: "+why)
		default:
			parts = append(parts, s.seed+" never reached")
		}
	}
	return "seeds: " + strings.Join(parts, "; ")
}

// maxDescribed bounds the members an error message lists.
const maxDescribed = 16

// describeMember names a member in messages: its name, host, local index,
// rank claim and data-plane address.
func describeMember(m topology.Member) string {
	var b strings.Builder
	if m.Rank >= 0 {
		fmt.Fprintf(&b, "rank %d ", m.Rank)
	}
	fmt.Fprintf(&b, "(host %s, local %d", m.Host, m.Local)
	if m.Name != "" {
		fmt.Fprintf(&b, ", name %s", m.Name)
	}
	if m.Addr != "" {
		fmt.Fprintf(&b, ", %s", m.Addr)
	}
	b.WriteByte(')')
	return b.String()
}

func describeMembers(ms []topology.Member) string {
	if len(ms) == 0 {
		return "none"
	}
	var parts []string
	for i, m := range ms {
		if i == maxDescribed {
			parts = append(parts, fmt.Sprintf("and %d more", len(ms)-i))
			break
		}
		parts = append(parts, describeMember(m))
	}
	return strings.Join(parts, ", ")
}

// missing infers who is missing from the members present: the ranks not
// claimed when the launcher gave ranks, else the gaps in each host's local
// indices and how many are on hosts not seen at all.
func missing(present []topology.Member, worldSize int) string {
	absent := worldSize - len(present)
	if absent <= 0 {
		return ""
	}
	ranked := slices.ContainsFunc(present, func(m topology.Member) bool { return m.Rank >= 0 })
	if ranked {
		claimed := make(map[int]bool)
		for _, m := range present {
			claimed[m.Rank] = true
		}
		var ranks []string
		for r := range worldSize {
			if !claimed[r] {
				if len(ranks) == maxDescribed {
					ranks = append(ranks, "...")
					break
				}
				ranks = append(ranks, strconv.Itoa(r))
			}
		}
		return "ranks " + strings.Join(ranks, ", ")
	}
	locals := make(map[string][]int)
	var hosts []string
	for _, m := range present {
		if _, ok := locals[m.Host]; !ok {
			hosts = append(hosts, m.Host)
		}
		locals[m.Host] = append(locals[m.Host], m.Local)
	}
	slices.Sort(hosts)
	var parts []string
	gaps := 0
	for _, h := range hosts {
		ls := locals[h]
		var holes []string
		for l := range slices.Max(ls) {
			if !slices.Contains(ls, l) {
				holes = append(holes, strconv.Itoa(l))
			}
		}
		if len(holes) > 0 {
			gaps += len(holes)
			parts = append(parts, fmt.Sprintf("host %s local %s", h, strings.Join(holes, ", ")))
		}
	}
	if rest := absent - gaps; rest > 0 {
		parts = append(parts, fmt.Sprintf("%d more (on these hosts with higher local indices, or on hosts not seen)", rest))
	}
	return strings.Join(parts, "; ")
}
