package nexar

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *net.TCPConn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.AcceptTCP()
		acc <- res{c, err}
	}()
	a, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// TestPumpPollAndReadLoopShareTheStream: frames of every size (small ones
// staged in bulk, large ones read straight into their payload) reach the
// handler whole and in order while a receive polls the connection as
// hard as it can beside the read loop, and the stream's end — the
// goodbye, or none — is what the read loop returns, whoever read it.
func TestPumpPollAndReadLoopShareTheStream(t *testing.T) {
	for _, goodbye := range []bool{true, false} {
		name := "goodbye"
		if !goodbye {
			name = "no goodbye"
		}
		t.Run(name, func(t *testing.T) {
			w, r := tcpPair(t)
			var (
				mu  sync.Mutex
				got []Header
				bad []string
			)
			p, err := newPump(r, func(h Header, payload []byte) {
				mu.Lock()
				defer mu.Unlock()
				if h.Kind == frameHeartbeat {
					return
				}
				if want := bytes.Repeat([]byte{byte(h.Seq)}, int(h.Len)); !bytes.Equal(payload, want) {
					bad = append(bad, fmt.Sprintf("frame %d has other bytes", h.Seq))
				}
				got = append(got, h)
				putBuf(payload)
			})
			if err != nil {
				t.Fatal(err)
			}
			// A poll alone reads: the first frames come before the read
			// loop runs.
			const early = 3
			for i := range early {
				if err := writeFrame(w, Header{Kind: FrameData, Seq: uint64(i), Step: 8}, bytes.Repeat([]byte{byte(i)}, 8)); err != nil {
					t.Fatal(err)
				}
			}
			for start := time.Now(); ; p.poll() {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n == early {
					break
				}
				if time.Since(start) > 10*time.Second {
					t.Fatalf("polls delivered %d of %d frames in 10 s", n, early)
				}
			}
			ended := make(chan error, 1)
			go func() { ended <- p.run() }()
			var stop atomic.Bool
			polled := make(chan struct{})
			go func() {
				defer close(polled)
				for !stop.Load() {
					p.poll()
					runtime.Gosched()
				}
			}()
			sizes := []int{0, 8, 1, HeaderSize, stageSize/2 - 1, stageSize / 2, stageSize, 3*stageSize + 7, 8, 1 << 20, 16}
			const rounds = 20
			for i := early; i < early+rounds*len(sizes); i++ {
				n := sizes[i%len(sizes)]
				if i%7 == 3 {
					if _, err := w.Write(heartbeatRecord); err != nil {
						t.Fatal(err)
					}
				}
				if err := writeFrame(w, Header{Kind: FrameData, Seq: uint64(i), Step: uint32(n)}, bytes.Repeat([]byte{byte(i)}, n)); err != nil {
					t.Fatal(err)
				}
			}
			if goodbye {
				w.Write(goodbyeRecord)
			}
			w.CloseWrite()
			select {
			case err := <-ended:
				if goodbye && err != nil || !goodbye && err != errNoGoodbye {
					t.Errorf("the read loop returned %v, want %v", err, map[bool]error{true: nil, false: errNoGoodbye}[goodbye])
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the read loop did not see the stream's end in 20 s")
			}
			stop.Store(true)
			<-polled
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Errorf("%d frames corrupted, first: %s", len(bad), bad[0])
			}
			if len(got) != early+rounds*len(sizes) {
				t.Fatalf("%d frames delivered, want %d", len(got), early+rounds*len(sizes))
			}
			for i, h := range got {
				if h.Seq != uint64(i) || h.Len != h.Step {
					t.Fatalf("frame %d delivered as seq %d with %d bytes (sent %d)", i, h.Seq, h.Len, h.Step)
				}
			}
		})
	}
}
