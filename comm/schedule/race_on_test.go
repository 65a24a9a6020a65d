//go:build race

package schedule

// raceOn: the race detector slows the simulator about tenfold and finds
// nothing in it (a rank's simulation is one goroutine); TestSchedules
// sweeps small worlds only, and `make test` runs the full sweep without it.
const raceOn = true
