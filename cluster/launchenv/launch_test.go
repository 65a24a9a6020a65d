package launchenv

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// sysOf is a Sys whose host name is name (or whose lookup fails with err)
// and that reads files from disk (the tests' key files).
func sysOf(name string, err error) Sys {
	return Sys{Hostname: func() (string, error) { return name, err }, ReadFile: os.ReadFile}
}

// getenvOf serves env; every name asked for is recorded in asked, if not nil.
func getenvOf(env map[string]string, asked map[string]bool) func(string) string {
	return func(name string) string {
		if asked != nil {
			asked[name] = true
		}
		return env[name]
	}
}

// writeKeyFile writes content to a fresh file and returns its path.
func writeKeyFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const testKey = "0123456789abcdef0123456789abcdef"

// launchCase is one environment and the Launch LoadLaunch must make of it.
type launchCase struct {
	name string
	env  map[string]string
	want Launch
}

func launchCases(t *testing.T) []launchCase {
	keyFile := writeKeyFile(t, testKey+"\n")
	keyFileTwoNL := writeKeyFile(t, testKey+"\n\n")
	keyFileCRLF := writeKeyFile(t, testKey+"\r\n")
	torch := func(extra map[string]string) map[string]string {
		m := map[string]string{
			"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
			"GROUP_RANK": "0", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
		}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	slurm := func(extra map[string]string) map[string]string {
		m := map[string]string{
			"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
			"SLURM_STEP_NODELIST": "gpu[01-04,07],cpu3", "SLURMD_NODENAME": "gpu02", "SLURM_JOB_ID": "4242",
		}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	k8s := func(extra map[string]string) map[string]string {
		m := map[string]string{"HIERCOMM_K8S_SERVICE": "trainer.default.svc.cluster.local", "WORLD_SIZE": "4", "JOB_COMPLETION_INDEX": "2"}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	return []launchCase{
		// torchrun
		{"torchrun", torch(nil), Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1,
			Seeds: []string{"10.0.0.1:29400"}}},
		{"torchrun rank 0 binds the seed port", torch(map[string]string{"RANK": "0", "LOCAL_RANK": "0"}),
			Launch{Style: "torchrun", Rank: 0, WorldSize: 8, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29400"}, GossipPort: 29400}},
		{"torchrun agent store: MASTER_PORT+1", torch(map[string]string{"RANK": "0", "LOCAL_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}),
			Launch{Style: "torchrun", Rank: 0, WorldSize: 8, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29401"}, GossipPort: 29401}},
		{"torchrun agent store on a non-zero rank", torch(map[string]string{"TORCHELASTIC_USE_AGENT_STORE": "True"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29401"}}},
		{"torchrun agent store off", torch(map[string]string{"RANK": "0", "LOCAL_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "False"}),
			Launch{Style: "torchrun", Rank: 0, WorldSize: 8, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29400"}, GossipPort: 29400}},
		{"torchrun HIERCOMM_PORT beats the agent-store rule", torch(map[string]string{"RANK": "0", "LOCAL_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True", "HIERCOMM_PORT": "31000"}),
			Launch{Style: "torchrun", Rank: 0, WorldSize: 8, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:31000"}, GossipPort: 31000}},
		{"torchrun without MASTER_PORT: 29500", torch(map[string]string{"MASTER_PORT": ""}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29500"}}},
		{"torchrun without GROUP_RANK: host name", torch(map[string]string{"GROUP_RANK": ""}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "testhost", Device: -1, Seeds: []string{"10.0.0.1:29400"}}},
		{"torchrun GROUP_RANK 2", torch(map[string]string{"GROUP_RANK": "2"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-2", Device: -1, Seeds: []string{"10.0.0.1:29400"}}},
		{"torchrun without LOCAL_RANK (env:// by hand)", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "head", "MASTER_PORT": "1234"},
			Launch{Style: "torchrun", Rank: 1, WorldSize: 2, Host: "testhost", Device: -1, Seeds: []string{"head:1234"}}},
		{"torchrun IPv6 MASTER_ADDR", torch(map[string]string{"MASTER_ADDR": "fd00::1"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"[fd00::1]:29400"}}},
		{"torchrun world of 1 needs no MASTER_ADDR", map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			Launch{Style: "torchrun", Rank: 0, WorldSize: 1, Host: "testhost", Device: -1, GossipPort: 29500}},
		{"torchrun values are trimmed", torch(map[string]string{"RANK": " 3 ", "MASTER_ADDR": " 10.0.0.1\n"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29400"}}},
		{"torchrun under srun: RANK wins over SLURM_PROCID", torch(map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29400"}}},
		{"HIERCOMM_SEEDS overrides MASTER_ADDR", torch(map[string]string{"HIERCOMM_SEEDS": "a:1, b:2"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"a:1", "b:2"}}},
		{"HIERCOMM_SEEDS stands in for MASTER_ADDR", torch(map[string]string{"MASTER_ADDR": "", "HIERCOMM_SEEDS": "[fd00::2]:7000"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"[fd00::2]:7000"}}},

		// Slurm
		{"slurm", slurm(nil), Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "gpu02", Device: -1,
			Seeds: []string{"gpu01:29500"}, JobID: "slurm-4242"}},
		{"slurm first task of node 0 binds the seed port", slurm(map[string]string{"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURMD_NODENAME": "gpu01"}),
			Launch{Style: "slurm", Rank: 0, WorldSize: 8, Host: "gpu01", Device: -1, Seeds: []string{"gpu01:29500"}, GossipPort: 29500, JobID: "slurm-4242"}},
		{"slurm second task of node 0 does not", slurm(map[string]string{"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURMD_NODENAME": "gpu01"}),
			Launch{Style: "slurm", Rank: 1, WorldSize: 8, LocalRank: 1, Host: "gpu01", Device: -1, Seeds: []string{"gpu01:29500"}, JobID: "slurm-4242"}},
		{"slurm HIERCOMM_PORT", slurm(map[string]string{"HIERCOMM_PORT": "30000"}),
			Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "gpu02", Device: -1, Seeds: []string{"gpu01:30000"}, JobID: "slurm-4242"}},
		{"slurm job node list when no step list", slurm(map[string]string{"SLURM_STEP_NODELIST": "", "SLURM_JOB_NODELIST": "cpu[7-9]", "SLURM_NODELIST": "zzz"}),
			Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "gpu02", Device: -1, Seeds: []string{"cpu7:29500"}, JobID: "slurm-4242"}},
		{"slurm SLURM_NODELIST last", slurm(map[string]string{"SLURM_STEP_NODELIST": "", "SLURM_NODELIST": "n[010-012]"}),
			Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "gpu02", Device: -1, Seeds: []string{"n010:29500"}, JobID: "slurm-4242"}},
		{"slurm step list beats job list", slurm(map[string]string{"SLURM_JOB_NODELIST": "other[1-9]"}),
			Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "gpu02", Device: -1, Seeds: []string{"gpu01:29500"}, JobID: "slurm-4242"}},
		{"slurm without SLURMD_NODENAME", slurm(map[string]string{"SLURMD_NODENAME": ""}),
			Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "slurm-node-1", Device: -1, Seeds: []string{"gpu01:29500"}, JobID: "slurm-4242"}},
		{"slurm job id sanitized", slurm(map[string]string{"SLURM_JOB_ID": "4242+1 x"}),
			Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "gpu02", Device: -1, Seeds: []string{"gpu01:29500"}, JobID: "slurm-4242-1-x"}},
		{"slurm HIERCOMM_JOB_ID and HIERCOMM_HOST_ID win", slurm(map[string]string{"HIERCOMM_JOB_ID": "mine", "HIERCOMM_HOST_ID": "box"}),
			Launch{Style: "slurm", Rank: 5, WorldSize: 8, LocalRank: 1, Host: "box", Device: -1, Seeds: []string{"gpu01:29500"}, JobID: "mine"}},
		{"slurm single task needs no node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"},
			Launch{Style: "slurm", WorldSize: 1, Host: "slurm-node-0", Device: -1, GossipPort: 29500}},

		// Kubernetes
		{"kubernetes indexed job", k8s(nil), Launch{Style: "kubernetes", Rank: 2, WorldSize: 4, Host: "testhost", Device: -1,
			Seeds: []string{"trainer.default.svc.cluster.local:29500"}, GossipPort: 29500}},
		{"kubernetes RANK beats the index", k8s(map[string]string{"RANK": "3"}), Launch{Style: "kubernetes", Rank: 3, WorldSize: 4, Host: "testhost", Device: -1,
			Seeds: []string{"trainer.default.svc.cluster.local:29500"}, GossipPort: 29500}},
		{"kubernetes without index: membership assigns", k8s(map[string]string{"JOB_COMPLETION_INDEX": ""}), Launch{Style: "kubernetes", Rank: -1, WorldSize: 4, Host: "testhost", Device: -1,
			Seeds: []string{"trainer.default.svc.cluster.local:29500"}, GossipPort: 29500}},
		{"kubernetes LOCAL_WORLD_SIZE=1 keeps the index", k8s(map[string]string{"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}), Launch{Style: "kubernetes", Rank: 2, WorldSize: 4, Host: "testhost", Device: -1,
			Seeds: []string{"trainer.default.svc.cluster.local:29500"}, GossipPort: 29500}},
		{"kubernetes two per pod, local 1", k8s(map[string]string{"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}), Launch{Style: "kubernetes", Rank: -1, WorldSize: 4, LocalRank: 1, Host: "testhost", Device: -1,
			Seeds: []string{"trainer.default.svc.cluster.local:29500"}}},
		{"kubernetes two per pod, local 0", k8s(map[string]string{"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}), Launch{Style: "kubernetes", Rank: -1, WorldSize: 4, Host: "testhost", Device: -1,
			Seeds: []string{"trainer.default.svc.cluster.local:29500"}, GossipPort: 29500}},
		{"kubernetes LOCAL_RANK without LOCAL_WORLD_SIZE: membership assigns", k8s(map[string]string{"LOCAL_RANK": "0"}), Launch{Style: "kubernetes", Rank: -1, WorldSize: 4, Host: "testhost", Device: -1,
			Seeds: []string{"trainer.default.svc.cluster.local:29500"}, GossipPort: 29500}},
		{"kubernetes beats torchrun and slurm", k8s(map[string]string{"HIERCOMM_PORT": "4000", "RANK": "1", "MASTER_ADDR": "x", "MASTER_PORT": "9", "SLURM_PROCID": "0"}),
			Launch{Style: "kubernetes", Rank: 1, WorldSize: 4, Host: "testhost", Device: -1, Seeds: []string{"trainer.default.svc.cluster.local:4000"}, GossipPort: 4000}},

		// The local launcher (`hiercomm run`): a launcher's variables plus its own.
		{"local torchrun", torch(map[string]string{"HIERCOMM_HOST_ID": "node-a", "HIERCOMM_ADDR": "127.0.0.2", "HIERCOMM_LAUNCHER_SOCKETS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "41000"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-a", Device: -1, Seeds: []string{"127.0.0.1:41000"}, Addr: "127.0.0.2", Inherited: true}},
		{"local slurm", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_JOB_ID": "777",
			"SLURM_STEP_NODELIST": "127.0.0.[1-2]", "SLURMD_NODENAME": "127.0.0.2", "HIERCOMM_PORT": "40000", "HIERCOMM_ADDR": "127.0.0.2", "HIERCOMM_LAUNCHER_SOCKETS": "1"},
			Launch{Style: "slurm", Rank: 2, WorldSize: 4, Host: "127.0.0.2", Device: -1, Seeds: []string{"127.0.0.1:40000"}, Addr: "127.0.0.2", JobID: "slurm-777", Inherited: true}},
		{"HIERCOMM_LAUNCHER_SOCKETS=0", torch(map[string]string{"HIERCOMM_LAUNCHER_SOCKETS": "0"}),
			Launch{Style: "torchrun", Rank: 3, WorldSize: 8, LocalRank: 1, Host: "node-0", Device: -1, Seeds: []string{"10.0.0.1:29400"}}},

		// Nothing found.
		{"single", map[string]string{}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1}},
		{"single ignores a lone LOCAL_RANK", map[string]string{"LOCAL_RANK": "3", "MASTER_ADDR": "x"}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1}},
		{"single with every own variable", map[string]string{
			"HIERCOMM_JOB_ID": "run.7_a~b", "HIERCOMM_JOB_KEY": testKey, "HIERCOMM_NETWORK": "tcp", "HIERCOMM_SOCKET_IFNAME": "^=docker0",
			"HIERCOMM_ADDR": "fd00::3", "HIERCOMM_HOST_ID": "h1", "HIERCOMM_DEVICE": "2", "HIERCOMM_JOIN_TIMEOUT": "90s"},
			Launch{Style: "single", WorldSize: 1, Host: "h1", Device: 2, Addr: "fd00::3", IfSpec: "^=docker0", ifVar: "HIERCOMM_SOCKET_IFNAME",
				JobID: "run.7_a~b", Key: []byte(testKey), Network: "tcp", JoinTimeout: 90 * time.Second}},
		{"HIERCOMM_DEVICE=-1", map[string]string{"HIERCOMM_DEVICE": "-1"}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1}},
		{"HIERCOMM_DEVICE=0", map[string]string{"HIERCOMM_DEVICE": "0"}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: 0}},
		{"HIERCOMM_CONNS_PER_PEER", map[string]string{"HIERCOMM_CONNS_PER_PEER": "4"}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, ConnsPerPeer: 4}},
		{"HIERCOMM_NODE_P2P", map[string]string{"HIERCOMM_NODE_P2P": "world"}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, NodeP2P: "world"}},
		{"HIERCOMM_NODE_P2P=intra", map[string]string{"HIERCOMM_NODE_P2P": "intra"}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, NodeP2P: "intra"}},
		{"HIERCOMM_NODE_P2P=auto", map[string]string{"HIERCOMM_NODE_P2P": "auto"}, Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, NodeP2P: "auto"}},
		{"GPU libraries", map[string]string{"HIERCOMM_NCCL_LIBRARY": "/opt/nccl/lib/libnccl.so.2", "HIERCOMM_CUDA_LIBRARY": " /usr/lib/libcuda.so.1 "},
			Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, NCCLLibrary: "/opt/nccl/lib/libnccl.so.2", CUDALibrary: "/usr/lib/libcuda.so.1"}},
		{"NCCL_SOCKET_IFNAME when ours is unset", map[string]string{"NCCL_SOCKET_IFNAME": "ib,eth"},
			Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, IfSpec: "ib,eth", ifVar: "NCCL_SOCKET_IFNAME"}},
		{"HIERCOMM_SOCKET_IFNAME beats NCCL_SOCKET_IFNAME", map[string]string{"NCCL_SOCKET_IFNAME": "ib", "HIERCOMM_SOCKET_IFNAME": "=eth0"},
			Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, IfSpec: "=eth0", ifVar: "HIERCOMM_SOCKET_IFNAME"}},
		{"key file, one newline trimmed", map[string]string{"HIERCOMM_JOB_KEY_FILE": keyFile},
			Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, Key: []byte(testKey)}},
		{"key file, only one newline trimmed", map[string]string{"HIERCOMM_JOB_KEY_FILE": keyFileTwoNL},
			Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, Key: []byte(testKey + "\n")}},
		{"key file, CRLF trimmed", map[string]string{"HIERCOMM_JOB_KEY_FILE": keyFileCRLF},
			Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, Key: []byte(testKey)}},
		{"key used byte for byte", map[string]string{"HIERCOMM_JOB_KEY": " " + testKey},
			Launch{Style: "single", WorldSize: 1, Host: "testhost", Device: -1, Key: []byte(" " + testKey)}},
	}
}

func TestLoadLaunchStyles(t *testing.T) {
	sys := sysOf("testhost", nil)
	for _, tc := range launchCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadLaunch(getenvOf(tc.env, nil), sys)
			if err != nil {
				t.Fatalf("LoadLaunch: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("LoadLaunch =\n%+v\nwant\n%+v", got, tc.want)
			}
			// What LoadLaunch accepts, Resolve accepts given a key.
			if got.Key == nil {
				got.Key = []byte(testKey)
			}
			if _, err := got.Resolve(sys.Hostname); err != nil {
				t.Errorf("Resolve: %v", err)
			}
		})
	}
}

// TestLoadLaunchReadsOnlyListed checks that LoadLaunch asks for no variable
// outside envVars, the list the documentation test holds to docs.
func TestLoadLaunchReadsOnlyListed(t *testing.T) {
	sys := sysOf("testhost", nil)
	asked := map[string]bool{}
	for _, tc := range launchCases(t) {
		if _, err := LoadLaunch(getenvOf(tc.env, asked), sys); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	for name := range asked {
		if !slices.Contains(envVars, name) {
			t.Errorf("LoadLaunch reads %s, which envVars (and so docs/environment.md) does not list", name)
		}
	}
}

// TestLaunchEnvironmentDoc checks that docs/environment.md has a table row for
// every variable LoadLaunch reads.
func TestLaunchEnvironmentDoc(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "environment.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range envVars {
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(name) + "`")
		if !row.Match(doc) {
			t.Errorf("docs/environment.md has no table row for %s", name)
		}
	}
}

func TestLoadLaunchErrors(t *testing.T) {
	sys := sysOf("testhost", nil)
	dir := t.TempDir()
	shortKeyFile := writeKeyFile(t, "short\n")
	emptyKeyFile := writeKeyFile(t, "\n")
	torch := map[string]string{"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "29400"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	slurm := map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "n[1-2]"}
	k8s := map[string]string{"HIERCOMM_K8S_SERVICE": "svc", "WORLD_SIZE": "4"}
	cases := []struct {
		name    string
		env     map[string]string
		wantVar string
		want    string // a substring of the message
	}{
		{"RANK out of range", with(torch, "RANK", "5"), "RANK", "RANK=5 is not in [0, WORLD_SIZE=4)"},
		{"RANK negative", with(torch, "RANK", "-1"), "RANK", "RANK=-1 is not in [0, WORLD_SIZE=4)"},
		{"RANK not a number", with(torch, "RANK", "one"), "RANK", "RANK=one is not an integer"},
		{"WORLD_SIZE zero", with(torch, "WORLD_SIZE", "0"), "WORLD_SIZE", "WORLD_SIZE=0 is not in"},
		{"WORLD_SIZE missing", with(torch, "WORLD_SIZE", ""), "WORLD_SIZE", "WORLD_SIZE is not set"},
		{"RANK missing", with(torch, "RANK", ""), "RANK", "RANK is not set"},
		{"LOCAL_RANK negative", with(torch, "LOCAL_RANK", "-1"), "LOCAL_RANK", "LOCAL_RANK=-1 is not in"},
		{"LOCAL_WORLD_SIZE too small", with(torch, "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "1"), "LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE=1 is not in [LOCAL_RANK+1=2"},
		{"LOCAL_WORLD_SIZE above WORLD_SIZE", with(torch, "LOCAL_WORLD_SIZE", "5"), "LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE=5 is not in"},
		{"GROUP_RANK not a number", with(torch, "GROUP_RANK", "abc"), "GROUP_RANK", "GROUP_RANK=abc is not an integer"},
		{"MASTER_PORT not a port", with(torch, "MASTER_PORT", "abc"), "MASTER_PORT", "MASTER_PORT=abc is not a port"},
		{"MASTER_PORT too large", with(torch, "MASTER_PORT", "70000"), "MASTER_PORT", "MASTER_PORT=70000 is not a port"},
		{"MASTER_PORT 65535 with the agent store", with(torch, "MASTER_PORT", "65535", "TORCHELASTIC_USE_AGENT_STORE", "True"), "MASTER_PORT", "MASTER_PORT=65535 leaves no port"},
		{"MASTER_ADDR missing", with(torch, "MASTER_ADDR", ""), "MASTER_ADDR", "MASTER_ADDR is not set"},
		{"MASTER_ADDR with a port", with(torch, "MASTER_ADDR", "h:29400"), "MASTER_ADDR", "MASTER_ADDR=h:29400 has a port"},
		{"MASTER_ADDR not a host", with(torch, "MASTER_ADDR", "bad/host"), "MASTER_ADDR", "MASTER_ADDR=bad/host is not an IP address or host name"},

		{"SLURM_NTASKS missing", with(slurm, "SLURM_NTASKS", ""), "SLURM_NTASKS", "SLURM_NTASKS is not set"},
		{"SLURM_LOCALID missing", with(slurm, "SLURM_LOCALID", ""), "SLURM_LOCALID", "SLURM_LOCALID is not set"},
		{"SLURM_NODEID missing", with(slurm, "SLURM_NODEID", ""), "SLURM_NODEID", "SLURM_NODEID is not set"},
		{"SLURM_PROCID out of range", with(slurm, "SLURM_PROCID", "4"), "SLURM_PROCID", "SLURM_PROCID=4 is not in [0, SLURM_NTASKS=4)"},
		{"SLURM_NTASKS not a number", with(slurm, "SLURM_NTASKS", "four"), "SLURM_NTASKS", "SLURM_NTASKS=four is not an integer"},
		{"SLURM_LOCALID negative", with(slurm, "SLURM_LOCALID", "-1"), "SLURM_LOCALID", "SLURM_LOCALID=-1 is not in"},
		{"SLURM_NODEID beyond the node list", with(slurm, "SLURM_NODEID", "2"), "SLURM_NODEID", "SLURM_NODEID=2 is not in [0, 2)"},
		{"node list malformed", with(slurm, "SLURM_STEP_NODELIST", "n[1-2"), "SLURM_STEP_NODELIST", "SLURM_STEP_NODELIST=n[1-2 is not a Slurm host list"},
		{"job node list malformed", with(slurm, "SLURM_STEP_NODELIST", "", "SLURM_JOB_NODELIST", "n[2-1]"), "SLURM_JOB_NODELIST", "SLURM_JOB_NODELIST=n[2-1] is not"},
		{"node list with a bad name", with(slurm, "SLURM_STEP_NODELIST", "a/b,c"), "SLURM_STEP_NODELIST", "is not a host name"},
		{"node list missing", with(slurm, "SLURM_STEP_NODELIST", ""), "SLURM_STEP_NODELIST", "SLURM_STEP_NODELIST is not set"},

		{"kubernetes WORLD_SIZE missing", with(k8s, "WORLD_SIZE", ""), "WORLD_SIZE", "WORLD_SIZE is not set"},
		{"kubernetes index out of range", with(k8s, "JOB_COMPLETION_INDEX", "4"), "JOB_COMPLETION_INDEX", "JOB_COMPLETION_INDEX=4 is not in [0, WORLD_SIZE=4)"},
		{"kubernetes RANK out of range", with(k8s, "RANK", "4"), "RANK", "RANK=4 is not in [0, WORLD_SIZE=4)"},
		{"kubernetes LOCAL_RANK bad", with(k8s, "LOCAL_RANK", "x"), "LOCAL_RANK", "LOCAL_RANK=x is not an integer"},
		{"kubernetes service with a port", with(k8s, "HIERCOMM_K8S_SERVICE", "svc:29500"), "HIERCOMM_K8S_SERVICE", "HIERCOMM_K8S_SERVICE=svc:29500 has a port"},

		{"HIERCOMM_PORT zero", with(torch, "HIERCOMM_PORT", "0"), "HIERCOMM_PORT", "HIERCOMM_PORT=0 is not a port"},
		{"HIERCOMM_INTRA unknown", with(torch, "HIERCOMM_INTRA", "gpu"), "HIERCOMM_INTRA", "HIERCOMM_INTRA=gpu: use auto"},
		{"HIERCOMM_NODE_P2P unknown", with(torch, "HIERCOMM_NODE_P2P", "shm"), "HIERCOMM_NODE_P2P", "HIERCOMM_NODE_P2P=shm: use auto"},
		{"HIERCOMM_PORT text", map[string]string{"HIERCOMM_PORT": "http"}, "HIERCOMM_PORT", "HIERCOMM_PORT=http is not a port"},
		{"HIERCOMM_JOB_ID bad characters", map[string]string{"HIERCOMM_JOB_ID": "my job"}, "HIERCOMM_JOB_ID", "HIERCOMM_JOB_ID=my job: use 1 to 128"},
		{"HIERCOMM_JOB_ID too long", map[string]string{"HIERCOMM_JOB_ID": strings.Repeat("a", 129)}, "HIERCOMM_JOB_ID", "HIERCOMM_JOB_ID=aaaa"},
		{"HIERCOMM_JOB_KEY short", map[string]string{"HIERCOMM_JOB_KEY": "secretkey"}, "HIERCOMM_JOB_KEY", "HIERCOMM_JOB_KEY has 9 bytes, need at least 16; make one with `export HIERCOMM_JOB_KEY=$(openssl rand -hex 32)`"},
		{"both key variables", map[string]string{"HIERCOMM_JOB_KEY": testKey, "HIERCOMM_JOB_KEY_FILE": shortKeyFile}, "HIERCOMM_JOB_KEY", "both HIERCOMM_JOB_KEY and HIERCOMM_JOB_KEY_FILE=" + shortKeyFile + " are set"},
		{"key file missing", map[string]string{"HIERCOMM_JOB_KEY_FILE": filepath.Join(dir, "nope")}, "HIERCOMM_JOB_KEY_FILE", "HIERCOMM_JOB_KEY_FILE=" + filepath.Join(dir, "nope") + " cannot be read: no such file"},
		{"key file short", map[string]string{"HIERCOMM_JOB_KEY_FILE": shortKeyFile}, "HIERCOMM_JOB_KEY_FILE", "HIERCOMM_JOB_KEY_FILE=" + shortKeyFile + " holds a key of 5 bytes, need at least 16"},
		{"key file empty", map[string]string{"HIERCOMM_JOB_KEY_FILE": emptyKeyFile}, "HIERCOMM_JOB_KEY_FILE", "holds a key of 0 bytes"},
		{"HIERCOMM_NETWORK", map[string]string{"HIERCOMM_NETWORK": "udp"}, "HIERCOMM_NETWORK", "HIERCOMM_NETWORK=udp: use quic"},
		{"HIERCOMM_SOCKET_IFNAME", map[string]string{"HIERCOMM_SOCKET_IFNAME": "^"}, "HIERCOMM_SOCKET_IFNAME", "HIERCOMM_SOCKET_IFNAME=^: interface spec"},
		{"NCCL_SOCKET_IFNAME", map[string]string{"NCCL_SOCKET_IFNAME": "eth0:1234"}, "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME=eth0:1234: interface spec"},
		{"HIERCOMM_ADDR with a port", map[string]string{"HIERCOMM_ADDR": "10.0.0.1:80"}, "HIERCOMM_ADDR", "HIERCOMM_ADDR=10.0.0.1:80 has a port"},
		{"HIERCOMM_ADDR not a host", map[string]string{"HIERCOMM_ADDR": "a b"}, "HIERCOMM_ADDR", "HIERCOMM_ADDR=a b is not an IP address or host name"},
		{"HIERCOMM_SEEDS without port", with(torch, "HIERCOMM_SEEDS", "a"), "HIERCOMM_SEEDS", `HIERCOMM_SEEDS=a: seed "a" is not host:port`},
		{"HIERCOMM_SEEDS port 0", with(torch, "HIERCOMM_SEEDS", "a:0"), "HIERCOMM_SEEDS", `HIERCOMM_SEEDS=a:0: seed "a:0": "0" is not a port`},
		{"HIERCOMM_SEEDS empty item", with(torch, "HIERCOMM_SEEDS", "a:1,,b:2"), "HIERCOMM_SEEDS", `seed "" is not host:port`},
		{"HIERCOMM_SEEDS bad host", with(torch, "HIERCOMM_SEEDS", "a!:1"), "HIERCOMM_SEEDS", `"a!" is not an IP address or host name`},
		{"HIERCOMM_SEEDS without a launcher", map[string]string{"HIERCOMM_SEEDS": "a:1"}, "HIERCOMM_SEEDS", "HIERCOMM_SEEDS=a:1 is set, but no launcher variables"},
		{"HIERCOMM_DEVICE below -1", map[string]string{"HIERCOMM_DEVICE": "-2"}, "HIERCOMM_DEVICE", "HIERCOMM_DEVICE=-2 is not in [-1"},
		{"HIERCOMM_CONNS_PER_PEER 0", map[string]string{"HIERCOMM_CONNS_PER_PEER": "0"}, "HIERCOMM_CONNS_PER_PEER", "HIERCOMM_CONNS_PER_PEER=0 is not in [1, 64]"},
		{"HIERCOMM_CONNS_PER_PEER 65", map[string]string{"HIERCOMM_CONNS_PER_PEER": "65"}, "HIERCOMM_CONNS_PER_PEER", "HIERCOMM_CONNS_PER_PEER=65 is not in [1, 64]"},
		{"HIERCOMM_DEVICE text", map[string]string{"HIERCOMM_DEVICE": "cuda:0"}, "HIERCOMM_DEVICE", "HIERCOMM_DEVICE=cuda:0 is not an integer"},
		{"HIERCOMM_JOIN_TIMEOUT without unit", map[string]string{"HIERCOMM_JOIN_TIMEOUT": "30"}, "HIERCOMM_JOIN_TIMEOUT", "HIERCOMM_JOIN_TIMEOUT=30 is not a positive Go duration"},
		{"HIERCOMM_JOIN_TIMEOUT negative", map[string]string{"HIERCOMM_JOIN_TIMEOUT": "-1s"}, "HIERCOMM_JOIN_TIMEOUT", "HIERCOMM_JOIN_TIMEOUT=-1s is not a positive"},
		{"HIERCOMM_LAUNCHER_SOCKETS", map[string]string{"HIERCOMM_LAUNCHER_SOCKETS": "yes"}, "HIERCOMM_LAUNCHER_SOCKETS", "HIERCOMM_LAUNCHER_SOCKETS=yes: only `hiercomm run` sets it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadLaunch(getenvOf(tc.env, nil), sys)
			if err == nil {
				t.Fatal("LoadLaunch succeeded")
			}
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("error %T is not an *EnvError: %v", err, err)
			}
			if ee.Var != tc.wantVar {
				t.Errorf("EnvError.Var = %q, want %q (%v)", ee.Var, tc.wantVar, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantVar) {
				t.Errorf("error %q does not name %s", err, tc.wantVar)
			}
			if ee.Var != EnvJobKey && ee.Value != strings.TrimSpace(tc.env[ee.Var]) {
				t.Errorf("EnvError.Value = %q, want %q", ee.Value, tc.env[ee.Var])
			}
			// The job key never appears in an error.
			if k := tc.env[EnvJobKey]; k != "" && (strings.Contains(err.Error(), k) || ee.Value != "") {
				t.Errorf("error carries the key: %q (Value %q)", err, ee.Value)
			}
		})
	}
}

// TestLoadLaunchSys: what LoadLaunch asks of the system (Sys) and what it
// makes of a failed or missing answer.
func TestLoadLaunchSys(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		sys     Sys
		wantVar string // the EnvError's variable; "" for success
		want    string // a substring of the message
	}{
		{"host name lookup fails", map[string]string{}, sysOf("", errors.New("uname failed")), EnvHostID, "uname failed"},
		{"empty host name", map[string]string{}, sysOf("", nil), EnvHostID, "host name is empty"},
		// With a host id, the name is not needed.
		{"host id", map[string]string{"HIERCOMM_HOST_ID": "h"}, sysOf("", nil), "", ""},
		{"torchrun GROUP_RANK", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GROUP_RANK": "0"}, sysOf("", nil), "", ""},
		// A Sys without functions: the host name cannot be found, no file
		// can be read; neither panics.
		{"no Sys.Hostname", map[string]string{}, Sys{}, EnvHostID, "host name cannot be found"},
		{"no Sys.ReadFile", map[string]string{"HIERCOMM_HOST_ID": "h", "HIERCOMM_JOB_KEY_FILE": "/key"}, Sys{}, EnvJobKeyFile, "HIERCOMM_JOB_KEY_FILE=/key cannot be read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadLaunch(getenvOf(tc.env, nil), tc.sys)
			if tc.wantVar == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Var != tc.wantVar || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want an EnvError for %s that says %q", err, tc.wantVar, tc.want)
			}
		})
	}
	if _, err := (Launch{WorldSize: 1}).Resolve(nil); err == nil || !strings.Contains(err.Error(), EnvHostID) {
		t.Errorf("Resolve without a hostname function: %v, want an error naming %s", err, EnvHostID)
	}
}

func TestLaunchResolveDefaults(t *testing.T) {
	sys := sysOf("testhost", nil)
	got, err := Launch{WorldSize: 1, Device: -1}.Resolve(sys.Hostname)
	if err != nil {
		t.Fatal(err)
	}
	want := Launch{Style: "explicit", WorldSize: 1, Host: "testhost", Device: -1, JobID: "hiercomm", Network: "quic", Intra: "auto", JoinTimeout: 2 * time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Resolve =\n%+v\nwant\n%+v", got, want)
	}

	// Given values stay; the result does not share the caller's slices.
	in := Launch{Style: "slurm", Rank: -1, WorldSize: 4, LocalRank: 1, Host: "h", Device: 3, Seeds: []string{"a:1", "[::1]:2"},
		Addr: "10.0.0.2", IfSpec: "ib", GossipPort: 29500, JobID: "j", Key: []byte(testKey), Network: "tcp", Intra: "nexar", JoinTimeout: time.Second, Inherited: true}
	got, err = in.Resolve(sys.Hostname)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("Resolve changed given values:\n%+v\nwant\n%+v", got, in)
	}
	got.Seeds[0], got.Key[0] = "x:1", 'x'
	if in.Seeds[0] != "a:1" || in.Key[0] != testKey[0] {
		t.Error("Resolve's result shares Seeds or Key with its input")
	}
	again, err := got.Resolve(sys.Hostname)
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("Resolve is not idempotent: %+v, %v", again, err)
	}

	// A world of one binds no fixed gossip port.
	got, err = Launch{WorldSize: 1, Host: "h", GossipPort: 29500}.Resolve(sys.Hostname)
	if err != nil || got.GossipPort != 0 {
		t.Errorf("world of 1: GossipPort = %d, %v; want 0", got.GossipPort, err)
	}
}

func TestLaunchResolveErrors(t *testing.T) {
	sys := sysOf("testhost", nil)
	ok := Launch{Style: "explicit", Rank: 1, WorldSize: 4, Host: "h", Device: -1, Seeds: []string{"h:1"}, Key: []byte(testKey)}
	if _, err := ok.Resolve(sys.Hostname); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		change func(*Launch)
		want   []string // substrings of the message
	}{
		{"style", func(l *Launch) { l.Style = "mpi" }, []string{`Style "mpi"`}},
		{"world size 0", func(l *Launch) { l.WorldSize = 0 }, []string{"WorldSize 0"}},
		{"rank below -1", func(l *Launch) { l.Rank = -2 }, []string{"Rank -2 is not in [-1, WorldSize 4)"}},
		{"rank = world size", func(l *Launch) { l.Rank = 4 }, []string{"Rank 4 is not in [-1, WorldSize 4)"}},
		{"local rank negative", func(l *Launch) { l.LocalRank = -1 }, []string{"LocalRank -1"}},
		{"local rank too large", func(l *Launch) { l.LocalRank = 4 }, []string{"LocalRank 4"}},
		{"device", func(l *Launch) { l.Device = -2 }, []string{"Device -2"}},
		{"seed not host:port", func(l *Launch) { l.Seeds = []string{"h:1", "h"} }, []string{"Seeds[1]", `"h" is not host:port`}},
		{"seed port", func(l *Launch) { l.Seeds = []string{"h:99999"} }, []string{"Seeds[0]", "not a port"}},
		{"no seeds", func(l *Launch) { l.Seeds = nil }, []string{"Seeds is empty", "HIERCOMM_SEEDS"}},
		{"addr with port", func(l *Launch) { l.Addr = "10.0.0.1:5" }, []string{`Addr "10.0.0.1:5"`}},
		{"ifspec", func(l *Launch) { l.IfSpec = "eth," }, []string{`IfSpec "eth,"`}},
		{"gossip port", func(l *Launch) { l.GossipPort = 65536 }, []string{"GossipPort 65536"}},
		{"job id", func(l *Launch) { l.JobID = "a/b" }, []string{`JobID "a/b"`}},
		{"no key", func(l *Launch) { l.Key = nil }, []string{"no job key", "world of 4", "export HIERCOMM_JOB_KEY=$(openssl rand -hex 32)", "HIERCOMM_JOB_KEY_FILE"}},
		{"short key", func(l *Launch) { l.Key = []byte("short") }, []string{"Key has 5 bytes, need at least 16", "openssl rand -hex 32"}},
		{"short key, world of 1", func(l *Launch) { l.Key, l.WorldSize, l.Rank = []byte("short"), 1, 0 }, []string{"Key has 5 bytes"}},
		{"network", func(l *Launch) { l.Network = "udp" }, []string{`Network "udp"`}},
		{"join timeout", func(l *Launch) { l.JoinTimeout = -time.Second }, []string{"JoinTimeout -1s"}},
		{"conns per peer", func(l *Launch) { l.ConnsPerPeer = 65 }, []string{"ConnsPerPeer 65", "1 to 64"}},
		{"node p2p", func(l *Launch) { l.NodeP2P = "shm" }, []string{`NodeP2P "shm"`, "auto", "intra", "world"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := ok
			l.Seeds = slices.Clone(ok.Seeds)
			tc.change(&l)
			_, err := l.Resolve(sys.Hostname)
			if err == nil {
				t.Fatal("Resolve succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}

	// A world of one needs neither key nor seeds.
	if _, err := (Launch{WorldSize: 1, Host: "h"}).Resolve(sys.Hostname); err != nil {
		t.Errorf("world of 1 without key or seeds: %v", err)
	}
	sys = sysOf("", errors.New("no name"))
	if _, err := (Launch{WorldSize: 1}).Resolve(sys.Hostname); err == nil || !strings.Contains(err.Error(), EnvHostID) {
		t.Errorf("Resolve without a host name: %v, want an error naming %s", err, EnvHostID)
	}
}

func TestLaunchSanitizeJobID(t *testing.T) {
	for in, want := range map[string]string{
		"slurm-123":                         "slurm-123",
		"slurm-123+4":                       "slurm-123-4",
		"slurm-a b/c":                       "slurm-a-b-c",
		"slurm-" + strings.Repeat("9", 200): "slurm-" + strings.Repeat("9", 122),
	} {
		got := sanitizeJobID(in)
		if got != want || !validJobID(got) {
			t.Errorf("sanitizeJobID(%q) = %q, want %q (valid)", in, got, want)
		}
	}
}
