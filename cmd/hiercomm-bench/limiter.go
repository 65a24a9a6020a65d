package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/hiercomm/hiercomm/internal/netemu"
)

// How the inter-node links of a process run are limited; the parent picks
// one and passes it to its ranks with -limiter.
const (
	limitTBF     = "tbf"     // emulated NICs: network namespaces, veth, tbf
	limitWrapper = "wrapper" // bench.Link around the inter-node communicators
	limitNone    = "none"    // loopback, unlimited
)

// limiter is the parent's choice, and the fabric it set up for tbf.
type limiter struct {
	kind     string
	describe string // for the output's "inter-node links:" line
	fabric   *netemu.Fabric
}

// linkBits is -link-rate in bits per second; 0 for "" and "off".
func linkBits(rate string) (uint64, error) {
	if rate == "" || rate == "off" {
		return 0, nil
	}
	return netemu.ParseRate(rate)
}

// chooseLimiter sets up the limiter for rate: the one force names (-limiter)
// if not empty, else an emulated fabric when this process can make one and
// the wrapper otherwise. The caller must call close.
func chooseLimiter(ctx context.Context, rate, force string, layout []int, log *slog.Logger) (limiter, error) {
	bits, err := linkBits(rate)
	if err != nil {
		return limiter{}, fmt.Errorf("-link-rate: %w", err)
	}
	if bits == 0 || force == limitNone {
		return limiter{kind: limitNone, describe: "none (loopback, unlimited)"}, nil
	}
	why := netemu.Available()
	if force == limitWrapper {
		why = fmt.Errorf("-limiter %s", limitWrapper)
	}
	if why != nil && force == limitTBF {
		return limiter{}, fmt.Errorf("-limiter %s: %w", limitTBF, why)
	}
	if why != nil {
		log.Warn("no emulated network; limiting the inter-node communicators with a wrapper instead", "why", why)
		return limiter{kind: limitWrapper, describe: fmt.Sprintf("wrapper: every inter-node communicator of a rank shares one modelled %s link (bytes by nccl-tests' bus factor; loopback underneath)", rate)}, nil
	}
	fab, err := netemu.Setup(ctx, netemu.Config{RanksPerNode: layout, Rate: rate})
	if err != nil {
		return limiter{}, fmt.Errorf("-link-rate %s: %w (or run with -link-rate off)", rate, err)
	}
	return limiter{kind: limitTBF, describe: fmt.Sprintf("tbf on veth, one %s NIC per rank (%s)", rate, fab.Describe()), fabric: fab}, nil
}

// close tears the fabric down, if there is one.
func (l limiter) close(log *slog.Logger) {
	if l.fabric == nil {
		return
	}
	if err := l.fabric.Close(); err != nil {
		log.Error("hiercomm-bench: tearing the emulated network down", "err", err)
	}
}

// nicCounter reads the bytes sent by interface nic of this process's
// network namespace (in a rank of an emulated fabric: its own NIC, which
// carries its inter-node traffic and nothing else).
func nicCounter(nic string) func() (int64, error) {
	return func() (int64, error) {
		b, err := os.ReadFile("/proc/net/dev")
		if err != nil {
			return 0, err
		}
		return parseNetDev(string(b), nic)
	}
}

// parseNetDev finds nic's transmitted bytes in the text of /proc/net/dev:
// "  nic0: rxbytes rxpackets … (8 receive fields) txbytes …".
func parseNetDev(text, nic string) (int64, error) {
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != nic {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			return 0, fmt.Errorf("/proc/net/dev: line of %s has %d fields, want at least 9", nic, len(f))
		}
		return strconv.ParseInt(f[8], 10, 64)
	}
	return 0, fmt.Errorf("/proc/net/dev: no interface %s in this network namespace", nic)
}
