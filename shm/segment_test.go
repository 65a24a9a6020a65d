//go:build linux

package shm

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// deadPid returns the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) procID {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run /bin/true: %v", err)
	}
	p := selfIdentity()
	p.pid, p.start = uint64(cmd.Process.Pid), 0
	if !processGone(p) {
		t.Fatalf("pid %d of an exited child is not seen as gone", p.pid)
	}
	return p
}

// syncLog is a logger whose output the test reads.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLayoutIsAlignedAndDisjoint(t *testing.T) {
	for _, P := range []int{1, 2, 3, 8, 64} {
		for _, slot := range []int{minSlotBytes, DefaultSlotBytes} {
			l := newLayout(P, max(slot, 256*P), DefaultStepBytes, DefaultEagerBytes)
			if l.ringBytes%pageBytes != 0 || l.ringBytes < pageBytes || l.ringBytes > l.slotBytes/4 && l.ringBytes != pageBytes {
				t.Errorf("P=%d slot=%d: ring of %d bytes", P, slot, l.ringBytes)
			}
			if l.ctlOff%pageBytes != 0 || l.slotsOff%pageBytes != 0 || l.ringsOff%pageBytes != 0 || l.slotBytes%(2*lineBytes) != 0 {
				t.Errorf("P=%d slot=%d: unaligned layout %+v", P, slot, l)
			}
			if l.ctl(P-1)+l.ctlBytes > l.ringCtlOff || l.ringCtl(P-1, P-1)+2*lineBytes > l.slotsOff ||
				l.slot(P-1)+l.slotBytes > l.ringsOff || l.ring(P-1, P-1)+l.ringBytes > l.end {
				t.Errorf("P=%d slot=%d: overlapping areas %+v", P, slot, l)
			}
			if l.meta(0, 1)+l.metaBytes > l.ctl(0)+l.ctlBytes || mCounts+16*P > l.metaBytes {
				t.Errorf("P=%d: meta parts do not fit the control block", P)
			}
		}
	}
}

func TestSegmentsAreUnlinkedOnceEveryRankAttached(t *testing.T) {
	ns := testNamespace()
	cs, err := NewLocal(context.Background(), ns, 3, Config{SlotBytes: minSlotBytes})
	if err != nil {
		t.Fatal(err)
	}
	noSegments(t, ns) // before Close: a crash from now on leaks nothing
	if err := CloseAll(cs); err != nil {
		t.Fatal(err)
	}
	if err := CloseAll(cs); err != nil { // idempotent
		t.Fatal(err)
	}
	noSegments(t, ns)
}

func TestSegmentsMatchesTheNamespacePrefix(t *testing.T) {
	ns := testNamespace()
	for _, name := range []string{"world", "0123456789abcdef"} {
		f, err := os.Create(segmentPath(ns, name))
		if err != nil {
			t.Skip(err)
		}
		f.Close()
		defer os.Remove(segmentPath(ns, name))
	}
	got, err := Segments(ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != segmentPath(ns, "0123456789abcdef") || got[1] != segmentPath(ns, "world") {
		t.Errorf("Segments(%q) = %v", ns, got)
	}
	if other, _ := Segments(ns + "x"); len(other) != 0 {
		t.Errorf("Segments of another namespace lists %v", other)
	}
}

// A file left by a job whose processes are gone is removed (and logged) by
// the next rank 0; the job then works.
func TestStaleSegmentIsReplaced(t *testing.T) {
	ns := testNamespace()
	path := segmentPath(ns, "world")
	gone := deadPid(t)
	stale, err := createSegment(path, 2, minSlotBytes, DefaultStepBytes, 0, gone, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.register(1, gone); err != nil {
		t.Fatal(err)
	}
	stale.unmap() // the job "dies": the file stays
	// A temporary file of a creator that died before linking, too.
	tmp := path + ".tmp-" + strconv.FormatUint(gone.pid, 10) + "-1"
	if err := os.WriteFile(tmp, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	var log syncLog
	cs := localWorldIn(t, ns, 2, Config{SlotBytes: minSlotBytes, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	allReduceWorks(t, cs)
	if !strings.Contains(log.String(), "stale segment") || !strings.Contains(log.String(), strconv.FormatUint(gone.pid, 10)) {
		t.Errorf("the removal of the stale segment is not logged with its pid:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "temporary segment file") {
		t.Errorf("the removal of the stale temporary file is not logged:\n%s", log.String())
	}
}

// A file whose creator is alive is another job's: rank 0 refuses to touch
// it and names the pid.
func TestLiveSegmentIsAnError(t *testing.T) {
	ns := testNamespace()
	path := segmentPath(ns, "world")
	live, err := createSegment(path, 2, minSlotBytes, DefaultStepBytes, 0, selfIdentity(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		live.unlink()
		live.unmap()
		noSegments(t, ns)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = New(ctx, Config{Namespace: ns, Rank: 0, Size: 2})
	if err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), "namespace") {
		t.Errorf("New over a live segment: %v; want an error naming pid %d and the namespace", err, os.Getpid())
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the live segment was removed: %v", err)
	}
}

// The other ranks check the segment rank 0 made against their own Config,
// and a rank can be attached only once.
func TestAttachChecksSizeAndRank(t *testing.T) {
	ns := testNamespace()
	path := segmentPath(ns, "world")
	seg, err := createSegment(path, 3, minSlotBytes, DefaultStepBytes, 0, selfIdentity(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		seg.unlink()
		seg.unmap()
		noSegments(t, ns)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := New(ctx, Config{Namespace: ns, Rank: 1, Size: 2}); err == nil || !strings.Contains(err.Error(), "Size") {
		t.Errorf("a rank with Size 2 opened a segment of 3 ranks: %v", err)
	}
	if err := seg.register(2, selfIdentity()); err != nil {
		t.Fatal(err)
	}
	if err := seg.register(2, selfIdentity()); err == nil || !strings.Contains(err.Error(), "already attached") {
		t.Errorf("a second registration of rank 2: %v", err)
	}
}

// A rank that never comes: New gives up after ConnectTimeout, and rank 0
// removes the file it made.
func TestNewGivesUpAndRemovesItsFile(t *testing.T) {
	ns := testNamespace()
	start := time.Now()
	_, err := New(context.Background(), Config{Namespace: ns, Rank: 0, Size: 3, ConnectTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "ranks [1 2] did not attach") {
		t.Errorf("New without the other ranks: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("New took %v to give up", d)
	}
	noSegments(t, ns)
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Namespace: "a.b_c-1", Size: 2, Rank: 1, SlotBytes: 10000}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.SlotBytes != 9984 || c.Timeout != DefaultTimeout || c.FailureTimeout != DefaultFailureTimeout ||
		c.ConnectTimeout != DefaultConnectTimeout || c.Logger == nil {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range []Config{
		{Namespace: "a/b", Size: 1},
		{Namespace: "a", Size: 1, Timeout: -1},
		{Namespace: "a", Size: 1, FailureTimeout: -1},
		{Namespace: "a", Size: 1, ConnectTimeout: -1},
		{Namespace: "a", Size: maxSize + 1},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
