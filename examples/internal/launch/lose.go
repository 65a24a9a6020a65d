package launch

import (
	"context"
	"os"
	"os/exec"
	"strings"
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
	checkLost(t, startLosing(t, ctx, layout, args, &out), lost)
	if t.Failed() {
		t.Fatal(out.String())
	}
	t.Log(out.String())
	return out.String()
}

// RunReplacing is RunLosing for an elastic trainer that also grows back:
// once the survivors of rank lost's death have printed after (a line
// that says they shrank), it starts a replacement on lost's node, with
// HIERCOMM_JOIN=running and the same args (cluster.LocalJob.JoinerEnv),
// and waits for it too. The replacement's lines are prefixed
// "[newcomer] "; t fails unless it exited 0 as well.
func RunReplacing(t *testing.T, layout []int, args string, lost int, after string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out procgroup.Buffer
	job := startLosing(t, ctx, layout, args, &out)
	for !strings.Contains(out.String(), after) {
		select {
		case <-ctx.Done():
			t.Fatalf("the survivors never said %q\n%s", after, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	node, first := 0, 0
	for node < len(layout) && first+layout[node] <= lost {
		first += layout[node]
		node++
	}
	env, err := job.JoinerEnv(node)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(env, envArgs+"="+args, envNewcomer+"=1")
	lines := &prefixWriter{prefix: "[newcomer] ", w: &out}
	cmd.Stdout, cmd.Stderr = lines, lines
	newcomerErr := cmd.Run()
	lines.flush()
	checkLost(t, job, lost)
	if newcomerErr != nil {
		t.Errorf("the replacement: %v", newcomerErr)
	}
	if t.Failed() {
		t.Fatal(out.String())
	}
	t.Log(out.String())
	return out.String()
}

// prefixWriter writes whole lines to w, each with prefix.
type prefixWriter struct {
	prefix string
	w      *procgroup.Buffer
	part   string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	s := p.part + string(b)
	i := strings.LastIndexByte(s, '\n')
	p.part = s[i+1:]
	if i >= 0 {
		p.emit(s[:i])
	}
	return len(b), nil
}

func (p *prefixWriter) emit(s string) {
	var out strings.Builder
	for l := range strings.SplitSeq(s, "\n") {
		out.WriteString(p.prefix + l + "\n")
	}
	p.w.Write([]byte(out.String()))
}

// flush writes a last line without its newline.
func (p *prefixWriter) flush() {
	if p.part != "" {
		p.emit(p.part)
		p.part = ""
	}
}

// startLosing starts the job of RunLosing, writing to out.
func startLosing(t *testing.T, ctx context.Context, layout []int, args string, out *procgroup.Buffer) *cluster.LocalJob {
	t.Helper()
	spec := localSpec(layout, args, out)
	spec.KeepOthers = true
	job, err := cluster.StartLocal(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// checkLost waits for job and fails t unless rank lost failed and every
// other rank exited 0.
func checkLost(t *testing.T, job *cluster.LocalJob, lost int) {
	t.Helper()
	for r, err := range job.Errors() {
		switch {
		case r == lost && err == nil:
			t.Errorf("rank %d exited 0, want it lost", r)
		case r != lost && err != nil:
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
