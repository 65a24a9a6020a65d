package nexar

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
