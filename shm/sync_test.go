//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// cpuTime is the CPU time this process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Skip(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A rank that waits for a late peer must sleep, not spin: the spin and
// yield phases are bounded, then it waits on the futex.
func TestWaitingRankDoesNotBurnACore(t *testing.T) {
	cs := localWorld(t, 2, Config{SlotBytes: minSlotBytes})
	done := make(chan error, 1)
	go func() { done <- cs[0].Barrier(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // past the spin and yield phases
	before, start := cpuTime(t), time.Now()
	time.Sleep(500 * time.Millisecond)
	used, took := cpuTime(t)-before, time.Since(start)
	if err := cs[1].Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("a waiting rank used %v of CPU in %v", used, took.Round(time.Millisecond))
	if used > took/5 {
		t.Errorf("a waiting rank used %v of CPU in %v", used, took)
	}
	if n := atomic.LoadUint32(cs[1].words[1].sleepers); n != 0 {
		t.Errorf("%d sleepers still counted on rank 1's bell", n)
	}
}

// A sleeping waiter wakes when the peer posts, without waiting for its
// futex timeout to pass many times over.
func TestSleeperWakesOnPost(t *testing.T) {
	cs := localWorld(t, 2, Config{SlotBytes: minSlotBytes})
	ctx := context.Background()
	for range 5 {
		done := make(chan time.Time, 1)
		go func() {
			if err := cs[0].Barrier(ctx); err != nil {
				t.Error(err)
			}
			done <- time.Now()
		}()
		time.Sleep(30 * time.Millisecond)
		posted := time.Now()
		if err := cs[1].Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if d := (<-done).Sub(posted); d > sleepMax+20*time.Millisecond {
			t.Errorf("the sleeper woke %v after the post", d)
		}
	}
}

// A wait ends when this rank's context does, or when it closes, with the
// right error.
func TestWaitEndsOnContextAndClose(t *testing.T) {
	cs := localWorld(t, 3, Config{SlotBytes: minSlotBytes})
	w := newWatch(3)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	err := cs[0].waitAll(&bound{ctx: ctx}, 1, w)
	if !errors.Is(err, comm.ErrCanceled) {
		t.Errorf("wait with a cancelled context: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the cancelled wait took %v", d)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := cs[0].waitAll(&bound{ctx: ctx}, 1, w); !errors.Is(err, comm.ErrTimeout) {
		t.Errorf("wait past its deadline: %v", err)
	}
	cs[2].closing.Store(true)
	if err := cs[2].waitAll(&bound{ctx: context.Background()}, 1, newWatch(3)); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("wait on a closing rank: %v", err)
	}
	cs[2].closing.Store(false)
	// A peer's post ends the wait; a peer that is behind but closed ends it
	// with a PeerError.
	cs[1].post(1)
	cs[2].post(1)
	if err := cs[0].waitAll(&bound{ctx: context.Background()}, 1, w); err != nil {
		t.Errorf("wait for a posted step: %v", err)
	}
	cs[2].setState(stateClosed)
	var pe *comm.PeerError
	if err := cs[0].waitAll(&bound{ctx: context.Background()}, 2, w); !errors.As(err, &pe) || pe.Peer != 1 && pe.Peer != 2 {
		t.Errorf("wait for a closed peer: %v", err)
	}
}

// checkPeer tells a gone process and a stopped heartbeat from a live peer.
func TestCheckPeer(t *testing.T) {
	cs := localWorld(t, 2, Config{SlotBytes: minSlotBytes, FailureTimeout: 200 * time.Millisecond})
	c := cs[0]
	w := newWatch(2)
	if err := c.checkPeer(w, 1, time.Now()); err != nil {
		t.Fatalf("a live peer: %v", err)
	}
	cs[1].kill() // its heartbeat stops
	deadline := time.Now().Add(3 * time.Second)
	var err error
	for err == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		err = c.checkPeer(w, 1, time.Now())
	}
	var pe *comm.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !bytes.Contains([]byte(err.Error()), []byte("heartbeat")) {
		t.Errorf("a peer whose heartbeat stopped: %v", err)
	}
	// A peer whose pid is gone fails at once, heartbeat or not.
	cs2 := localWorld(t, 2, Config{SlotBytes: minSlotBytes})
	gone := deadPid(t)
	writeProc(cs2[1].seg.mem, cs2[1].seg.l.ctl(1)+cProc, gone)
	if err := cs2[0].checkPeer(newWatch(2), 1, time.Now()); !errors.As(err, &pe) || pe.Peer != 1 || !bytes.Contains([]byte(err.Error()), []byte("is gone")) {
		t.Errorf("a peer whose process is gone: %v", err)
	}
}

// Frames of every size go through a ring that wraps many times, intact.
func TestRingWraps(t *testing.T) {
	buf := make([]byte, 4096)
	var tail, head uint64
	r := ring{buf: buf, tail: &tail, head: &head}
	next := byte(0)
	var sent, got [][]byte
	for i := range 500 {
		n := (i * 37) % 1500
		if r.room() < n {
			// Drain everything so far.
			for {
				f, p1, p2, ok := r.next()
				if !ok {
					break
				}
				got = append(got, append(append([]byte(nil), p1...), p2...))
				if f.kind != frameData || f.tag != int64(len(got)-1) {
					t.Fatalf("frame %d: kind %d tag %d", len(got)-1, f.kind, f.tag)
				}
				r.consume(f)
			}
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = next
			next++
		}
		r.put(frame{kind: frameData, tag: int64(i)}, p)
		sent = append(sent, p)
	}
	for {
		f, p1, p2, ok := r.next()
		if !ok {
			break
		}
		got = append(got, append(append([]byte(nil), p1...), p2...))
		r.consume(f)
	}
	if len(got) != len(sent) {
		t.Fatalf("%d frames sent, %d received", len(sent), len(got))
	}
	for i := range sent {
		if !bytes.Equal(sent[i], got[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if tail != head || tail < 50*uint64(len(buf)) {
		t.Errorf("tail %d head %d: the ring did not wrap as expected", tail, head)
	}
}

// Two ranks that Send large messages to each other before they Recv do not
// deadlock: the message waiting for a Recv is drained by the engine of the
// rank that is blocked sending.
func TestMutualSendsBeforeRecvs(t *testing.T) {
	cs := localWorld(t, 2, Config{SlotBytes: minSlotBytes})
	const n = 1 << 18 // far beyond a ring
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(r*n + i)
		}
		if err := c.Send(ctx, comm.Host(out), 1-r, 3); err != nil {
			return err
		}
		in := make([]int32, n)
		if err := c.Recv(ctx, comm.Host(in), 1-r, 3); err != nil {
			return err
		}
		for i, v := range in {
			if v != int32((1-r)*n+i) {
				return errors.New("wrong message")
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// cpuID is this thread's CPU (plus one), as getcpu(2) says, where the build
// can tell.
func TestCPUIDIsThisCPU(t *testing.T) {
	const sysGetcpu = 309 // amd64, the only build with cpuID
	if cpuID() == 0 {
		t.Skipf("this build (%s) cannot tell which CPU it runs on", runtime.GOARCH)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for try := 0; ; try++ {
		before := cpuID()
		var cpu, node uint32
		if _, _, errno := syscall.RawSyscall(sysGetcpu, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0); errno != 0 {
			t.Skipf("getcpu: %v", errno)
		}
		after := cpuID()
		if before == after && before == cpu+1 {
			return
		}
		if before == after || try == 100 { // not a move between the reads
			t.Fatalf("cpuID gives %d (CPU %d), getcpu CPU %d", before, before-1, cpu)
		}
	}
}

// A waiting process yields only for a peer still behind that last ran on
// its CPU or on an unknown one.
func TestBehindOnFollowsThePeersCPUs(t *testing.T) {
	cs := localWorld(t, 4, Config{SlotBytes: minSlotBytes})
	c := cs[1]
	g := c.x.g + 1 // no rank has posted it
	posted := func(g uint64) func(int) bool {
		return func(q int) bool { return atomic.LoadUint64(c.words[q].posted) >= g }
	}
	set := func(cpus ...uint32) {
		for r, cpu := range cpus {
			atomic.StoreUint32(c.words[r].cpu, cpu)
		}
	}
	cases := []struct {
		cpus []uint32 // ranks 0…3; rank 1 is the waiter, on CPU 5
		q    int
		want bool
	}{
		{[]uint32{3, 5, 3, 3}, 0, false}, // everyone behind is elsewhere
		{[]uint32{3, 5, 5, 3}, 0, true},  // rank 2 shares the waiter's CPU
		{[]uint32{3, 5, 3, 0}, 0, true},  // rank 3's CPU is unknown
		{[]uint32{5, 5, 3, 3}, 2, false}, // rank 0 is known to have posted (below q)
		{[]uint32{5, 9, 9, 9}, 1, false}, // the waiter's own word does not count
	}
	for _, tc := range cases {
		set(tc.cpus...)
		if got := c.behindOn(5, tc.q, c.size, posted(g)); got != tc.want {
			t.Errorf("CPUs %v, peers from %d on: behindOn = %v, want %v", tc.cpus, tc.q, got, tc.want)
		}
	}
	set(0, 0, 0, 0)
	if c.behindOn(5, 0, c.size, posted(c.x.g)) {
		t.Error("behindOn counts peers that have posted the step")
	}
}

// A communicator told that more processes than CPUs share the host
// (Config.HostProcs) waits the crowded way, though its own ranks would
// each have a CPU: few checks before it yields, and a short yield before
// it sleeps (none in the point-to-point engine), leaving the CPUs to the
// processes with work.
func TestHostProcsCrowdedWait(t *testing.T) {
	for _, tc := range []struct {
		procs          int
		spin           int
		yieldTime, p2p time.Duration
	}{
		{0, spinChecks, yieldFor, yieldFor},
		{1, spinChecks, yieldFor, yieldFor},
		{runtime.NumCPU() + 1, spinOver, yieldCrowded, yieldCrowded}, // goroutines of one process
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cs, err := NewLocal(ctx, testNamespace(), 1, Config{HostProcs: tc.procs})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if c := cs[0]; c.spin != tc.spin || c.yieldTime != tc.yieldTime || c.p2pYield != tc.p2p {
			t.Errorf("HostProcs %d on %d CPUs: spin %d, yield %v, point-to-point yield %v; want %d, %v, %v",
				tc.procs, runtime.NumCPU(), c.spin, c.yieldTime, c.p2pYield, tc.spin, tc.yieldTime, tc.p2p)
		}
		cs[0].Close()
	}
	// Ranks that are processes: the point-to-point engine sleeps at once on
	// a crowded host.
	for _, tc := range []struct {
		ranks, procs, cpus int
		inProcess          bool
		spin               int
		yield, p2p         time.Duration
	}{
		{2, 0, 2, false, spinChecks, yieldFor, yieldFor},
		{2, 4, 2, false, spinOver, yieldCrowded, p2pYieldCrowded},
		{4, 0, 2, false, spinOver, yieldCrowded, p2pYieldCrowded},
		{4, 0, 2, true, spinOver, yieldCrowded, yieldCrowded},
	} {
		spin, yield, p2p := waitPolicy(tc.ranks, tc.procs, tc.cpus, tc.inProcess)
		if spin != tc.spin || yield != tc.yield || p2p != tc.p2p {
			t.Errorf("waitPolicy(%d ranks, %d processes, %d CPUs, in process %v) = %d, %v, %v; want %d, %v, %v",
				tc.ranks, tc.procs, tc.cpus, tc.inProcess, spin, yield, p2p, tc.spin, tc.yield, tc.p2p)
		}
	}
}

// A rank that aborts after it saw every peer post its last step (it
// finished its collective, then heard of a later failure) has not left
// that collective; one that posted a step and aborted while waiting in it
// has (abortPassed in its abort record).
func TestAbortRecordSaysWhetherTheStepPassed(t *testing.T) {
	cs := localWorld(t, 2, Config{})
	done := make(chan error, 2)
	for _, c := range cs {
		go func() { done <- c.Barrier(context.Background()) }()
	}
	for range cs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	g := atomic.LoadUint64(cs[1].mine.posted)
	cs[1].Abort(errors.New("a later collective failed"))
	if cs[0].abortedHere(1, g) {
		t.Errorf("rank 1 finished step %d, then aborted: taken for a rank that gave up waiting in it", g)
	}

	cs = localWorld(t, 2, Config{})
	cs[1].post(1) // posted its first step, never saw rank 0 post it
	cs[1].Abort(errors.New("its context ended"))
	if !cs[0].abortedHere(1, 1) {
		t.Errorf("rank 1 posted step 1 and aborted while waiting in it: not taken for a rank that left it")
	}
}
