package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/nexar"
)

// The test binary is started again as each rank of a local job.
func TestMain(m *testing.M) {
	if nexar.IsLocalChild() {
		if err := train(120); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestTrainsOnThreeProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	job, err := nexar.StartLocal(ctx, nexar.LocalSpec{Ranks: 3, Args: []string{"-test.run=^$"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
}
