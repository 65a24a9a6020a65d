package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"net"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/topology"
)

// socketFloor is the machine's floor under nexar's frames: rawTransport's
// 8-byte round trip and doubling exchange over plain TCP sockets between
// the same ranks' processes, measured in the same run. Each rank writes
// and reads 8 bytes with blocking write(2) and read(2) on a socket of its
// own: no frame header, no authentication, no goroutine or network poller
// between the call and the kernel. What nexar's frames take beyond it is
// ours; what the kernel and the scheduler take is the machine's.
type socketFloor struct {
	From int `json:"from_rank"`
	To   int `json:"to_rank"`
	// RTTUS is the median round trip of 8 bytes and their answer.
	RTTUS float64 `json:"rtt_us"`
	// StreamGBs is one direction, From to To: 1 MiB messages written and
	// read back to back by blocking write(2) and read(2) (rawStreamFor),
	// up to the answer to the last: what a large message can move between
	// two of the run's processes over a plain socket, the floor under a
	// large sendrecv or a two-rank Broadcast.
	StreamGBs float64 `json:"stream_gbs,omitempty"`
	// DoublingUS is the median recursive-doubling exchange of 8 bytes
	// among all DoublingRanks ranks at once, as rawTransport's; measured
	// when the world's size is a power of two of at least 4.
	DoublingUS    float64 `json:"doubling_us,omitempty"`
	DoublingRanks int     `json:"doubling_ranks,omitempty"`
}

// socketTimeout bounds every connection, accept and read of the floor's
// measurement: a rank that fails leaves the others an error, not a hang.
const socketTimeout = 20 * time.Second

// measureFloor measures socketFloor between ranks a and b, and among all
// ranks when their number is a power of two of at least 4. It is
// collective over c, the flat world (whose waits leave the measuring ranks
// the cores). It returns the figures on rank 0 (nil elsewhere), or nil
// when they could not be measured (logged: the run goes on without them);
// an error only when c itself failed.
func measureFloor(ctx context.Context, c comm.Communicator, topo *topology.Topology, a, b int, log *slog.Logger) (*socketFloor, error) {
	P, me := c.Size(), c.Rank()
	if P < 2 {
		return nil, nil
	}
	var out *socketFloor
	pair := func(r int) []int {
		switch r {
		case a:
			return []int{b}
		case b:
			return []int{a}
		}
		return nil
	}
	// onPair runs measure on the pair's socket: a first, b answering.
	onPair := func(measure func(fd int, first bool) (float64, error)) (float64, bool, error) {
		return onSockets(ctx, c, topo, log, pair, func(fds map[int]int) (float64, error) {
			switch me {
			case a:
				return measure(fds[b], true)
			case b:
				_, err := measure(fds[a], false)
				return 0, err
			}
			return 0, nil
		})
	}
	us, ok, err := onPair(socketPings)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, nil
	case me == 0:
		out = &socketFloor{From: a, To: b, RTTUS: us}
	}
	gbs, ok, err := onPair(socketStream)
	switch {
	case err != nil:
		return out, err
	case ok && out != nil:
		out.StreamGBs = gbs
	}
	if P < 4 || P&(P-1) != 0 {
		return out, nil
	}
	partners := func(r int) []int {
		var ps []int
		for bit := 1; bit < P; bit <<= 1 {
			ps = append(ps, r^bit)
		}
		return ps
	}
	us, ok, err = onSockets(ctx, c, topo, log, partners, func(fds map[int]int) (float64, error) {
		return socketDoubling(fds, me, P)
	})
	switch {
	case err != nil:
		return out, err
	case !ok: // logged by the rank that failed
	case out != nil:
		out.DoublingUS, out.DoublingRanks = us, P
	}
	return out, nil
}

