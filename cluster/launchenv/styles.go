package launchenv

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// The launcher styles: what each launcher's variables say about this
// process. LoadLaunch (env.go) picks the style; hiercomm's own variables
// are applied after it (env.own).

// torchrun reads torchrun's variables (also what torch's env:// rendezvous
// needs: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
func (e env) torchrun(l *Launch, port int, portSet bool) error {
	l.Style = StyleTorchrun
	if !e.isSet(EnvRank) {
		return e.notSet(EnvRank, fmt.Sprintf("%s=%s is, so this looks like a torchrun-style launch; set RANK to this process's global rank too, or unset WORLD_SIZE", EnvWorldSize, e.get(EnvWorldSize)))
	}
	if !e.isSet(EnvWorldSize) {
		return e.notSet(EnvWorldSize, fmt.Sprintf("%s=%s is; set WORLD_SIZE to the number of processes of the job", EnvRank, e.get(EnvRank)))
	}
	ws, _, err := e.intVar(EnvWorldSize, 1, 1<<31-1, "[1, 2^31)")
	if err != nil {
		return err
	}
	rank, _, err := e.intVar(EnvRank, 0, ws-1, fmt.Sprintf("[0, WORLD_SIZE=%d)", ws))
	if err != nil {
		return err
	}
	local, _, err := e.intVar(EnvLocalRank, 0, ws-1, fmt.Sprintf("[0, WORLD_SIZE=%d)", ws))
	if err != nil {
		return err
	}
	if _, _, err := e.intVar(EnvLocalWorldSize, local+1, ws, fmt.Sprintf("[LOCAL_RANK+1=%d, WORLD_SIZE=%d]", local+1, ws)); err != nil {
		return err
	}
	l.Rank, l.WorldSize, l.LocalRank = rank, ws, local
	if g, ok, err := e.intVar(EnvGroupRank, 0, ws-1, fmt.Sprintf("[0, WORLD_SIZE=%d)", ws)); err != nil {
		return err
	} else if ok {
		l.Host = "node-" + strconv.Itoa(g)
	}

	// torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True) holds
	// MASTER_PORT for its own store on rank 0's node, so gossip takes the
	// next port there; HIERCOMM_PORT, when set, is used as given.
	if !portSet {
		p, ok, err := e.portVar(EnvMasterPort)
		if err != nil {
			return err
		}
		if ok {
			port = p
			if agentStore(e.get(EnvTorchAgentStore)) {
				if p == 65535 {
					return e.errorf(EnvMasterPort, "%s=%d leaves no port for gossip: with %s=%s torchrun's agent holds MASTER_PORT and hiercomm uses MASTER_PORT+1; pick a lower --master-port or set %s", EnvMasterPort, p, EnvTorchAgentStore, e.get(EnvTorchAgentStore), EnvPort)
				}
				port = p + 1
			}
		}
	}
	addr, err := e.hostVar(EnvMasterAddr)
	if err != nil {
		return err
	}
	if addr != "" {
		l.Seeds = []string{net.JoinHostPort(addr, strconv.Itoa(port))}
	} else if ws > 1 && !e.isSet(EnvSeeds) {
		return e.notSet(EnvMasterAddr, fmt.Sprintf("a world of WORLD_SIZE=%d needs the address of rank 0's node; set MASTER_ADDR to it (torchrun does), or list gossip seeds in %s", ws, EnvSeeds))
	}
	if rank == 0 {
		l.GossipPort = port
	}
	return nil
}

// agentStore reports whether TORCHELASTIC_USE_AGENT_STORE says the agent
// holds MASTER_PORT (torchrun writes "True" or "False").
func agentStore(v string) bool { return strings.EqualFold(v, "true") || v == "1" }

