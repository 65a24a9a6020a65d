package commtest

import (
	"bytes"
	"fmt"
	"math"

	"github.com/hiercomm/hiercomm/comm"
)

// prepared is one case on one rank: its buffers, its call, and what the
// buffers must hold afterwards.
type prepared struct {
	tc         *testCase
	rank, size int
	src        *source
	mem        Memory
	call       comm.Call
	allocs     []comm.Buffer
	checks     []check
}

// pieces is a byte string kept as the blocks it is made of (often the
// memo's blocks), so that large inputs and results are not copied together
// only to be copied again. The blocks are read, never written.
type pieces [][]byte

func one(b []byte) pieces { return pieces{b} }

func (ps pieces) len() int {
	n := 0
	for _, b := range ps {
		n += len(b)
	}
	return n
}

func (ps pieces) join() []byte {
	out := make([]byte, 0, ps.len())
	for _, b := range ps {
		out = append(out, b...)
	}
	return out
}

// check is one expectation on a buffer after the call: elements [off, …) of
// buf (a buffer from Memory.Alloc) must equal want, or pass approx.
type check struct {
	what   string // "recv", "send (must be unchanged)", …
	buf    comm.Buffer
	off    int
	want   pieces
	approx func(got []byte) string // instead of want: "" if got is close enough
}

// vcount is the AllToAllV count from rank i to rank j: 0, n/2, n or 3n/2,
// depending on i and j, so some pairs send nothing and no two neighbours
// send the same amount.
func vcount(i, j, n int) int { return n * ((i + 2*j + 1) % 4) / 2 }

// ringTag is the tag of a SendRecv case: distinct between neighbouring cases.
func ringTag(tc *testCase) int { return int(tc.seed % 1000) }

