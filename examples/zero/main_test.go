package main

import (
	"testing"

	"github.com/hiercomm/hiercomm/examples/internal/launch"
)

// The test binary is started again as each rank of a local job.
func TestMain(m *testing.M) { launch.TestMain(m, func() error { return train(120) }) }

func TestTrainsOnThreeProcesses(t *testing.T) { launch.TestRanks(t, 3) }
