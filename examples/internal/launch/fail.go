package launch

import (
	"strings"
	"testing"
)

// RunFailing is Run for a job that must fail (a check's test, with a bug
// planted in the ranks): it returns the job's output once every rank has
// exited, and fails t if none of them failed.
func RunFailing(t *testing.T, layout []int, args string) string {
	t.Helper()
	out, err := runJob(t, layout, args)
	if err == nil {
		t.Fatalf("the job of %v with %q succeeded; it should have failed", layout, args)
	}
	return out
}

// TestMainPlanting is TestMain for an example whose tests plant bugs in
// its ranks to see its checks catch them: a rank's argument -fault=NAME
// is taken out of its arguments and NAME handed to plant before run.
func TestMainPlanting(m *testing.M, plant func(name string) error, run func(args []string) error) {
	TestMain(m, func(args []string) error {
		var rest []string
		for _, a := range args {
			if name, ok := strings.CutPrefix(a, "-fault="); ok {
				if err := plant(name); err != nil {
					return err
				}
				continue
			}
			rest = append(rest, a)
		}
		return run(rest)
	})
}
