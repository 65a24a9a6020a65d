// Package launch is how the example trainers' tests run them: the test
// binary starts copies of itself as the ranks of a local job of emulated
// nodes (cluster.StartLocal, what `hiercomm run` does), each copy runs the
// example's own entry point with the arguments the test chose, and the
// test reads their output. It imports cluster and internal/procgroup.
package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
)

// envArgs carries the example's arguments from the test to its ranks.
const envArgs = "HIERCOMM_EXAMPLE_ARGS"

// envNewcomer marks a process that RunReplacing starts to join the
// running job (it binds its own sockets: it is no local child).
const envNewcomer = "HIERCOMM_EXAMPLE_NEWCOMER"

// TestMain makes a test binary serve as the ranks that Run starts: in a
// rank, it calls run with the arguments the test passed and exits (1 on
// an error, printed); otherwise it runs the tests.
func TestMain(m *testing.M, run func(args []string) error) {
	if cluster.IsLocalChild() || os.Getenv(envNewcomer) == "1" {
		if err := run(strings.Fields(os.Getenv(envArgs))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Run starts the test binary as a local job, layout[n] ranks on emulated
// node n, each running the example with args (whitespace-separated
// flags), and returns the job's output (each line prefixed with its rank)
// once every rank has exited (and logs it); it fails t if one of them
// failed.
func Run(t *testing.T, layout []int, args string) string {
	t.Helper()
	out, err := runJob(t, layout, args)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// runJob runs the job of Run and returns its output (logged) and how it
// ended; it fails t if the job cannot start.
func runJob(t *testing.T, layout []int, args string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder // the launcher writes one line at a time
	job, err := cluster.StartLocal(ctx, localSpec(layout, args, &out))
	if err != nil {
		t.Fatal(err)
	}
	err = job.Wait()
	t.Log(out.String())
	return out.String(), err
}

// localSpec is the local job of layout whose ranks run the example with
// args and write to out.
func localSpec(layout []int, args string, out io.Writer) cluster.LocalSpec {
	return cluster.LocalSpec{
		RanksPerNode: layout,
		Path:         os.Args[0],
		Args:         []string{"-test.run=^$"},
		Env:          []string{envArgs + "=" + args},
		Stdout:       out,
		Stderr:       out,
	}
}

// Expect fails t unless out has each of lines (substrings of its lines).
func Expect(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("the output lacks %q:\n%s", l, out)
		}
	}
}
