package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/topology"
)

// The test binary doubles as the program `hiercomm run` starts: with
// envRole set it plays one process of the job instead of running tests.
const envRole = "HIERCOMM_CMD_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "":
		os.Exit(m.Run())
	case "exit3-on-rank1":
		if os.Getenv("RANK") == "1" {
			fmt.Println("rank 1 fails")
			os.Exit(3)
		}
		time.Sleep(time.Minute) // the launcher must stop this one
		os.Exit(0)
	case "env":
		// Layout 1,2: node 0 has rank 0, node 1 has ranks 1 and 2.
		rank, _ := strconv.Atoi(os.Getenv("RANK"))
		node, local := 0, 0
		if rank > 0 {
			node, local = 1, rank-1
		}
		want := fmt.Sprintf("RANK=%d WORLD_SIZE=3 LOCAL_RANK=%d GROUP_RANK=%d addr=127.0.0.%d sockets=1", rank, local, node, node+1)
		got := fmt.Sprintf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s GROUP_RANK=%s addr=%s sockets=%s", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"),
			os.Getenv("LOCAL_RANK"), os.Getenv("GROUP_RANK"), os.Getenv("HIERCOMM_ADDR"), os.Getenv("HIERCOMM_LAUNCHER_SOCKETS"))
		if got != want {
			fmt.Printf("environment %q, want %q\n", got, want)
			os.Exit(1)
		}
		for fd := 3; fd <= 5; fd++ {
			if f := os.NewFile(uintptr(fd), "socket"); f == nil {
				fmt.Printf("fd %d is not open\n", fd)
				os.Exit(1)
			} else if _, err := f.Stat(); err != nil {
				fmt.Printf("fd %d: %v\n", fd, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	}
	os.Exit(1)
}

func TestRunExitsWithTheFailingProcessCodeAndStopsTheOthers(t *testing.T) {
	t.Setenv(envRole, "exit3-on-rank1")
	start := time.Now()
	code := run([]string{"--nodes", "2", "--ranks-per-node", "2", "--", os.Args[0], "-test.run=^$"})
	if code != 3 {
		t.Errorf("hiercomm run exited %d, want 3 (rank 1's code)", code)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %v: the other processes were not stopped", took)
	}
}

func TestRunSucceedsAndSetsTheEnvironment(t *testing.T) {
	t.Setenv(envRole, "env")
	if code := run([]string{"--nodes", "2", "--ranks-per-node", "1,2", "--", os.Args[0], "-test.run=^$"}); code != 0 {
		t.Fatalf("hiercomm run exited %d, want 0", code)
	}
	// A list of counts needs no --nodes.
	if code := run([]string{"--ranks-per-node", "1,2", "--", os.Args[0], "-test.run=^$"}); code != 0 {
		t.Fatalf("hiercomm run --ranks-per-node 1,2 exited %d, want 0", code)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--nodes", "2", "--ranks-per-node", "1,2,3", "--", "true"},
		{"--nodes", "2", "--ranks-per-node", "0", "--", "true"},
		{"--nodes", "2"},
		{"--env", "mpi", "--", "true"},
	} {
		if code := run(args); code == 0 {
			t.Errorf("hiercomm run %v exited 0, want an error", args)
		}
	}
}

func TestTopologyPrintsADumpAndRejectsABadOne(t *testing.T) {
	topo, err := topology.New([]topology.Member{
		{Rank: 0, Host: "a", Local: 0, Device: -1}, {Rank: 1, Host: "a", Local: 1, Device: -1},
		{Rank: 2, Host: "b", Local: 0, Device: -1}, {Rank: 3, Host: "b", Local: 1, Device: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := topo.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"version":1,"members":[{"rank":0,"host":"a","local":1,"device":-1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := showTopology([]string{good}); code != 0 {
		t.Errorf("hiercomm topology on a good dump exited %d", code)
	}
	if code := showTopology([]string{bad}); code != 1 {
		t.Errorf("hiercomm topology on a dump with a missing local index exited %d, want 1", code)
	}
	if code := showTopology(nil); code != 2 {
		t.Errorf("hiercomm topology without a file exited %d, want 2", code)
	}
}
