package launchenv

import (
	"errors"
	"strings"
	"testing"
)

// The parsers of what a launcher or a user hands over: the Slurm host
// list and the launch environment as a whole.

// FuzzExpandHostList: Slurm's compressed host list (SLURM_STEP_NODELIST).
// No panic; a list that expands has 1 to 2^20 non-empty names, and a list
// without brackets expands to its comma-separated names.
func FuzzExpandHostList(f *testing.F) {
	for _, s := range []string{"gpu[01-04,07],cpu3,n[1-2]x", "n[1-2]-r[1-2]", "a", "n[08-10]", "x[0-1048575]", "x[0-1048576]",
		"n[1-18446744073709551615]", "[", "n[]", "n[2-1]", "a,,b", "n[1-2][3-4]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostList(s)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > maxHostListLen {
			t.Fatalf("%q expands to %d hosts", s, len(hosts))
		}
		for i, h := range hosts {
			if h == "" {
				t.Fatalf("%q: host %d is empty", s, i)
			}
		}
		if !strings.ContainsAny(s, "[]") {
			if got := strings.Join(hosts, ","); got != s {
				t.Fatalf("%q without brackets expands to %q", s, got)
			}
		}
	})
}

// FuzzLoadLaunch: the launcher's variables (torchrun's, Slurm's,
// hiercomm's own) as a scheduler or a user sets them. No panic; an error
// is an *EnvError that never repeats the job key; a Launch that loads and
// resolves is within its documented ranges.
func FuzzLoadLaunch(f *testing.F) {
	const key = "KEY-0123456789abcdef-KEY"
	f.Add("1", "4", "1", "2", "10.0.0.1", "29500", "", "", "", "", "", "", key)
	f.Add("", "", "", "", "", "", "3", "8", "1", "gpu[01-04]", "", "", key)
	f.Add("", "2", "", "", "", "", "", "", "", "", "a:1,b:2", "^docker,eth", key)
	f.Add("-1", "99999999999999999999", "x", "", "::1", "0", "", "", "", "", "", "=", "short")
	f.Add("", "", "", "", "", "", "0", "2", "0", "n[1-2", "", "", "")
	f.Fuzz(func(t *testing.T, rank, world, local, localWorld, masterAddr, masterPort, procID, ntasks, localID, nodelist, seeds, ifname, k string) {
		vars := map[string]string{
			EnvRank: rank, EnvWorldSize: world, EnvLocalRank: local, EnvLocalWorldSize: localWorld,
			EnvMasterAddr: masterAddr, EnvMasterPort: masterPort,
			EnvSlurmProcID: procID, EnvSlurmNTasks: ntasks, EnvSlurmLocalID: localID, EnvSlurmStepNodeList: nodelist,
			EnvSeeds: seeds, EnvSocketIfname: ifname, EnvJobKey: k,
			EnvHostID: "fuzz-host", // no host name lookup
		}
		// The key is secret unless another variable holds it too (an
		// error may repeat that one).
		secret := len(k) >= MinKeyLen
		for name, v := range vars {
			if name != EnvJobKey && strings.Contains(v, k) {
				secret = false
			}
		}
		// No host name lookup, no key file: nothing of the system is asked.
		noSys := Sys{
			Hostname: func() (string, error) { t.Fatal("LoadLaunch or Resolve asked for the host name"); return "", nil },
			ReadFile: func(string) ([]byte, error) { t.Fatal("LoadLaunch read a file"); return nil, nil },
		}
		l, err := LoadLaunch(func(name string) string { return vars[name] }, noSys)
		if err != nil {
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("LoadLaunch: %v (%T), want an *EnvError", err, err)
			}
			if secret && strings.Contains(err.Error(), k) {
				t.Fatalf("the error repeats the job key: %v", err)
			}
			return
		}
		r, err := l.Resolve(noSys.Hostname)
		if err != nil {
			if secret && strings.Contains(err.Error(), k) {
				t.Fatalf("Resolve's error repeats the job key: %v", err)
			}
			return
		}
		if r.WorldSize < 1 || r.Rank < -1 || r.Rank >= r.WorldSize || r.LocalRank < 0 || r.LocalRank >= r.WorldSize ||
			r.GossipPort < 0 || r.GossipPort > 65535 || (r.WorldSize > 1 && (len(r.Seeds) == 0 || len(r.Key) < MinKeyLen)) {
			t.Fatalf("a resolved Launch out of its ranges: %+v", r)
		}
	})
}
