package launch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
)

// RunFailing is Run for a job that must fail (a check's test, with a bug
// planted in the ranks): it returns the job's output once every rank has
// exited, and fails t if none of them failed.
func RunFailing(t *testing.T, layout []int, args string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder // the launcher writes one line at a time
	job, err := cluster.StartLocal(ctx, localSpec(layout, args, &out))
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Wait(); err == nil {
		t.Fatalf("the job of %v with %q succeeded; it should have failed:\n%s", layout, args, out.String())
	}
	t.Log(out.String())
	return out.String()
}

// Fault takes a test's -fault=NAME out of a rank's arguments: the name
// of the bug the test plants in the rank ("" for none) and the rest.
func Fault(args []string) (name string, rest []string) {
	for _, a := range args {
		if f, ok := strings.CutPrefix(a, "-fault="); ok {
			name = f
			continue
		}
		rest = append(rest, a)
	}
	return name, rest
}
