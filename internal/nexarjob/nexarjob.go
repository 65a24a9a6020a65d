// Package nexarjob starts a flat local job for tests: N processes of one
// program on this host, joined by nexar alone (no membership, no
// hierarchy) over real QUIC or TCP on 127.0.0.1. nexar's and shm's
// multi-process tests run on it. The launcher binds every rank's socket
// itself (port 0, so the kernel picks free ports and no two jobs race for
// one) and hands socket i to child i as file descriptor 3; the children
// learn the world from the environment below.
//
// It is not the launcher users meet: cluster.StartLocal starts a local job
// of emulated nodes (`hiercomm run`, the examples, the root package's
// tests). Both run their processes with internal/procgroup.
//
// nexarjob imports nexar and internal/procgroup; only tests import it
// (internal/rules/imports_test.go holds it to that).
package nexarjob

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// The variables are this launcher's message to its children, not settings
// for a user. A child reads them through the getenv its program passes
// (os.Getenv).
const (
	envLocalRank    = "HIERCOMM_NEXAR_RANK"
	envLocalAddrs   = "HIERCOMM_NEXAR_ADDRS"
	envLocalNetwork = "HIERCOMM_NEXAR_NETWORK"
	envLocalKey     = "HIERCOMM_NEXAR_KEY"
	localSocketFD   = 3
)

// Spec describes a job.
type Spec struct {
	// Ranks is the number of processes. Required (≥ 1).
	Ranks int
	// Network is "quic" or "tcp". If empty, defaults to "quic".
	Network string
	// Path is the program. If empty, defaults to this executable.
	Path string
	// Args are the program's arguments.
	Args []string
	// Env is added to this process's environment for every child. A child
	// whose environment does not set GOMAXPROCS gets its share of this
	// host's CPUs (NumCPU divided by the number of children, at least 1):
	// every rank runs on this one host.
	Env []string
	// Stdout and Stderr receive the children's output, each line prefixed
	// with "[rank i] ". If nil, default to os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// KeepOthers, for fault tests, lets the other ranks run on when one
	// fails (by default they are killed).
	KeepOthers bool
}

// Job is a running job.
type Job struct {
	g *procgroup.Group
}

// IsChild reports whether the environment getenv reads (os.Getenv in
// programs) is that of a process Start started.
func IsChild(getenv func(string) string) bool { return getenv(envLocalRank) != "" }

// Start starts the processes of a job. When one of them fails, the others
// are killed; Wait returns the first failure.
func Start(ctx context.Context, spec Spec) (*Job, error) {
	if spec.Ranks < 1 {
		return nil, fmt.Errorf("nexarjob.Start: Ranks %d, want ≥ 1", spec.Ranks)
	}
	if spec.Network == "" {
		spec.Network = "quic"
	}
	if spec.Path == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("nexarjob.Start: finding this executable: %w", err)
		}
		spec.Path = p
	}
	files, addrs, err := prebind(spec.Network, spec.Ranks)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, fs := range files {
			for _, f := range fs {
				f.Close()
			}
		}
	}()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	pg := procgroup.Spec{Stdout: spec.Stdout, Stderr: spec.Stderr, KeepOthers: spec.KeepOthers}
	for i := range spec.Ranks {
		pg.Procs = append(pg.Procs, procgroup.Proc{
			Path: spec.Path,
			Args: spec.Args,
			Env: append(append(os.Environ(), spec.Env...),
				envLocalRank+"="+strconv.Itoa(i),
				envLocalAddrs+"="+strings.Join(addrs, ","),
				envLocalNetwork+"="+spec.Network,
				envLocalKey+"="+hex.EncodeToString(key)),
			Files:  files[i],
			Prefix: fmt.Sprintf("[rank %d] ", i),
			Name:   fmt.Sprintf("rank %d", i),
		})
	}
	g, err := procgroup.Start(ctx, pg)
	if err != nil {
		return nil, fmt.Errorf("nexarjob.Start: %w", err)
	}
	return &Job{g: g}, nil
}

// Wait waits for every process and returns the first failure.
func (j *Job) Wait() error { return j.g.Wait() }

// Errors waits for every process and returns each rank's failure (nil for
// a rank that exited 0).
func (j *Job) Errors() []error { return j.g.Errors() }

// Kill sends SIGKILL to one rank, for fault tests.
func (j *Job) Kill(rank int) error {
	if rank < 0 || rank >= j.g.Len() {
		return fmt.Errorf("nexarjob.Job.Kill: rank %d out of range [0, %d)", rank, j.g.Len())
	}
	return j.g.Kill(rank)
}

