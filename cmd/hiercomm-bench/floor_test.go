package main

import (
	"sync"
	"syscall"
	"testing"
)

// socketPair is two connected stream sockets' descriptors, closed at the
// test's end.
func socketPair(t *testing.T) (int, int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
	return fds[0], fds[1]
}

// TestSocketPings: the asking side gets a positive median round trip, the
// answering side answers every ping and returns.
func TestSocketPings(t *testing.T) {
	a, b := socketPair(t)
	done := make(chan error, 1)
	go func() { _, err := socketPings(b, false); done <- err }()
	us, err := socketPings(a, true)
	if err != nil || us <= 0 {
		t.Fatalf("round trip %v us, %v", us, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the answering side: %v", err)
	}
	// A peer that goes away is an error, not a hang.
	c, d := socketPair(t)
	syscall.Close(d)
	if _, err := socketPings(c, true); err == nil {
		t.Error("pings to a closed socket succeeded")
	}
}

// TestSocketDoubling runs the exchange among 4 goroutines, each pair of
// partners (r, r XOR 2^k) joined by a socket pair: every rank finishes
// with a median, and a rank wired to the wrong partner is an error.
func TestSocketDoubling(t *testing.T) {
	const P = 4
	run := func(fds []map[int]int) []error {
		errs := make([]error, P)
		var wg sync.WaitGroup
		var once sync.Once
		for r := range P {
			wg.Go(func() {
				us, err := socketDoubling(fds[r], r, P)
				if err == nil && us <= 0 {
					t.Errorf("rank %d: %v us", r, us)
				}
				errs[r] = err
				if err != nil { // the others' reads end as a failed rank's would
					once.Do(func() {
						for _, m := range fds {
							for _, fd := range m {
								syscall.Shutdown(fd, syscall.SHUT_RDWR)
							}
						}
					})
				}
			})
		}
		wg.Wait()
		return errs
	}
	wire := func(swap bool) []map[int]int {
		fds := make([]map[int]int, P)
		for r := range fds {
			fds[r] = map[int]int{}
		}
		for r := range P {
			for bit := 1; bit < P; bit <<= 1 {
				if p := r ^ bit; p > r {
					fds[r][p], fds[p][r] = socketPair(t)
				}
			}
		}
		if swap { // rank 0's partners 1 and 2 cross: its first round reads rank 2's second
			fds[0][1], fds[0][2] = fds[0][2], fds[0][1]
		}
		return fds
	}
	for r, err := range run(wire(false)) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if errs := run(wire(true)); errs[0] == nil {
		t.Error("rank 0 wired to the wrong partners measured without an error")
	}
}

// TestSocketStream: the writing side gets a positive rate once the
// reading side has read every message and answered; a reader that goes
// away is an error, not a hang.
func TestSocketStream(t *testing.T) {
	a, b := socketPair(t)
	done := make(chan error, 1)
	go func() { _, err := socketStream(b, false); done <- err }()
	gbs, err := socketStream(a, true)
	if err != nil || gbs <= 0 {
		t.Fatalf("stream %v GB/s, %v", gbs, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the reading side: %v", err)
	}
	c, d := socketPair(t)
	syscall.Close(d)
	if _, err := socketStream(c, true); err == nil {
		t.Error("a stream to a closed socket succeeded")
	}
}
