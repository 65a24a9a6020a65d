package launch

import (
	"context"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// RunLosing is Run for a job that loses rank lost on purpose (an elastic
// trainer's fault test): the other ranks run on when it dies
// (cluster.LocalSpec.KeepOthers), and t fails unless lost failed and
// every other rank exited 0.
func RunLosing(t *testing.T, layout []int, args string, lost int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out procgroup.Buffer
	spec := localSpec(layout, args, &out)
	spec.KeepOthers = true
	job, err := cluster.StartLocal(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for r, err := range job.Errors() {
		switch {
		case r == lost && err == nil:
			t.Errorf("rank %d exited 0, want it lost", r)
		case r != lost && err != nil:
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.Fatal(out.String())
	}
	t.Log(out.String())
	return out.String()
}
