package netemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// setup builds a fabric for a test, or skips the test with Available's
// reason; the fabric is closed when the test ends, and its namespaces
// must be gone then.
func setup(t *testing.T, cfg Config) *Fabric {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	f, err := Setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		if left := listed(t, f.Namespaces()); len(left) > 0 {
			t.Errorf("after Close, ip netns list still has %v", left)
		}
	})
	return f
}

// listed is those of names that `ip netns list` shows.
func listed(t *testing.T, names []string) []string {
	t.Helper()
	out, err := exec.Command(mustTool(t, "ip"), "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var left []string
	for line := range strings.Lines(string(out)) {
		if name, _, _ := strings.Cut(strings.TrimSpace(line), " "); slices.Contains(names, name) {
			left = append(left, name)
		}
	}
	return left
}

func mustTool(t *testing.T, name string) string {
	t.Helper()
	p, err := lookTool(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rank is (node, local).
type rank struct{ node, local int }

func (r rank) String() string { return fmt.Sprintf("(%d,%d)", r.node, r.local) }

// listen binds a TCP listener at r's address in r's node.
func listen(t *testing.T, f *Fabric, r rank) net.Listener {
	t.Helper()
	var ln net.Listener
	err := f.Do(r.node, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(f.Addr(r.node, r.local), "0"))
		return err
	})
	if err != nil {
		t.Fatalf("listening at %v: %v", r, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dial connects from r's address, in r's node, to addr.
func dial(f *Fabric, r rank, addr string) (net.Conn, error) {
	var c net.Conn
	err := f.Do(r.node, func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(f.Addr(r.node, r.local))}, Timeout: 5 * time.Second}
		c, err = d.Dial("tcp", addr)
		return err
	})
	return c, err
}

func TestEveryRankReachesEveryOther(t *testing.T) {
	for _, perNode := range []bool{false, true} {
		t.Run(fmt.Sprintf("PerNode=%v", perNode), func(t *testing.T) {
			f := setup(t, Config{RanksPerNode: []int{2, 3}, Rate: "1gbit", PerNode: perNode})
			var ranks []rank
			for n, g := range []int{2, 3} {
				for l := range g {
					ranks = append(ranks, rank{n, l})
				}
			}
			// Every rank echoes over TCP and UDP at its address.
			tcpAt, udpAt := map[rank]string{}, map[rank]string{}
			for _, r := range ranks {
				ln := listen(t, f, r)
				tcpAt[r] = ln.Addr().String()
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						go func() { io.Copy(c, c); c.Close() }()
					}
				}()
				var pc net.PacketConn
				if err := f.Do(r.node, func() (err error) {
					pc, err = net.ListenPacket("udp", net.JoinHostPort(f.Addr(r.node, r.local), "0"))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pc.Close() })
				udpAt[r] = pc.LocalAddr().String()
				go func() {
					buf := make([]byte, 2048)
					for {
						n, from, err := pc.ReadFrom(buf)
						if err != nil {
							return
						}
						pc.WriteTo(buf[:n], from)
					}
				}()
			}
			for _, from := range ranks {
				var pc net.PacketConn
				if err := f.Do(from.node, func() (err error) {
					pc, err = net.ListenPacket("udp", net.JoinHostPort(f.Addr(from.node, from.local), "0"))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				for _, to := range ranks {
					msg := fmt.Sprintf("%v to %v", from, to)
					c, err := dial(f, from, tcpAt[to])
					if err != nil {
						t.Errorf("TCP %s: %v", msg, err)
						continue
					}
					c.SetDeadline(time.Now().Add(5 * time.Second))
					got := make([]byte, len(msg))
					if _, err := c.Write([]byte(msg)); err != nil {
						t.Errorf("TCP %s: %v", msg, err)
					} else if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
						t.Errorf("TCP %s: echo %q, %v", msg, got, err)
					}
					if h, _, _ := net.SplitHostPort(c.RemoteAddr().String()); h != f.Addr(to.node, to.local) {
						t.Errorf("TCP %s reached %s", msg, h)
					}
					c.Close()
					if err := udpEcho(pc, udpAt[to], msg); err != nil {
						t.Errorf("UDP %s: %v", msg, err)
					}
				}
				pc.Close()
			}
		})
	}
}

// udpEcho sends msg to addr until its echo comes back (the first packet
// may wait for ARP).
func udpEcho(pc net.PacketConn, addr, msg string) error {
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	buf := make([]byte, 2048)
	for range 10 {
		if _, err := pc.WriteTo([]byte(msg), to); err != nil {
			return err
		}
		pc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, _, err := pc.ReadFrom(buf)
		if err == nil && string(buf[:n]) == msg {
			return nil
		}
	}
	return errors.New("no echo")
}

