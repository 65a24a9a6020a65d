package netmesh

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/nexar/transport"
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
				got []transport.Header
				bad []string
			)
			p, err := newPump(r, func(h transport.Header, payload []byte) {
				mu.Lock()
				defer mu.Unlock()
				if h.Kind == frameHeartbeat {
					return
				}
				if want := bytes.Repeat([]byte{byte(h.Seq)}, int(h.Len)); !bytes.Equal(payload, want) {
					bad = append(bad, fmt.Sprintf("frame %d has other bytes", h.Seq))
				}
				got = append(got, h)
				transport.PutBuf(payload)
			})
			if err != nil {
				t.Fatal(err)
			}
			// A poll alone reads: the first frames come before the read
			// loop runs.
			const early = 3
			for i := range early {
				if err := writeFrame(w, transport.Header{Kind: transport.FrameData, Seq: uint64(i), Step: 8}, bytes.Repeat([]byte{byte(i)}, 8)); err != nil {
					t.Fatal(err)
				}
			}
			for start := time.Now(); ; p.poll() {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n == early {
					// Poll counts every byte read, by any holder.
					if got, want := p.poll(), uint64(early*(HeaderSize+8)); got != want {
						t.Fatalf("poll counts %d bytes read, want %d", got, want)
					}
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
			sent := uint64(early * (HeaderSize + 8))
			for i := early; i < early+rounds*len(sizes); i++ {
				n := sizes[i%len(sizes)]
				sent += uint64(HeaderSize + n)
				if i%7 == 3 {
					sent += uint64(len(heartbeatRecord))
					if _, err := w.Write(heartbeatRecord); err != nil {
						t.Fatal(err)
					}
				}
				if err := writeFrame(w, transport.Header{Kind: transport.FrameData, Seq: uint64(i), Step: uint32(n)}, bytes.Repeat([]byte{byte(i)}, n)); err != nil {
					t.Fatal(err)
				}
			}
			if goodbye {
				sent += uint64(len(goodbyeRecord))
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
			if got := p.poll(); got != sent {
				t.Errorf("poll counts %d bytes read from the whole stream, want %d", got, sent)
			}
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

// testPlacer offers a landing to the frames whose Seq it has one for.
type testPlacer struct {
	mu      sync.Mutex
	bufs    map[uint64][]byte
	claimed map[uint64]bool
	got     map[uint64][]byte // what landed
}

func (tp *testPlacer) Place(src int, h transport.Header, by transport.Diverter) []byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	b := tp.bufs[h.Seq]
	if b != nil {
		tp.claimed[h.Seq] = true
	}
	return b
}

func (tp *testPlacer) Landed(src int, h transport.Header, payload []byte) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.got[h.Seq] = payload
}

// TestPumpLandsFramesInTheirReceivesMemory: a large data frame whose
// receive offered its memory is read into that memory and handed over by
// landed, not Deliver; smaller frames, control frames and frames
// nobody offered memory to come the ordinary way; and a landing taken
// back mid-frame (divert) is written no more, the frame then delivered
// whole in a pooled buffer.
func TestPumpLandsFramesInTheirReceivesMemory(t *testing.T) {
	w, r := tcpPair(t)
	tp := &testPlacer{bufs: map[uint64][]byte{}, claimed: map[uint64]bool{}, got: map[uint64][]byte{}}
	type frame struct {
		h       transport.Header
		payload []byte
	}
	delivered := make(chan frame, 64)
	p, err := newPump(r, func(h transport.Header, payload []byte) {
		if h.Kind != frameHeartbeat {
			delivered <- frame{h: h, payload: payload}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	p.landAt(tp, 1, func(transport.Header) {})
	ended := make(chan error, 1)
	go func() { ended <- p.run() }()

	fill := func(seq uint64, n int) []byte { return bytes.Repeat([]byte{byte(seq) + 1}, n) }
	sizes := map[uint64]int{1: transport.LandMin, 2: 1 << 20, 3: 3*stageSize + 7, 4: transport.LandMin - 1, 5: 1 << 20, 6: 1 << 20}
	for seq, n := range sizes {
		if seq != 5 { // 5: nobody offers memory
			tp.bufs[seq] = make([]byte, n)
		}
	}
	for seq := uint64(1); seq <= 6; seq++ {
		h := transport.Header{Kind: transport.FrameData, Seq: seq}
		if seq == 6 {
			h.Kind = transport.FrameShrink // only data and point-to-point frames land
		}
		if err := writeFrame(w, h, fill(seq, sizes[seq])); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // 4, 5 and 6 come the ordinary way
		select {
		case f := <-delivered:
			if !bytes.Equal(f.payload, fill(f.h.Seq, sizes[f.h.Seq])) {
				t.Errorf("frame %d delivered with other bytes", f.h.Seq)
			}
			if f.h.Seq < 4 {
				t.Errorf("frame %d, offered memory, was delivered the ordinary way", f.h.Seq)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("frames not delivered in 20 s")
		}
	}
	tp.mu.Lock()
	for seq := uint64(1); seq <= 3; seq++ {
		got, buf := tp.got[seq], tp.bufs[seq]
		if len(got) == 0 || &got[0] != &buf[0] {
			t.Errorf("frame %d did not land in the memory offered", seq)
		} else if !bytes.Equal(buf, fill(seq, sizes[seq])) {
			t.Errorf("frame %d landed with other bytes", seq)
		}
	}
	if tp.claimed[4] || tp.claimed[6] {
		t.Errorf("frames below landMin or of control kinds were offered memory: %v", tp.claimed)
	}
	tp.mu.Unlock()

	// Divert: half a frame lands, the landing is taken back, the rest
	// goes elsewhere.
	const n = 1 << 20
	buf := bytes.Repeat([]byte{0xEE}, n)
	tp.mu.Lock()
	tp.bufs[7] = buf
	tp.mu.Unlock()
	whole := make([]byte, n)
	for i := range whole {
		whole[i] = byte(i*7 + 3)
	}
	var hb [HeaderSize]byte
	putHeader(hb[:], transport.Header{Kind: transport.FrameData, Seq: 7, Len: n})
	if _, err := w.Write(append(hb[:], whole[:n/2]...)); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		p.mu.Lock() // the pump writes only while it holds it
		half := buf[n/2-1] == whole[n/2-1]
		p.mu.Unlock()
		if half {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("the first half did not land in 20 s")
		}
	}
	p.Divert(buf)
	before := bytes.Clone(buf)
	if _, err := w.Write(whole[n/2:]); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-delivered:
		if f.h.Seq != 7 || !bytes.Equal(f.payload, whole) {
			t.Errorf("the diverted frame was delivered as frame %d, whole: %v", f.h.Seq, bytes.Equal(f.payload, whole))
		}
		if &f.payload[0] == &buf[0] {
			t.Error("the diverted frame was delivered in the memory taken back")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the diverted frame was not delivered in 20 s")
	}
	if !bytes.Equal(buf, before) {
		t.Error("the pump wrote into a landing after it was taken back")
	}
	tp.mu.Lock()
	if _, ok := tp.got[7]; ok {
		t.Error("the diverted frame was also handed over by landed")
	}
	tp.mu.Unlock()
	w.Write(goodbyeRecord)
	w.CloseWrite()
	if err := <-ended; err != nil {
		t.Errorf("the read loop returned %v", err)
	}
}
