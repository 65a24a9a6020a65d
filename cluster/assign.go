package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/topology"
)

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
	var lost, differ []*seenMember
	for _, s := range v.seen {
		all = append(all, s.member)
		if s.state != stateAlive {
			lost = append(lost, s)
		}
		if !slices.Equal(s.agree, values(v.agree)) {
			differ = append(differ, s)
		}
	}
	slices.SortFunc(all, compareClaims)
	if msg := conflicts(all, v.worldSize); msg != "" {
		return nil, time.Time{}, &JoinError{Err: ErrWorldInvalid, msg: msg}
	}
	if len(differ) > 0 {
		slices.SortFunc(differ, func(a, b *seenMember) int { return compareClaims(a.member, b.member) })
		return nil, time.Time{}, &JoinError{Err: ErrWorldInvalid, msg: disagreement(differ[0], v.agree)}
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

// disagreement says how member s was launched otherwise than this
// process (mine): every setting of Config.Agree whose value differs, with
// both values.
func disagreement(s *seenMember, mine []Setting) string {
	var diff []string
	if len(s.agree) != len(mine) {
		diff = append(diff, fmt.Sprintf("it gives %d settings to agree on, this process %d: run the same hiercomm in every process", len(s.agree), len(mine)))
	} else {
		for i, x := range mine {
			if s.agree[i] != x.Value {
				diff = append(diff, fmt.Sprintf("%s: %q here, %q there", x.Name, x.Value, s.agree[i]))
			}
		}
	}
	return fmt.Sprintf("%s was launched with other settings than this process (%s): every process of a job must be launched with the same, or they would build different communicators",
		describeMember(s.member), strings.Join(diff, "; "))
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
