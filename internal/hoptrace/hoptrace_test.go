package hoptrace

import "testing"

// TestMarksOnlyWhileTracing: marks before Start and after its stop are not
// recorded; those between are, in order, with their fields.
func TestMarksOnlyWhileTracing(t *testing.T) {
	Mark(Call, 1, -1, 0, 0)
	if On() {
		t.Fatal("On before Start")
	}
	stop := Start(4)
	if !On() {
		t.Fatal("not On after Start")
	}
	Mark(Write, 0, 1, 7, 2)
	Mark(Read, 1, 0, 7, 2)
	ev := stop()
	Mark(Return, 1, -1, 0, 0)
	if On() {
		t.Fatal("On after stop")
	}
	if len(ev) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(ev), ev)
	}
	w, r := ev[0], ev[1]
	if w.Hop != Write || w.Rank != 0 || w.Peer != 1 || w.Seq != 7 || w.Step != 2 || r.Hop != Read || r.Rank != 1 || r.At < w.At {
		t.Errorf("events %+v", ev)
	}
}