// prepare builds one case on one rank: its buffers (through mem), its Call,
// and the checks that verify runs after the call.
func prepare(tc *testCase, rank, size int, mem Memory) (p *prepared, err error) {
	p = &prepared{tc: tc, rank: rank, size: size, src: newSource(tc, size), mem: mem}
	defer func() {
		if err != nil {
			p.free()
			p = nil
		}
	}()
	s, e, n := p.src, p.src.e, tc.n
	// input is elements [off, off+n) of rank r's input, one of the blocks
	// every user of r's input asks for (shared: not to be modified).
	input := s.block
	// perRank is rank r's input when it has one block of n per rank.
	perRank := func(r int) pieces {
		ps := make(pieces, size)
		for j := range ps {
			ps[j] = input(r, j*n, n)
		}
		return ps
	}
	// fromEach is the pieces block(q) for q = 0, 1, …, size-1.
	fromEach := func(block func(q int) []byte) pieces {
		ps := make(pieces, size)
		for q := range ps {
			ps[q] = block(q)
		}
		return ps
	}
	junk := func(n int) []byte {
		b := make([]byte, n*e.size)
		garbage(b, tc.seed^uint64(rank)<<40^0xbadc0ffee)
		return b
	}
	// buffer allocates a buffer holding init (whose length fixes its count).
	buffer := func(init pieces) (comm.Buffer, error) {
		b, err := mem.Alloc(tc.dt, init.len()/e.size)
		if err != nil {
			return comm.Buffer{}, fmt.Errorf("Memory.Alloc: %w", err)
		}
		p.allocs = append(p.allocs, b)
		if _, ok := mem.(hostMemory); ok {
			dst := b.Bytes()
			for _, piece := range init {
				dst = dst[copy(dst, piece):]
			}
			return b, nil
		}
		if err := mem.Write(b, init.join()); err != nil {
			return comm.Buffer{}, fmt.Errorf("Memory.Write: %w", err)
		}
		return b, nil
	}
	// outOfPlace allocates send holding in and recv holding junk, and checks
	// that send is unchanged and recv holds want.
	outOfPlace := func(in, want pieces, recvLen int) error {
		send, err := buffer(in)
		if err != nil {
			return err
		}
		recv, err := buffer(one(junk(recvLen)))
		if err != nil {
			return err
		}
		p.call.Send, p.call.Recv = send, recv
		p.checks = append(p.checks, check{what: "send (must be unchanged)", buf: send, want: in}, check{what: "recv", buf: recv, want: want})
		return nil
	}

	c := &p.call
	c.Kind, c.Op, c.Root = tc.kind, tc.op, tc.root
	if s.premul {
		c.Scalar = premulScalar(rank)
	}
	isRoot := tc.kind.Rooted() && rank == tc.root
	switch tc.kind {
	case comm.KindAllReduce, comm.KindScan, comm.KindExScan:
		lo, hi := 0, size
		switch tc.kind {
		case comm.KindScan:
			hi = rank + 1
		case comm.KindExScan:
			hi = rank
		}
		in := one(input(rank, 0, n))
		var want pieces
		if tc.v != random {
			want = one(s.reduction(tc.op, lo, hi, 0, n, size))
		}
		if tc.v == inPlace {
			buf, err := buffer(in)
			if err != nil {
				return nil, err
			}
			c.Send, c.Recv = buf, buf
			p.checks = append(p.checks, check{what: "recv (in place)", buf: buf, want: want})
			break
		}
		if err := outOfPlace(in, want, n); err != nil {
			return nil, err
		}
		if tc.v == random && !tc.large {
			p.checks[1].approx = p.approxSum()
		}

	case comm.KindReduce:
		in := one(input(rank, 0, n))
		if tc.v == inPlace {
			// In place on every rank; only the root's result is defined.
			buf, err := buffer(in)
			if err != nil {
				return nil, err
			}
			c.Send, c.Recv = buf, buf
			if isRoot {
				p.checks = append(p.checks, check{what: "recv (in place)", buf: buf, want: one(s.reduction(tc.op, 0, size, 0, n, size))})
			}
			break
		}
		if isRoot {
			if err := outOfPlace(in, one(s.reduction(tc.op, 0, size, 0, n, size)), n); err != nil {
				return nil, err
			}
			break
		}
		send, err := buffer(in) // recv stays the zero Buffer: ignored off the root
		if err != nil {
			return nil, err
		}
		c.Send = send
		p.checks = append(p.checks, check{what: "send (must be unchanged)", buf: send, want: in})

	case comm.KindReduceScatter:
		in := perRank(rank)
		want := one(s.reduction(tc.op, 0, size, rank*n, n, size))
		if tc.v == inPlace {
			send, err := buffer(in)
			if err != nil {
				return nil, err
			}
			c.Send, c.Recv = send, send.Slice(rank*n, n)
			p.checks = append(p.checks, check{what: "recv (in place, block rank of send)", buf: send, off: rank * n, want: want})
			break
		}
		if err := outOfPlace(in, want, n); err != nil {
			return nil, err
		}

	case comm.KindAllGather:
		in := one(input(rank, 0, n))
		want := fromEach(func(q int) []byte { return input(q, 0, n) })
		if tc.v == inPlace {
			init := junk(size * n)
			copy(init[rank*n*e.size:], in[0])
			recv, err := buffer(one(init))
			if err != nil {
				return nil, err
			}
			c.Send, c.Recv = recv.Slice(rank*n, n), recv
			p.checks = append(p.checks, check{what: "recv (in place, send is block rank)", buf: recv, want: want})
			break
		}
		if err := outOfPlace(in, want, size*n); err != nil {
			return nil, err
		}

	case comm.KindBroadcast:
		want := one(input(tc.root, 0, n))
		init := want
		if !isRoot {
			init = one(junk(n))
		}
		buf, err := buffer(init)
		if err != nil {
			return nil, err
		}
		c.Send, c.Recv = buf, buf
		p.checks = append(p.checks, check{what: "buf", buf: buf, want: want})

	case comm.KindAllToAll:
		want := fromEach(func(q int) []byte { return input(q, rank*n, n) })
		if err := outOfPlace(perRank(rank), want, size*n); err != nil {
			return nil, err
		}

	case comm.KindAllToAllV:
		c.SendCounts, c.RecvCounts = make([]int, size), make([]int, size)
		var in pieces
		off := 0
		for j := range size {
			c.SendCounts[j] = vcount(rank, j, n)
			c.RecvCounts[j] = vcount(j, rank, n)
			in = append(in, input(rank, off, c.SendCounts[j]))
			off += c.SendCounts[j]
		}
		want := fromEach(func(q int) []byte {
			off := 0 // where rank q's block for this rank starts in q's send
			for j := range rank {
				off += vcount(q, j, n)
			}
			return input(q, off, vcount(q, rank, n))
		})
		if err := outOfPlace(in, want, want.len()/e.size); err != nil {
			return nil, err
		}

	case comm.KindGather:
		in := one(input(rank, 0, n))
		if isRoot {
			if err := outOfPlace(in, fromEach(func(q int) []byte { return input(q, 0, n) }), size*n); err != nil {
				return nil, err
			}
			break
		}
		send, err := buffer(in)
		if err != nil {
			return nil, err
		}
		c.Send = send
		p.checks = append(p.checks, check{what: "send (must be unchanged)", buf: send, want: in})

	case comm.KindScatter:
		want := one(input(tc.root, rank*n, n))
		if isRoot {
			if err := outOfPlace(perRank(rank), want, n); err != nil {
				return nil, err
			}
			break
		}
		recv, err := buffer(one(junk(n))) // send stays the zero Buffer: ignored off the root
		if err != nil {
			return nil, err
		}
		c.Recv = recv
		p.checks = append(p.checks, check{what: "recv", buf: recv, want: want})

	case comm.KindSend, comm.KindRecv:
		// A ring: send to the right, receive from the left (oneself when alone).
		left := (rank - 1 + size) % size
		if err := outOfPlace(one(input(rank, 0, n)), one(input(left, 0, n)), n); err != nil {
			return nil, err
		}
		c.Peer, c.Tag = (rank+1)%size, ringTag(tc)

	case comm.KindBarrier:
	default:
		return nil, fmt.Errorf("commtest: no case for %v", tc.kind)
	}
	return p, nil
}

