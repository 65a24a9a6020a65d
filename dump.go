package hiercomm

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hiercomm/hiercomm/comm/tier"
)

// A live dump, like a JVM's thread dump on SIGQUIT: SIGUSR1 to a process
// that called Init writes the flight recorder of every communicator it
// has not closed (tier.DumpLive) to each one's logger: its last
// collectives, where each is, and the ranks it waits on. `hiercomm run`
// passes a SIGUSR1 it gets on to every rank, so one signal shows the
// whole job. The handler is installed by the first Init and stays for the
// life of the process (SIGUSR1 no longer ends it).

var sigusr1 sync.Once

// dumpOnSIGUSR1 installs the handler, once per process; log is where it
// says that no recorder is on (Options.FlightRecorder is zero).
func dumpOnSIGUSR1(log *slog.Logger) {
	sigusr1.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		go func() {
			for range ch {
				if tier.DumpLive("SIGUSR1") == 0 {
					log.Warn("hiercomm: SIGUSR1: no flight recorder is on; set Options.FlightRecorder (or each tier's) to keep the last collectives")
				}
			}
		}()
	})
}

// EnvFlightRecorder is the environment variable that switches the flight
// recorders on when Options.FlightRecorder is zero, like torch's
// TORCH_NCCL_TRACE_BUFFER_SIZE: how many collectives each communicator
// keeps. Unset or 0: off.
const EnvFlightRecorder = "HIERCOMM_FLIGHT_RECORDER"

// envFlightRecorder reads HIERCOMM_FLIGHT_RECORDER through getenv.
func envFlightRecorder(getenv func(string) string) (int, error) {
	s := strings.TrimSpace(getenv(EnvFlightRecorder))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%s: want how many collectives each communicator keeps, a whole number ≥ 0 (0 or unset: off)", EnvFlightRecorder, s)
	}
	return n, nil
}