// slurm reads srun's variables.
func (e env) slurm(l *Launch, port int) error {
	l.Style = StyleSlurm
	started := fmt.Sprintf("SLURM_PROCID=%s is set, but srun sets every SLURM_* variable of a job step; start the processes with srun", e.get(EnvSlurmProcID))
	for _, name := range []string{EnvSlurmNTasks, EnvSlurmLocalID, EnvSlurmNodeID} {
		if !e.isSet(name) {
			return e.notSet(name, started)
		}
	}
	n, _, err := e.intVar(EnvSlurmNTasks, 1, 1<<31-1, "[1, 2^31)")
	if err != nil {
		return err
	}
	rank, _, err := e.intVar(EnvSlurmProcID, 0, n-1, fmt.Sprintf("[0, SLURM_NTASKS=%d)", n))
	if err != nil {
		return err
	}
	local, _, err := e.intVar(EnvSlurmLocalID, 0, n-1, fmt.Sprintf("[0, SLURM_NTASKS=%d)", n))
	if err != nil {
		return err
	}
	node, _, err := e.intVar(EnvSlurmNodeID, 0, n-1, fmt.Sprintf("[0, SLURM_NTASKS=%d)", n))
	if err != nil {
		return err
	}
	l.Rank, l.WorldSize, l.LocalRank = rank, n, local

	// The seed is the first node of the step; SLURM_NODEID counts from it.
	listVar := ""
	for _, name := range []string{EnvSlurmStepNodeList, EnvSlurmJobNodeList, EnvSlurmNodeList} {
		if e.isSet(name) {
			listVar = name
			break
		}
	}
	switch {
	case listVar != "":
		hosts, err := ExpandHostList(e.get(listVar))
		if err != nil {
			return e.errorf(listVar, "%s=%s is not a Slurm host list: %v", listVar, e.get(listVar), err)
		}
		if node >= len(hosts) {
			return e.errorf(EnvSlurmNodeID, "%s=%d is not in [0, %d), the nodes of %s=%s", EnvSlurmNodeID, node, len(hosts), listVar, e.get(listVar))
		}
		for _, h := range hosts {
			if !validHost(h) {
				return e.errorf(listVar, "%s=%s names %q, which is not a host name", listVar, e.get(listVar), h)
			}
		}
		l.Seeds = []string{net.JoinHostPort(hosts[0], strconv.Itoa(port))}
	case n > 1 && !e.isSet(EnvSeeds):
		return e.notSet(EnvSlurmStepNodeList, fmt.Sprintf("neither are SLURM_JOB_NODELIST and SLURM_NODELIST, so the first node (the gossip seed) is unknown; %s, or list gossip seeds in %s", started, EnvSeeds))
	}
	if node == 0 && local == 0 {
		l.GossipPort = port
	}

	if h := e.get(EnvSlurmdNodeName); h != "" {
		l.Host = h
	} else {
		l.Host = "slurm-node-" + strconv.Itoa(node)
	}
	if id := e.get(EnvSlurmJobID); id != "" {
		l.JobID = sanitizeJobID("slurm-" + id)
	}
	return nil
}

// kubernetes reads the variables of a pod behind a headless Service.
func (e env) kubernetes(l *Launch, port int) error {
	l.Style = StyleKubernetes
	svc, err := e.hostVar(EnvK8sService)
	if err != nil {
		return err
	}
	if !e.isSet(EnvWorldSize) {
		return e.notSet(EnvWorldSize, fmt.Sprintf("%s=%s is, and the world size must be known before anyone joins; set WORLD_SIZE to the number of processes (pods × processes per pod)", EnvK8sService, svc))
	}
	ws, _, err := e.intVar(EnvWorldSize, 1, 1<<31-1, "[1, 2^31)")
	if err != nil {
		return err
	}
	local, _, err := e.intVar(EnvLocalRank, 0, ws-1, fmt.Sprintf("[0, WORLD_SIZE=%d)", ws))
	if err != nil {
		return err
	}
	lws, lwsSet, err := e.intVar(EnvLocalWorldSize, local+1, ws, fmt.Sprintf("[LOCAL_RANK+1=%d, WORLD_SIZE=%d]", local+1, ws))
	if err != nil {
		return err
	}
	l.WorldSize, l.LocalRank = ws, local
	l.Rank = -1
	within := fmt.Sprintf("[0, WORLD_SIZE=%d)", ws)
	if r, ok, err := e.intVar(EnvRank, 0, ws-1, within); err != nil {
		return err
	} else if ok {
		l.Rank = r
	} else if lwsSet && lws == 1 || !lwsSet && !e.isSet(EnvLocalRank) {
		// One process per pod: an indexed Job's completion index is the
		// rank. With LOCAL_RANK set and LOCAL_WORLD_SIZE not, a pod may run
		// several processes, and every process must make the same choice
		// (all given ranks or all -1), so membership assigns.
		if r, ok, err := e.intVar(EnvJobCompletionIndex, 0, ws-1, within+" (one process per pod: the index is the rank; set completions to WORLD_SIZE)"); err != nil {
			return err
		} else if ok {
			l.Rank = r
		}
	}
	l.Seeds = []string{net.JoinHostPort(svc, strconv.Itoa(port))}
	if local == 0 {
		l.GossipPort = port
	}
	return nil
}

// single is the world of one process started by hand.
func (e env) single(l *Launch) error {
	l.Style = StyleSingle
	if e.isSet(EnvSeeds) {
		return e.errorf(EnvSeeds, "%s=%s is set, but no launcher variables give this process's rank and the world size (no RANK, SLURM_PROCID or %s); set RANK and WORLD_SIZE too, or unset %s for a single process", EnvSeeds, e.get(EnvSeeds), EnvK8sService, EnvSeeds)
	}
	l.Rank, l.WorldSize, l.LocalRank = 0, 1, 0
	return nil
}
