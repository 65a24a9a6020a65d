package netmesh

import (
	"testing"
	"time"
)

// The stall watch is handed the time: a gap between notes longer than
// half the failure timeout is a stall, which explains failures found
// while it is being recovered from and for a failure timeout after it.
func TestStallWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := &stallWatch{every: 100 * time.Millisecond, limit: 5 * time.Second, keep: 10 * time.Second, last: t0}
	for i := 1; i <= 20; i++ {
		s.note(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	if gap, ok := s.stalled(t0.Add(2050 * time.Millisecond)); ok {
		t.Fatalf("a process that ran every 100ms: stalled %v", gap)
	}
	resume := t0.Add(14 * time.Second) // stopped from 2s to 14s
	if gap, ok := s.stalled(resume); !ok || gap != 12*time.Second {
		t.Fatalf("on resuming, before the next note: stalled = %v, %v; want 12s", gap, ok)
	}
	s.note(resume)
	for i := 1; i <= 50; i++ {
		s.note(resume.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	if gap, ok := s.stalled(resume.Add(5 * time.Second)); !ok || gap != 12*time.Second {
		t.Fatalf("5s after the stall: stalled = %v, %v; want 12s", gap, ok)
	}
	for i := 51; i <= 110; i++ {
		s.note(resume.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	if gap, ok := s.stalled(resume.Add(11 * time.Second)); ok {
		t.Fatalf("11s after the stall (keep 10s): stalled %v", gap)
	}
}

// A stall of the failure timeout or more (the peers gave the rank up)
// explains failures for twice the failure timeout and a second after the
// wake; a shorter one (a hiccup past half of it) only for the failure
// timeout.
func TestStallWatchLongStall(t *testing.T) {
	const ft = 4 * time.Second
	for _, tc := range []struct {
		stall, after time.Duration
		want         bool
	}{
		{5 * time.Second, 3 * time.Second, true},
		{5 * time.Second, 6 * time.Second, true},
		{5 * time.Second, 9500 * time.Millisecond, false},
		{3 * time.Second, 3 * time.Second, true},
		{3 * time.Second, 5 * time.Second, false},
	} {
		t0 := time.Unix(1000, 0)
		s := &stallWatch{every: 100 * time.Millisecond, limit: ft / 2, keep: ft, past: ft, wake: 2*ft + time.Second, last: t0}
		resume := t0.Add(tc.stall)
		for d := time.Duration(0); d <= tc.after; d += 100 * time.Millisecond {
			s.note(resume.Add(d))
		}
		if _, got := s.stalled(resume.Add(tc.after)); got != tc.want {
			t.Errorf("a stall of %v, asked %v after the wake: stalled = %v, want %v", tc.stall, tc.after, got, tc.want)
		}
	}
}