// onSockets is collective over c: every rank connects a TCP socket to each
// of peers(rank) (a symmetric relation: the lower rank dials, from its data
// address's host to the higher rank's), in blocking mode, and runs measure
// on them (peer → file descriptor). ok is false on every rank when any rank
// failed to connect or to measure; value is rank 0's measure's. err is c's
// own failure.
func onSockets(ctx context.Context, c comm.Communicator, topo *topology.Topology, log *slog.Logger, peers func(int) []int,
	measure func(fds map[int]int) (float64, error)) (value float64, ok bool, err error) {
	P, me := c.Size(), c.Rank()
	mine := peers(me)
	var ln *net.TCPListener
	var port int64
	var failed error
	if len(mine) > 0 {
		host, _, err := net.SplitHostPort(topo.Member(me).Addr)
		if err == nil {
			var l net.Listener
			if l, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err == nil {
				ln, port = l.(*net.TCPListener), int64(l.Addr().(*net.TCPAddr).Port)
				defer ln.Close()
			}
		}
		failed = err
	}
	ports := make([]int64, P)
	if err := c.AllGather(ctx, comm.Host([]int64{port}), comm.Host(ports)); err != nil {
		return 0, false, err
	}
	for r := range P {
		if len(peers(r)) > 0 && ports[r] == 0 {
			failed = cmp.Or(failed, fmt.Errorf("rank %d could not listen", r))
		}
	}
	var fds map[int]int
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if failed == nil && len(mine) > 0 {
		fds, files, failed = connectPeers(ctx, topo, ln, me, mine, ports)
	}
	if failed == nil {
		value, failed = measure(fds)
	}
	bad := int64(0)
	if failed != nil {
		bad = 1
		log.Warn("the machine's floor (raw sockets) is not measured", "err", failed)
	}
	worst := []int64{0}
	if err := c.AllReduce(ctx, comm.Host([]int64{bad}), comm.Host(worst), comm.Max); err != nil {
		return 0, false, err
	}
	return value, worst[0] == 0, nil
}

// connectPeers dials each higher peer (saying who it is in 8 bytes) and
// accepts each lower one on ln, and returns their sockets' descriptors in
// blocking mode, with socketTimeout on reads. The files own the
// descriptors.
func connectPeers(ctx context.Context, topo *topology.Topology, ln *net.TCPListener, me int, peers []int, ports []int64) (map[int]int, []*os.File, error) {
	fds := map[int]int{}
	var files []*os.File
	keep := func(conn net.Conn, peer int) error {
		f, err := conn.(*net.TCPConn).File() // a duplicate: the conn's own descriptor closes now
		conn.Close()
		if err != nil {
			return err
		}
		files = append(files, f)
		fd := int(f.Fd()) // Fd puts the descriptor in blocking mode
		tv := syscall.NsecToTimeval(socketTimeout.Nanoseconds())
		if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		fds[peer] = fd
		return nil
	}
	d := net.Dialer{Timeout: socketTimeout}
	lower := 0
	for _, p := range peers {
		if p < me {
			lower++
			continue
		}
		host, _, _ := net.SplitHostPort(topo.Member(p).Addr)
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.FormatInt(ports[p], 10)))
		if err != nil {
			return nil, files, err
		}
		if _, err := conn.Write(binary.LittleEndian.AppendUint64(nil, uint64(me))); err != nil {
			conn.Close()
			return nil, files, err
		}
		if err := keep(conn, p); err != nil {
			return nil, files, err
		}
	}
	ln.SetDeadline(time.Now().Add(socketTimeout))
	for range lower {
		conn, err := ln.Accept()
		if err != nil {
			return nil, files, err
		}
		conn.SetReadDeadline(time.Now().Add(socketTimeout))
		who := make([]byte, 8)
		if _, err := io.ReadFull(conn, who); err != nil {
			conn.Close()
			return nil, files, err
		}
		p := int(binary.LittleEndian.Uint64(who))
		if !slices.Contains(peers, p) || p >= me {
			conn.Close()
			return nil, files, fmt.Errorf("a connection from %d, which is not a lower peer of rank %d", p, me)
		}
		if err := keep(conn, p); err != nil {
			return nil, files, err
		}
	}
	return fds, files, nil
}