// nicBytes reads node's per-interface byte counters (received,
// transmitted) from the node's /proc/thread-self/net/dev.
func nicBytes(t *testing.T, f *Fabric, node int) map[string][2]uint64 {
	t.Helper()
	m := map[string][2]uint64{}
	err := f.Do(node, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/dev")
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			name, rest, ok := strings.Cut(sc.Text(), ":")
			fields := strings.Fields(rest)
			if !ok || len(fields) < 9 {
				continue
			}
			rx, _ := strconv.ParseUint(fields[0], 10, 64)
			tx, _ := strconv.ParseUint(fields[8], 10, 64)
			m[strings.TrimSpace(name)] = [2]uint64{rx, tx}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// transfer sends size bytes from one rank to another over TCP and returns
// the rate the receiver saw, in bits/s.
func transfer(t *testing.T, f *Fabric, from, to rank, size int) float64 {
	t.Helper()
	ln := listen(t, f, to)
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	start := time.Now()
	c, err := dial(f, from, ln.Addr().String())
	if err != nil {
		t.Errorf("%v to %v: %v", from, to, err)
		return 0
	}
	buf := make([]byte, 1<<20)
	for sent := 0; sent < size; sent += len(buf) {
		if _, err := c.Write(buf[:min(len(buf), size-sent)]); err != nil {
			t.Errorf("%v to %v: %v", from, to, err)
			c.Close()
			return 0
		}
	}
	c.Close()
	n := <-got
	took := time.Since(start)
	if n != int64(size) {
		t.Errorf("%v to %v: %d of %d bytes arrived", from, to, n, size)
	}
	return float64(n) * 8 / took.Seconds()
}

// concurrent runs the transfers at once and returns their aggregate
// rate: all the bytes over the time until the last one ends.
func concurrent(t *testing.T, f *Fabric, size int, pairs ...[2]rank) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range pairs {
		wg.Go(func() { transfer(t, f, p[0], p[1], size) })
	}
	wg.Wait()
	return float64(size*len(pairs)) * 8 / time.Since(start).Seconds()
}

const testRate = 200e6 // bits/s: transfers of a few MB take a fraction of a second

func TestLinksRunAtTheRateAndWithinANodeFaster(t *testing.T) {
	f := setup(t, Config{RanksPerNode: []int{2, 2}, Rate: "200mbit"})
	const size = 8 << 20
	before := nicBytes(t, f, 0)
	between := transfer(t, f, rank{0, 1}, rank{1, 0}, size)
	after := nicBytes(t, f, 0)
	within := transfer(t, f, rank{0, 0}, rank{0, 1}, size)
	t.Logf("node to node %.0f Mbit/s, within a node %.0f Mbit/s (links: %s)", between/1e6, within/1e6, f.Describe())
	if between > 2*testRate || between < testRate/4 {
		t.Errorf("node to node ran at %.0f Mbit/s; the links are limited to %.0f", between/1e6, testRate/1e6)
	}
	if within < 3*testRate {
		t.Errorf("within a node ran at %.0f Mbit/s, not much faster than the %.0f Mbit/s links", within/1e6, testRate/1e6)
	}
	// Rank (0,1) sent from its own address: the bytes left by its own
	// NIC, not by the NIC of the destination's rail.
	sent1 := after["nic1"][1] - before["nic1"][1]
	sent0 := after["nic0"][1] - before["nic0"][1]
	if sent1 < size || sent0 > size/10 {
		t.Errorf("rank (0,1) to (1,0): node 0 sent %d bytes by nic1 and %d by nic0, want the %d on nic1", sent1, sent0, size)
	}
}

func TestRailsCarryTrafficInParallel(t *testing.T) {
	pairs := [][2]rank{{{0, 0}, {1, 0}}, {{0, 1}, {1, 1}}}
	const size = 6 << 20
	perRank := setup(t, Config{RanksPerNode: []int{2, 2}, Rate: "200mbit"})
	rails := concurrent(t, perRank, size, pairs...)
	perNode := setup(t, Config{RanksPerNode: []int{2, 2}, Rate: "200mbit", PerNode: true})
	shared := concurrent(t, perNode, size, pairs...)
	t.Logf("two flows, one per rail: %.0f Mbit/s in all (%s); over one NIC per node: %.0f Mbit/s (%s)",
		rails/1e6, perRank.Describe(), shared/1e6, perNode.Describe())
	if rails < 1.4*testRate {
		t.Errorf("two flows on two rails moved %.0f Mbit/s in all, want above 1.4 × %.0f", rails/1e6, testRate/1e6)
	}
	if shared > 1.25*testRate {
		t.Errorf("two flows over one shared NIC per node moved %.0f Mbit/s in all, want about %.0f", shared/1e6, testRate/1e6)
	}
}

func TestWrapRunsInTheNodeAndKeepsFiles(t *testing.T) {
	f := setup(t, Config{RanksPerNode: []int{1, 1}})
	var files []*os.File
	var reads []*os.File
	for range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		files, reads = append(files, w), append(reads, r)
	}
	argv := append(f.Wrap(1), "/bin/sh", "-c", `for fd in 3 4 5; do echo "fd $fd" >&$fd || exit 1; done; readlink /proc/self/ns/net; ip -o -4 addr show dev nic0`)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	for i, r := range reads {
		files[i].Close()
		b, _ := io.ReadAll(r)
		if want := fmt.Sprintf("fd %d\n", i+3); string(b) != want {
			t.Errorf("through %v, fd %d got %q, want %q", f.Wrap(1), i+3, b, want)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(nsPath(f.Namespaces()[2]), &st); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("net:[%d]", st.Ino); !strings.Contains(string(out), want) {
		t.Errorf("the wrapped program ran in %q, want node 1's namespace %s", out, want)
	}
	if !strings.Contains(string(out), f.Addr(1, 0)+"/16") {
		t.Errorf("node 1's nic0 does not have %s: %s", f.Addr(1, 0), out)
	}
}

func TestDo(t *testing.T) {
	f := setup(t, Config{RanksPerNode: []int{1, 2}})
	want := errors.New("from fn")
	if err := f.Do(1, func() error { return want }); err != want {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	if err := f.Do(2, func() error { return nil }); err == nil || !strings.Contains(err.Error(), "node 2") {
		t.Errorf("Do(2) on 2 nodes: %v, want an error naming node 2", err)
	}
	// Node 1's addresses are there and this process's are not.
	if err := f.Do(1, func() error {
		ln, err := net.Listen("tcp", net.JoinHostPort(f.Addr(1, 1), "0"))
		if err == nil {
			ln.Close()
		}
		return err
	}); err != nil {
		t.Errorf("binding %s in node 1: %v", f.Addr(1, 1), err)
	}
	if ln, err := net.Listen("tcp", net.JoinHostPort(f.Addr(1, 1), "0")); err == nil {
		ln.Close()
		t.Errorf("%s is bindable outside node 1's namespace", f.Addr(1, 1))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Do(0, func() error { return nil }); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Do after Close: %v, want an error saying the fabric is closed", err)
	}
}

func TestFailedSetupLeavesNothing(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	defer func() { testHookStep = nil }()
	for _, at := range []string{"namespaces", "nics", "switch", "nodes", "limits"} {
		injected := errors.New("injected failure after " + at)
		testHookStep = func(step string) error {
			if step == at {
				return injected
			}
			return nil
		}
		k := seq.Load() + 1
		f, err := Setup(context.Background(), Config{RanksPerNode: []int{2, 1}, Rate: "100mbit"})
		if !errors.Is(err, injected) {
			if f != nil {
				f.Close()
			}
			t.Fatalf("Setup with a failure after %s: %v", at, err)
		}
		prefix := fmt.Sprintf("%s%d-%d-", namePrefix, os.Getpid(), k)
		names := []string{prefix + "sw", prefix + "n0", prefix + "n1"}
		if left := listed(t, names); len(left) > 0 {
			t.Errorf("a Setup that failed after %s left %v", at, left)
		}
	}
}

func TestSetupRefusesAnExistingName(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ip := mustTool(t, "ip")
	taken := fmt.Sprintf("%s%d-%d-n0", namePrefix, os.Getpid(), seq.Load()+1)
	if out, err := exec.Command(ip, "netns", "add", taken).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command(ip, "netns", "del", taken).Run()
	f, err := Setup(context.Background(), Config{RanksPerNode: []int{1}})
	if err == nil {
		f.Close()
		t.Fatal("Setup took over an existing namespace")
	}
	if !strings.Contains(err.Error(), taken) {
		t.Errorf("Setup: %v, want it to name %s", err, taken)
	}
	if len(listed(t, []string{taken})) != 1 {
		t.Errorf("Setup deleted %s, which it did not make", taken)
	}
}

func TestSweepDeletesTheFabricsOfDeadProcesses(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ip := mustTool(t, "ip")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-1-sw", namePrefix, dead.Process.Pid)
	live := fmt.Sprintf("%s%d-1-sw", namePrefix, 1) // pid 1 is alive
	for _, ns := range []string{stale, live} {
		if out, err := exec.Command(ip, "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		defer exec.Command(ip, "netns", "del", ns).Run()
	}
	swept, err := Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(swept, stale) || slices.Contains(swept, live) {
		t.Errorf("Sweep deleted %v; want %s (pid %d is dead) and not %s", swept, stale, dead.Process.Pid, live)
	}
	if left := listed(t, []string{stale, live}); !slices.Equal(left, []string{live}) {
		t.Errorf("after Sweep, ip netns list has %v of %s, %s; want only %s", left, stale, live, live)
	}
}
