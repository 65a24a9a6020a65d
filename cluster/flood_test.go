package cluster

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGarbageOnTheGossipPortDoesNotFloodTheLog: a formed world of two
// gets garbage from a process without the key — datagrams and TCP
// connections on each member's gossip port, the traffic that made
// memberlist write one warning (echoing the sender's bytes) per packet:
// 1,400 lines for this test's traffic before the limit. Now each member
// writes at most logBurst lines of each kind, and the world still works.
func TestGarbageOnTheGossipPortDoesNotFloodTheLog(t *testing.T) {
	log, buf := clusterLogger(t, slog.LevelDebug)
	cfgs := worldConfigs(t, log, []worldProc{{"a", 0, 0}, {"b", 0, 1}}, 30*time.Second)
	cs := mustForm(t, joinAll(t, cfgs))
	before := len(buf.String())
	const datagrams, conns = 500, 100
	for _, c := range cfgs {
		addr := c.Gossip.Addr()
		u, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		for i := range datagrams {
			b := make([]byte, 1+i%200)
			rand.Read(b)
			b[0] = byte(i) // every message type and version, known or not
			u.Write(b)
		}
		u.Close()
		for i := range conns {
			tc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1+i%300)
			rand.Read(b)
			b[0] = byte(i)
			tc.Write(b)
			tc.Close()
		}
	}
	// The members still gossip (each probes the other every 100 ms): the
	// garbage was read, and it broke nothing.
	time.Sleep(2 * time.Second)
	for i, c := range cs {
		if n := c.ml.NumMembers(); n != 2 {
			t.Errorf("member %d sees %d members after the garbage, want 2", i, n)
		}
	}
	out := buf.String()[before:]
	msg := regexp.MustCompile(`msg="([^"\\]|\\.)*"|msg=\S+`)
	perKind := map[string]int{}
	total, garbage := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := msg.FindString(line)
		if m == "" || !strings.Contains(line, "component=memberlist") {
			continue
		}
		total++
		if strings.Contains(line, "from=127.0.0.1") {
			garbage++
		}
		proc, _, _ := strings.Cut(line[strings.Index(line, "worldProc="):], " ")
		perKind[fmt.Sprintf("%s %s", proc, logKey(strings.Trim(strings.TrimPrefix(m, "msg="), `"`)))]++
	}
	for kind, n := range perKind {
		if n > logBurst {
			t.Errorf("%d lines of the kind %q, want at most %d", n, kind, logBurst)
		}
	}
	// Six kinds of complaint per member, logBurst lines each, at most.
	if garbage == 0 || garbage > 2*8*logBurst {
		t.Errorf("%d memberlist lines about the garbage (of %d from memberlist), want 1 to %d", garbage, total, 2*8*logBurst)
	}
	t.Logf("%d memberlist lines (%d naming the sender) after %d garbage datagrams and %d garbage connections to each of 2 members", total, garbage, datagrams, conns)
}

// TestMemberlistLogLimit: within a window, at most logBurst lines of a
// kind (the text before the second colon, without the sender's address)
// go out; once the window has passed, one line says how many were left
// out; kinds beyond logKinds share one limit.
func TestMemberlistLogLimit(t *testing.T) {
	log, buf := clusterLogger(t, slog.LevelDebug)
	w := newMemberlistLog(log)
	now := time.Unix(1000, 0)
	w.now = func() time.Time { return now }
	write := func(format string, a ...any) {
		fmt.Fprintf(w, format+"\n", a...)
	}
	for i := range 100 {
		write("[ERR] memberlist: Decrypt packet failed: unsupported encryption version %d from=10.0.0.9:%d", i, 4000+i)
		write("[DEBUG] memberlist: Stream connection from=10.0.0.9:%d", 5000+i)
	}
	if got := strings.Count(buf.String(), "Decrypt packet failed"); got != logBurst {
		t.Errorf("%d decrypt lines within a window, want %d", got, logBurst)
	}
	if got := strings.Count(buf.String(), "Stream connection"); got != logBurst {
		t.Errorf("%d stream lines within a window, want %d", got, logBurst)
	}
	now = now.Add(logWindow)
	write("[INFO] memberlist: Suspect x has failed, no acks received")
	for _, want := range []string{
		`level=WARN msg="memberlist: left out 95 more lines of the kind \"memberlist: Decrypt packet failed\" in 10s`,
		`level=DEBUG msg="memberlist: left out 95 more lines of the kind \"memberlist: Stream connection\" in 10s`,
		`msg="memberlist: Suspect x has failed, no acks received"`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, buf)
		}
	}
	// Many kinds: the map stays bounded, the excess shares one limit.
	now = now.Add(logWindow)
	before := strings.Count(buf.String(), "\n")
	for i := range 1000 {
		write("[ERR] memberlist: kind %d: detail", i)
	}
	if len(w.kinds) > logKinds {
		t.Errorf("%d kinds tracked, want at most %d", len(w.kinds), logKinds)
	}
	if got, want := strings.Count(buf.String(), "\n")-before, (logKinds-1)*1+logBurst; got != want {
		t.Errorf("%d lines for 1000 kinds, want %d (one each for %d kinds, %d for the rest)", got, want, logKinds-1, logBurst)
	}
}
