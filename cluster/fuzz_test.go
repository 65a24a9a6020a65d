package cluster

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/topology"
)

// The decoders of what other processes send: member metadata and the
// join it drives (memberlist delivers both only from members that hold
// the job key, but a member may run another build or be buggy), and the
// Slurm host list a launcher hands over.

// FuzzDecodeMeta: whatever decodeMeta accepts re-encodes (when it fits
// memberlist's limit) to metadata that decodes to the same member.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []topology.Member{
		{Rank: -1, Host: "node-3", Local: 1, Device: 1, Addr: "10.0.0.7:29600"},
		{Rank: 5, Host: "h", Local: 0, Device: -1},
	} {
		b, err := encodeMeta("train-42", m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":2,"job":"j"}`))
	f.Add([]byte(`{"v":1,"job":"","rank":1}`))
	f.Add([]byte(`{"v":1,"job":"j","rank":1e300}`))
	f.Add([]byte(`{"v":1,"job":"j","rank":-9223372036854775808,"local":9223372036854775807}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		job, m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if job == "" {
			t.Fatal("decodeMeta accepted metadata without a job id")
		}
		again, err := encodeMeta(job, m)
		if err != nil {
			return // too long for memberlist: the sender could not have sent it
		}
		job2, m2, err := decodeMeta(again)
		if err != nil || job2 != job || m2 != m {
			t.Fatalf("decode(encode(%q, %+v)) = %q, %+v, %v", job, m, job2, m2, err)
		}
	})
}

// FuzzJoinMessages drives a joining process's view of the members with
// the messages memberlist hands it — two members joining with arbitrary
// metadata, one of them updating it, an arbitrary gossip message (a leave
// notice, or not) — and judges the world. Nothing may panic, and a world
// that forms must be the members seen, valid (topology's invariants), of
// the job's size.
func FuzzJoinMessages(f *testing.F) {
	meta := func(rank, local int, host string) []byte {
		b, err := encodeMeta("fuzz", topology.Member{Rank: rank, Host: host, Local: local, Device: -1, Addr: "127.0.0.1:1"})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(meta(1, 1, "a"), meta(2, 0, "b"), meta(2, 0, "b"), []byte(`{"v":1,"leave":"m1"}`))
	f.Add(meta(-1, 1, "a"), meta(-1, 0, "b"), meta(-1, 0, "c"), []byte(`{"v":1,"leave":"self"}`))
	f.Add(meta(1, 1, "a"), meta(1, 1, "a"), meta(7, 0, "b"), []byte(`not json`))
	f.Add(meta(1, 0, "a"), []byte(`{"v":1,"job":"other","rank":2,"host":"b","local":0,"device":-1}`), []byte(`{"v":3}`), []byte{})
	f.Add(meta(2, 1, "a"), meta(1, 0, "b"), meta(1, 5, "b"), []byte(`{"v":1,"leave":"m2"}`))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, meta1, meta2, update, msg []byte) {
		disp := newDispatcher()
		defer disp.stop()
		const world = 3
		self := topology.Member{Rank: 0, Host: "a", Local: 0, Device: -1, Addr: "127.0.0.1:1", Name: "self"}
		if strings.Contains(string(meta1)+string(meta2), `"rank":-1`) {
			self.Rank = -1 // every member of a world lets membership assign, or none
		}
		selfMeta, err := encodeMeta("fuzz", self)
		if err != nil {
			t.Fatal(err)
		}
		v := newView(Config{JobID: "fuzz", WorldSize: world, Logger: log, Detector: fastDetector}, "self", selfMeta, disp)
		v.seen["self"] = &seenMember{member: self}
		v.NotifyJoin(&memberlist.Node{Name: "m1", Meta: meta1})
		v.NotifyJoin(&memberlist.Node{Name: "m2", Meta: meta2})
		v.NotifyUpdate(&memberlist.Node{Name: "m2", Meta: update})
		v.NotifyMsg(msg)
		topo, _, jerr := v.evaluate(time.Now(), time.Second)
		if topo == nil {
			if jerr != nil && jerr.Error() == "" {
				t.Fatal("a JoinError without a message")
			}
			return
		}
		if topo.Size() != world {
			t.Fatalf("a world of %d formed, want %d", topo.Size(), world)
		}
		names := map[string]bool{}
		for r, m := range topo.Members() {
			if m.Rank != r || names[m.Name] {
				t.Fatalf("member %d is %+v (names so far %v)", r, m, names)
			}
			names[m.Name] = true
			if nd := topo.NodeOf(r); nd < 0 || nd >= topo.NumNodes() || topo.LocalRank(r) != m.Local || topo.Nodes()[nd].Ranks[m.Local] != r {
				t.Fatalf("rank %d (%+v) is not where its node says:\n%v", r, m, topo)
			}
		}
		for _, n := range []string{"self", "m1", "m2"} {
			if !names[n] {
				t.Fatalf("the world %v lacks %s", topo.Members(), n)
			}
		}
	})
}

// FuzzExpandHostList: Slurm's compressed host list (SLURM_STEP_NODELIST).
// No panic; a list that expands has 1 to 2^20 non-empty names, and a list
// without brackets expands to its comma-separated names.
func FuzzExpandHostList(f *testing.F) {
	for _, s := range []string{"gpu[01-04,07],cpu3,n[1-2]x", "n[1-2]-r[1-2]", "a", "n[08-10]", "x[0-1048575]", "x[0-1048576]",
		"n[1-18446744073709551615]", "[", "n[]", "n[2-1]", "a,,b", "n[1-2][3-4]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostList(s)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > maxHostListLen {
			t.Fatalf("%q expands to %d hosts", s, len(hosts))
		}
		for i, h := range hosts {
			if h == "" {
				t.Fatalf("%q: host %d is empty", s, i)
			}
		}
		if !strings.ContainsAny(s, "[]") {
			if got := strings.Join(hosts, ","); got != s {
				t.Fatalf("%q without brackets expands to %q", s, got)
			}
		}
	})
}

// FuzzLoadLaunch: the launcher's variables (torchrun's, Slurm's,
// hiercomm's own) as a scheduler or a user sets them. No panic; an error
// is an *EnvError that never repeats the job key; a Launch that loads and
// resolves is within its documented ranges.
func FuzzLoadLaunch(f *testing.F) {
	const key = "KEY-0123456789abcdef-KEY"
	f.Add("1", "4", "1", "2", "10.0.0.1", "29500", "", "", "", "", "", "", key)
	f.Add("", "", "", "", "", "", "3", "8", "1", "gpu[01-04]", "", "", key)
	f.Add("", "2", "", "", "", "", "", "", "", "", "a:1,b:2", "^docker,eth", key)
	f.Add("-1", "99999999999999999999", "x", "", "::1", "0", "", "", "", "", "", "=", "short")
	f.Add("", "", "", "", "", "", "0", "2", "0", "n[1-2", "", "", "")
	f.Fuzz(func(t *testing.T, rank, world, local, localWorld, masterAddr, masterPort, procID, ntasks, localID, nodelist, seeds, ifname, k string) {
		vars := map[string]string{
			EnvRank: rank, EnvWorldSize: world, EnvLocalRank: local, EnvLocalWorldSize: localWorld,
			EnvMasterAddr: masterAddr, EnvMasterPort: masterPort,
			EnvSlurmProcID: procID, EnvSlurmNTasks: ntasks, EnvSlurmLocalID: localID, EnvSlurmStepNodeList: nodelist,
			EnvSeeds: seeds, EnvSocketIfname: ifname, EnvJobKey: k,
			EnvHostID: "fuzz-host", // no host name lookup
		}
		// The key is secret unless another variable holds it too (an
		// error may repeat that one).
		secret := len(k) >= MinKeyLen
		for name, v := range vars {
			if name != EnvJobKey && strings.Contains(v, k) {
				secret = false
			}
		}
		l, err := LoadLaunch(func(name string) string { return vars[name] })
		if err != nil {
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("LoadLaunch: %v (%T), want an *EnvError", err, err)
			}
			if secret && strings.Contains(err.Error(), k) {
				t.Fatalf("the error repeats the job key: %v", err)
			}
			return
		}
		r, err := l.Resolve()
		if err != nil {
			if secret && strings.Contains(err.Error(), k) {
				t.Fatalf("Resolve's error repeats the job key: %v", err)
			}
			return
		}
		if r.WorldSize < 1 || r.Rank < -1 || r.Rank >= r.WorldSize || r.LocalRank < 0 || r.LocalRank >= r.WorldSize ||
			r.GossipPort < 0 || r.GossipPort > 65535 || (r.WorldSize > 1 && (len(r.Seeds) == 0 || len(r.Key) < MinKeyLen)) {
			t.Fatalf("a resolved Launch out of its ranges: %+v", r)
		}
	})
}
