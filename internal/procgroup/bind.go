package procgroup

import (
	"fmt"
	"runtime"
)

// Binding processes to CPUs. A group with Spec.Bind starts process i of n
// bound to its share of the CPUs this process may use (allowed, in
// order): with n at most their number m, the m/n of them from i·m/n on;
// with more processes than CPUs, CPU i mod m alone, so that the
// processes a CPU runs stay the same ones. This is mpirun's --bind-to
// core with --map-by core (mpirun binds only when the processes fit; this
// binds when asked, on a crowded host too: docs/deployment.md measures
// what it does there both ways).
//
// The process inherits the mask from the thread that starts it (the mask
// is a thread's, and fork and exec keep it), so every thread it ever has
// is bound, the Go runtime's first ones included: the start runs on a
// locked thread whose mask is set first and given back after. That
// thread must live on: the parent-death signal the processes get (Start)
// comes when the thread that started them exits, not the process.

// shareOf is process i's CPUs of n processes sharing allowed.
func shareOf(allowed []int, i, n int) []int {
	m := len(allowed)
	if m == 0 || n <= 0 {
		return nil
	}
	if n > m {
		return allowed[i%m : i%m+1]
	}
	return allowed[i*m/n : (i+1)*m/n]
}

// startOn runs start on a thread bound to cpus, so that the process it
// starts inherits the binding. With no binding to make (nil cpus), it
// just runs start.
func startOn(cpus []int, start func() error) error {
	if len(cpus) == 0 {
		return start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		was := threadCPUs()
		if was == nil { // the kernel will not say: bind nothing
			runtime.UnlockOSThread()
			done <- start()
			return
		}
		if err := bindThread(cpus); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("procgroup: binding to CPUs %v: %w", cpus, err)
			return
		}
		done <- start()
		if bindThread(was) != nil {
			// The thread cannot have its CPUs back: it stays out of the
			// scheduler's hands, parked, rather than exit (and take the
			// process it started with it).
			select {}
		}
		runtime.UnlockOSThread()
	}()
	return <-done
}
