package procgroup

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestFirstFailureStopsTheRestAndKeepsItsCode(t *testing.T) {
	var out syncBuf
	g, err := Start(context.Background(), Spec{
		Procs: []Proc{
			{Path: "/bin/sh", Args: []string{"-c", "echo one; echo two; exit 3"}, Prefix: "[a] "},
			{Path: "/bin/sh", Args: []string{"-c", "sleep 60"}, Prefix: "[b] "},
		},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = g.Wait()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Index != 0 || ee.ExitCode() != 3 {
		t.Fatalf("Wait = %v, want process 0's exit status 3", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the sleeping process was not stopped (%v)", took)
	}
	errs := g.Errors()
	var killed *ExitError
	if !errors.As(errs[1], &killed) || killed.ExitCode() != 128+9 {
		t.Errorf("process 1: %v, want killed by SIGKILL (137)", errs[1])
	}
	if got := out.String(); got != "[a] one\n[a] two\n" {
		t.Errorf("output %q, want each line prefixed", got)
	}
}

func TestKeepOthersLetsThemFinish(t *testing.T) {
	g, err := Start(context.Background(), Spec{
		Procs: []Proc{
			{Path: "/bin/sh", Args: []string{"-c", "exit 1"}},
			{Path: "/bin/sh", Args: []string{"-c", "sleep 0.2"}},
		},
		KeepOthers: true, Stdout: &syncBuf{}, Stderr: &syncBuf{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs := g.Errors(); errs[0] == nil || errs[1] != nil {
		t.Errorf("Errors = %v, want only process 0 failed", errs)
	}
}

func TestStartFailureNamesTheProgram(t *testing.T) {
	_, err := Start(context.Background(), Spec{Procs: []Proc{{Path: "/nonexistent/prog", Prefix: "[x] "}}})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/prog") {
		t.Errorf("got %v, want an error naming the program", err)
	}
	if _, err := Start(context.Background(), Spec{}); err == nil {
		t.Error("an empty group started")
	}
}