// sysWrite writes all of b to fd and sysRead fills b from it, by plain
// blocking system calls.
func sysWrite(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func sysRead(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Read(fd, b)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return fmt.Errorf("no bytes within %v", socketTimeout)
		case err != nil:
			return err
		case n == 0:
			return fmt.Errorf("the peer closed the socket")
		}
		b = b[n:]
	}
	return nil
}

// socketPings runs rawWarmPings + rawPings 8-byte round trips on fd: the
// first side asks and returns the median round trip in µs, the other
// answers.
func socketPings(fd int, first bool) (float64, error) {
	buf := make([]byte, 8)
	rtts := make([]time.Duration, 0, rawPings)
	for i := range rawWarmPings + rawPings {
		if !first {
			if err := sysRead(fd, buf); err != nil {
				return 0, err
			}
			if err := sysWrite(fd, buf); err != nil {
				return 0, err
			}
			continue
		}
		binary.LittleEndian.PutUint64(buf, uint64(i))
		t0 := time.Now()
		if err := sysWrite(fd, buf); err != nil {
			return 0, err
		}
		if err := sysRead(fd, buf); err != nil {
			return 0, err
		}
		if i >= rawWarmPings {
			rtts = append(rtts, time.Since(t0))
		}
		if got := binary.LittleEndian.Uint64(buf); got != uint64(i) {
			return 0, fmt.Errorf("round trip %d came back as %d", i, got)
		}
	}
	if !first {
		return 0, nil
	}
	slices.Sort(rtts)
	return float64(rtts[len(rtts)/2].Nanoseconds()) / 1e3, nil
}

// socketStream streams 1 MiB messages one way on fd for rawStreamFor:
// the first side writes them, each after an 8-byte word that says whether
// another follows, and returns GB/s up to the other side's 1-byte answer
// to the last; the other side reads them all and answers.
func socketStream(fd int, first bool) (float64, error) {
	msg := make([]byte, 8+rawFrame)
	if !first {
		for {
			if err := sysRead(fd, msg); err != nil {
				return 0, err
			}
			if binary.LittleEndian.Uint64(msg) == 0 {
				return 0, sysWrite(fd, msg[:1])
			}
		}
	}
	t0 := time.Now()
	var sent int64
	for more := true; more; {
		more = time.Since(t0) < rawStreamFor
		flag := uint64(0)
		if more {
			flag = 1
		}
		binary.LittleEndian.PutUint64(msg, flag)
		if err := sysWrite(fd, msg); err != nil {
			return 0, err
		}
		sent += rawFrame
	}
	if err := sysRead(fd, msg[:1]); err != nil {
		return 0, err
	}
	return float64(sent) / time.Since(t0).Seconds() / 1e9, nil
}

// socketDoubling runs rawWarmPings + rawPings recursive-doubling exchanges
// of 8 bytes with the partners' sockets in fds (rank me of P: in round k,
// me XOR 2^k), writing before reading (8 bytes fit any socket buffer), and
// returns the median exchange in µs.
func socketDoubling(fds map[int]int, me, P int) (float64, error) {
	out, in := make([]byte, 8), make([]byte, 8)
	times := make([]time.Duration, 0, rawPings)
	for i := range rawWarmPings + rawPings {
		t0 := time.Now()
		for bit := 1; bit < P; bit <<= 1 {
			peer := me ^ bit
			step := uint64(i)<<8 | uint64(bits.Len(uint(bit)))
			binary.LittleEndian.PutUint64(out, step)
			if err := sysWrite(fds[peer], out); err != nil {
				return 0, err
			}
			if err := sysRead(fds[peer], in); err != nil {
				return 0, err
			}
			if got := binary.LittleEndian.Uint64(in); got != step {
				return 0, fmt.Errorf("doubling exchange: rank %d sent %#x, want %#x", peer, got, step)
			}
		}
		if i >= rawWarmPings {
			times = append(times, time.Since(t0))
		}
	}
	slices.Sort(times)
	return float64(times[len(times)/2].Nanoseconds()) / 1e3, nil
}
