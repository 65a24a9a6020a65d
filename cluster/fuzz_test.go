package cluster

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/topology"
)

// The decoders of what other processes send: member metadata and the
// join it drives (memberlist delivers both only from members that hold
// the job key, but a member may run another build or be buggy). The
// launch environment's parsers are fuzzed in cluster/launchenv.

// FuzzDecodeMeta: whatever decodeMeta accepts re-encodes (when it fits
// memberlist's limit) to metadata that decodes to the same member.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []topology.Member{
		{Rank: -1, Host: "node-3", Local: 1, Device: 1, Addr: "10.0.0.7:29600"},
		{Rank: 5, Host: "h", Local: 0, Device: -1},
	} {
		b, err := encodeMeta("train-42", m, nil, false)
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
	f.Add([]byte(`{"v":1,"job":"j","rank":0,"host":"h","agree":["quic","auto"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		job, m, agree, err := decodeMeta(b)
		if err != nil {
			return
		}
		if job == "" {
			t.Fatal("decodeMeta accepted metadata without a job id")
		}
		settings := make([]Setting, len(agree))
		for i, v := range agree {
			settings[i].Value = v
		}
		again, err := encodeMeta(job, m, settings, false)
		if err != nil {
			return // too long for memberlist: the sender could not have sent it
		}
		job2, m2, agree2, err := decodeMeta(again)
		if err != nil || job2 != job || m2 != m || !slices.Equal(agree2, agree) {
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
		b, err := encodeMeta("fuzz", topology.Member{Rank: rank, Host: host, Local: local, Device: -1, Addr: "127.0.0.1:1"}, nil, false)
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
		selfMeta, err := encodeMeta("fuzz", self, nil, false)
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