// Signal sends sig to one rank, for fault tests (SIGSTOP and SIGCONT: a
// stalled process).
func (j *Job) Signal(rank int, sig os.Signal) error {
	if rank < 0 || rank >= j.g.Len() {
		return fmt.Errorf("nexarjob.Job.Signal: rank %d out of range [0, %d)", rank, j.g.Len())
	}
	p, err := os.FindProcess(j.g.Pid(rank))
	if err != nil {
		return err
	}
	return p.Signal(sig)
}

// prebind binds n loopback sockets (or pairs: network quic) on
// kernel-chosen ports (netmesh.LocalConfigs) and returns each rank's as
// files, to hand to child processes: the UDP socket, then the TCP
// listener, those the network has.
func prebind(network string, n int) ([][]*os.File, []string, error) {
	sock, err := netmesh.SocketNetwork(network)
	if err != nil {
		return nil, nil, fmt.Errorf("nexarjob: %w", err)
	}
	cfgs, err := netmesh.LocalConfigs(sock, n, nexar.NetConfig{})
	if err != nil {
		return nil, nil, err
	}
	files := make([][]*os.File, n)
	var errs []error
	for i, cfg := range cfgs {
		if cfg.PacketConn != nil {
			f, err := cfg.PacketConn.(*net.UDPConn).File()
			cfg.PacketConn.Close()
			errs = append(errs, err)
			files[i] = append(files[i], f)
		}
		if cfg.Listener != nil {
			f, err := cfg.Listener.(*net.TCPListener).File()
			cfg.Listener.Close()
			errs = append(errs, err)
			files[i] = append(files[i], f)
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, fs := range files {
			for _, f := range fs {
				if f != nil {
					f.Close()
				}
			}
		}
		return nil, nil, fmt.Errorf("nexarjob: handing a bound socket to a child: %w", err)
	}
	return files, cfgs[0].Addrs, nil
}

// Config reads the world Start gave this process from its environment,
// through getenv (os.Getenv in programs), and file descriptor 3.
func Config(getenv func(string) string, opt nexar.Options) (nexar.Config, error) {
	rankStr := getenv(envLocalRank)
	if rankStr == "" {
		return nexar.Config{}, errors.New("nexarjob: not started by nexarjob.Start (" + envLocalRank + " is not set)")
	}
	rank, err := strconv.Atoi(rankStr)
	if err != nil {
		return nexar.Config{}, fmt.Errorf("nexarjob: %s=%q is not a rank", envLocalRank, rankStr)
	}
	addrs := strings.Split(getenv(envLocalAddrs), ",")
	key, err := hex.DecodeString(getenv(envLocalKey))
	if err != nil {
		return nexar.Config{}, fmt.Errorf("nexarjob: %s is not hex: %w", envLocalKey, err)
	}
	cfg := nexar.Config{Network: getenv(envLocalNetwork), Options: opt}
	cfg.Net = nexar.NetConfig{Rank: rank, Addrs: addrs, JobKey: key, JobID: "local"}
	sock, err := netmesh.SocketNetwork(cfg.Network)
	if err != nil {
		return nexar.Config{}, fmt.Errorf("nexarjob: %s: %w", envLocalNetwork, err)
	}
	// The UDP socket, then the TCP listener, from fd 3: those the network
	// has (prebind).
	fd := uintptr(localSocketFD)
	open := func(what string) (*os.File, error) {
		f := os.NewFile(fd, "hiercomm-socket")
		if f == nil {
			return nil, fmt.Errorf("nexarjob: file descriptor %d (the %s from the launcher) is not open", fd, what)
		}
		fd++
		return f, nil
	}
	if strings.HasPrefix(sock, "udp") {
		f, err := open("UDP socket")
		if err != nil {
			return nexar.Config{}, err
		}
		cfg.Net.PacketConn, err = net.FilePacketConn(f)
		f.Close()
		if err != nil {
			return nexar.Config{}, fmt.Errorf("nexarjob: fd %d is not the UDP socket from the launcher: %w", fd-1, err)
		}
	}
	if strings.HasSuffix(sock, "tcp") {
		f, err := open("TCP listener")
		if err != nil {
			return nexar.Config{}, err
		}
		cfg.Net.Listener, err = net.FileListener(f)
		f.Close()
		if err != nil {
			return nexar.Config{}, fmt.Errorf("nexarjob: fd %d is not the TCP socket from the launcher: %w", fd-1, err)
		}
	}
	return cfg, nil
}

// Join connects this process, started by Start, to its job's world;
// getenv reads its environment (os.Getenv in programs).
func Join(ctx context.Context, getenv func(string) string, opt nexar.Options) (*nexar.Comm, error) {
	cfg, err := Config(getenv, opt)
	if err != nil {
		return nil, err
	}
	return nexar.Connect(ctx, cfg)
}