// approxSum is the check of a random case: the result must be within a
// generous bound of the float64 sum (or average). Bit-identity across ranks
// is checked separately (crossCheck).
func (p *prepared) approxSum() func(got []byte) string {
	s, e, n := p.src, p.src.e, p.tc.n
	return func(got []byte) string {
		// Each of the size-1 additions rounds by at most 2^-(mbits+1) of the
		// sum of magnitudes; allow twice that, and one smallest subnormal.
		unit := math.Ldexp(1, -int(e.mbits))
		floor := math.Ldexp(1, 2-(1<<(e.ebits-1))-int(e.mbits))
		const chunk = 4096
		var sum, mag, v [chunk]float64
		bad, first := 0, -1
		var firstMsg string
		for done := 0; done < n; done += chunk {
			m := min(chunk, n-done)
			clear(sum[:m])
			clear(mag[:m])
			for q := range p.size {
				e.decodeFloats(v[:m], s.block(q, 0, n)[done*e.size:])
				for i, x := range v[:m] {
					sum[i] += x
					mag[i] += math.Abs(x)
				}
			}
			for i := range m {
				tol := float64(p.size+1) * unit * mag[i]
				want := sum[i]
				if p.tc.op == comm.Avg {
					want /= float64(p.size)
					tol /= float64(p.size)
				}
				tol += floor
				g := e.toFloat(e.get(got, done+i))
				if !(math.Abs(g-want) <= tol) {
					bad++
					if first < 0 {
						first = done + i
						firstMsg = fmt.Sprintf("got %s, want %v ± %.3g", e.format(e.get(got, done+i)), want, tol)
					}
				}
			}
		}
		if bad == 0 {
			return ""
		}
		return fmt.Sprintf("%d of %d elements off; first at index %d: %s", bad, n, first, firstMsg)
	}
}

func (p *prepared) free() {
	for _, b := range p.allocs {
		p.mem.Free(b)
	}
	p.allocs = nil
}

// verify reads back every checked buffer and returns what is wrong, or "".
func (p *prepared) verify() (string, error) {
	e := p.src.e
	for _, ck := range p.checks {
		if ck.want == nil && ck.approx == nil {
			continue
		}
		var got []byte
		if _, ok := p.mem.(hostMemory); ok {
			got = ck.buf.Bytes() // no copy needed
		} else {
			got = make([]byte, ck.buf.ByteLen())
			if err := p.mem.Read(got, ck.buf); err != nil {
				return "", fmt.Errorf("Memory.Read: %w", err)
			}
		}
		got = got[ck.off*e.size:]
		if ck.approx != nil {
			if msg := ck.approx(got); msg != "" {
				return ck.what + ": " + msg, nil
			}
			continue
		}
		if msg := comparePieces(e, got, ck.want); msg != "" {
			return ck.what + ": " + msg, nil
		}
	}
	return "", nil
}

// comparePieces is compare of got against the concatenation of want.
func comparePieces(e elem, got []byte, want pieces) string {
	bad, total, first := 0, want.len()/e.size, -1
	var firstMsg string
	at := 0
	for _, w := range want {
		g := got[at : at+len(w)]
		if !bytes.Equal(g, w) {
			n, i := mismatches(e, g, w)
			if n > 0 && first < 0 {
				first = at/e.size + i
				firstMsg = fmt.Sprintf("got %s, want %s", e.format(e.get(g, i)), e.format(e.get(w, i)))
			}
			bad += n
		}
		at += len(w)
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d elements wrong; first at index %d: %s", bad, total, first, firstMsg)
}

// compare returns "" when got equals want bit for bit (any NaN matching a
// NaN), else how many elements differ and the first of them.
func compare(e elem, got, want []byte) string {
	return comparePieces(e, got, one(want))
}

// mismatches counts the elements of got that differ from want (a NaN
// matches any NaN) and returns the index of the first.
func mismatches(e elem, got, want []byte) (bad, first int) {
	first = -1
	for i := range len(want) / e.size {
		g, w := e.get(got, i), e.get(want, i)
		if g == w || e.float && e.isNaN(w) && e.isNaN(g) {
			continue
		}
		bad++
		if first < 0 {
			first = i
		}
	}
	return bad, first
}
