package ncclfake

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// How the ranks' work meets.
//
// When the operation runs, each issue checks this rank's buffers and
// arrives at its meeting (per clique, by number); the last rank to arrive
// checks that everyone called the same thing, does the whole
// collective's data movement under w.memMu, and releases the others. A
// rank waits for its peers until they all arrive or it is aborted itself;
// a peer's abort poisons the meetings it joined, which then never
// complete.

// mulSize is a·b, or false when it overflows.
func mulSize(a, b uintptr) (uintptr, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return uintptr(lo), hi == 0 && uint64(uintptr(lo)) == lo
}

// fakeCollMeet is the k-th collective of a clique.
type fakeCollMeet struct {
	parts    []*fakeCollPart // by rank; nil until the rank arrives
	arrived  int
	poisoned bool               // a rank that arrived was aborted: it never completes
	done     chan struct{}      // closed when complete
	res      []cuapi.NCCLResult // by rank; set before done is closed
	text     []string
}

// fakeCollPart is one rank's side of a collective, its buffers resolved
// (nil where the rank has none).
type fakeCollPart struct {
	is         *fakeIssue
	send, recv []byte
}

// runColl runs rank c's side of a collective.
func (w *fakeWorld) runColl(c *fakeComm, is *fakeIssue) (cuapi.NCCLResult, string) {
	w.mu.Lock()
	if c.dead != cuapi.NCCLSuccess {
		w.mu.Unlock()
		return cuapi.NCCLSuccess, ""
	}
	part, r, why := w.collPart(c, is)
	if r != cuapi.NCCLSuccess {
		w.mu.Unlock()
		return r, why // never arrives: the peers wait, as for a kernel that faulted
	}
	cl := c.clique
	m := cl.colls[is.seq]
	if m == nil {
		m = &fakeCollMeet{parts: make([]*fakeCollPart, cl.nranks), done: make(chan struct{})}
		cl.colls[is.seq] = m
	}
	m.parts[c.rank] = part
	m.arrived++
	last := m.arrived == cl.nranks && !m.poisoned
	if last {
		delete(cl.colls, is.seq)
	}
	w.mu.Unlock()
	if last {
		w.completeColl(m, is.seq)
		close(m.done)
	}
	select {
	case <-m.done:
		return m.res[c.rank], m.text[c.rank]
	case <-c.aborted:
		return cuapi.NCCLSuccess, ""
	}
}

// collPart resolves rank c's buffers of a collective: each must lie in one
// live allocation, and send and recv may overlap only in NCCL's in-place
// form. The caller holds w.mu.
func (w *fakeWorld) collPart(c *fakeComm, is *fakeIssue) (*fakeCollPart, cuapi.NCCLResult, string) {
	n := uintptr(c.clique.nranks)
	block, ok1 := mulSize(is.count, uintptr(fakeTypeSize(is.dt)))
	all, ok2 := mulSize(block, n)
	if !ok1 || !ok2 {
		return nil, cuapi.NCCLUnhandledCudaError, fmt.Sprintf("%v on rank %d: count %d overflows the address space", is.kind, c.rank, is.count)
	}
	var sendN, recvN uintptr
	inPlace := is.send == is.recv
	switch is.kind {
	case fakeAllReduce:
		sendN, recvN = block, block
	case fakeBroadcast:
		recvN = block
		if c.rank == is.root {
			sendN = block
		}
	case fakeReduce:
		sendN = block
		if c.rank == is.root {
			recvN = block
		}
	case fakeAllGather:
		sendN, recvN = block, all
		inPlace = is.send == is.recv+uintptr(c.rank)*block
	case fakeReduceScatter:
		sendN, recvN = all, block
		inPlace = is.recv == is.send+uintptr(c.rank)*block
	}
	p := &fakeCollPart{is: is}
	var ok bool
	if p.send, ok = w.devRange(is.send, sendN); !ok {
		return nil, cuapi.NCCLUnhandledCudaError, fmt.Sprintf("%v on rank %d: send pointer %#x (%d bytes) out of range: not inside one live device allocation", is.kind, c.rank, is.send, sendN)
	}
	if p.recv, ok = w.devRange(is.recv, recvN); !ok {
		return nil, cuapi.NCCLUnhandledCudaError, fmt.Sprintf("%v on rank %d: recv pointer %#x (%d bytes) out of range: not inside one live device allocation", is.kind, c.rank, is.recv, recvN)
	}
	if sendN > 0 && recvN > 0 && is.send < is.recv+recvN && is.recv < is.send+sendN && !inPlace {
		return nil, cuapi.NCCLInvalidUsage, fmt.Sprintf("%v on rank %d: send %#x (%d bytes) and recv %#x (%d bytes) overlap, and not in NCCL's in-place form", is.kind, c.rank, is.send, sendN, is.recv, recvN)
	}
	return p, cuapi.NCCLSuccess, ""
}

// mismatch reports whether two ranks' calls of one collective differ in
// what NCCL needs them to agree on.
func mismatch(a, b *fakeIssue) bool {
	return a.kind != b.kind || a.count != b.count || a.dt != b.dt ||
		a.kind.reduces() && opKind(a.op) != opKind(b.op) || a.kind.rooted() && a.root != b.root
}

// opKind is op, with every PreMulSum op the same: ranks may pass
// different ones (their own scalars).
func opKind(op cuapi.RedOp) cuapi.RedOp {
	return min(op, cuapi.NCCLNumOps)
}

// completeColl does a collective every rank has arrived at: it checks
// that they agree, then moves and reduces the data (inputs are copied
// before any output is written, so in-place calls are right). No lock is
// held on entry.
func (w *fakeWorld) completeColl(m *fakeCollMeet, seq uint64) {
	n := len(m.parts)
	m.res = make([]cuapi.NCCLResult, n)
	m.text = make([]string, n)
	p0 := m.parts[0]
	for r, p := range m.parts {
		if mismatch(p0.is, p.is) {
			// A deliberate difference: real NCCL hangs or corrupts memory.
			for i := range m.res {
				m.res[i] = cuapi.NCCLInvalidUsage
				m.text[i] = fmt.Sprintf("collective #%d on rank %d: rank 0 called %v but rank %d called %v (ranks that disagree hang or corrupt memory in NCCL)", seq, i, p0.is, r, p.is)
			}
			return
		}
	}
	is := p0.is
	w.memMu.Lock()
	defer w.memMu.Unlock()
	switch is.kind {
	case fakeAllReduce, fakeReduce, fakeReduceScatter:
		ins, scalars := make([][]byte, n), make([][]byte, n)
		for r, p := range m.parts {
			ins[r], scalars[r] = p.send, p.is.scalar
		}
		acc := reduceAs(is.dt, is.op, ins, scalars)
		if es := fakeTypeSize(is.dt); n == 1 && (is.op == cuapi.NCCLAvg || is.op >= cuapi.NCCLNumOps) && fakeDTypes[is.dt].IsFloat() && w.opt.Version < 22907 {
			acc = acc[:OneRankAvgCovers(len(acc)/es, es)*es]
		}
		switch is.kind {
		case fakeAllReduce:
			for _, p := range m.parts {
				copy(p.recv, acc)
			}
		case fakeReduce:
			copy(m.parts[is.root].recv, acc)
		case fakeReduceScatter: // rank r gets block r
			block := len(acc) / n
			for r, p := range m.parts {
				copy(p.recv, acc[r*block:(r+1)*block])
			}
		}
	case fakeBroadcast:
		src := slices.Clone(m.parts[is.root].send)
		for _, p := range m.parts {
			copy(p.recv, src)
		}
	case fakeAllGather: // rank r's block at r·count
		var all []byte
		for _, p := range m.parts {
			all = append(all, p.send...)
		}
		for _, p := range m.parts {
			copy(p.recv, all)
		}
	}
}

// fakeP2PKey names the k-th message from one rank to another.
type fakeP2PKey struct {
	from, to int
	k        uint64
}

// fakeP2PMeet is one send and its receive.
type fakeP2PMeet struct {
	send, recv *fakeP2PPart
	poisoned   bool
	done       chan struct{}
	sendRes    cuapi.NCCLResult // set before done is closed
	recvRes    cuapi.NCCLResult
	text       string
}

type fakeP2PPart struct {
	comm *fakeComm
	is   *fakeIssue
	buf  []byte
}

// runP2P runs rank c's side of a send or receive.
func (w *fakeWorld) runP2P(c *fakeComm, is *fakeIssue) (cuapi.NCCLResult, string) {
	w.mu.Lock()
	if c.dead != cuapi.NCCLSuccess {
		w.mu.Unlock()
		return cuapi.NCCLSuccess, ""
	}
	ptr := is.send
	key := fakeP2PKey{from: c.rank, to: is.root, k: is.seq}
	if is.kind == fakeRecv {
		ptr = is.recv
		key = fakeP2PKey{from: is.root, to: c.rank, k: is.seq}
	}
	size, ok := mulSize(is.count, uintptr(fakeTypeSize(is.dt)))
	var buf []byte
	if ok {
		buf, ok = w.devRange(ptr, size)
	}
	if !ok {
		w.mu.Unlock()
		return cuapi.NCCLUnhandledCudaError, fmt.Sprintf("%v on rank %d: buffer %#x (%d elements of %s) out of range: not inside one live device allocation", is.kind, c.rank, ptr, is.count, fakeTypeName(is.dt))
	}
	cl := c.clique
	m := cl.p2ps[key]
	if m == nil {
		m = &fakeP2PMeet{done: make(chan struct{})}
		cl.p2ps[key] = m
	}
	part := &fakeP2PPart{comm: c, is: is, buf: buf}
	if is.kind == fakeSend {
		m.send = part
	} else {
		m.recv = part
	}
	last := m.send != nil && m.recv != nil && !m.poisoned
	if last {
		delete(cl.p2ps, key)
	}
	w.mu.Unlock()
	if last {
		w.completeP2P(m, key)
		close(m.done)
	}
	select {
	case <-m.done:
		if is.kind == fakeSend {
			return m.sendRes, m.text
		}
		return m.recvRes, m.text
	case <-c.aborted:
		return cuapi.NCCLSuccess, ""
	}
}

// completeP2P moves a message whose two sides have arrived, after
// checking that they agree on count and datatype (a deliberate
// difference: NCCL would hang or truncate).
func (w *fakeWorld) completeP2P(m *fakeP2PMeet, key fakeP2PKey) {
	s, r := m.send.is, m.recv.is
	if s.count != r.count || s.dt != r.dt {
		m.sendRes, m.recvRes = cuapi.NCCLInvalidUsage, cuapi.NCCLInvalidUsage
		m.text = fmt.Sprintf("message #%d from rank %d to rank %d: the sender called %v but the receiver called %v (send and receive must agree on count and datatype)", key.k, key.from, key.to, s, r)
		return
	}
	w.memMu.Lock()
	copy(m.recv.buf, m.send.buf)
	w.memMu.Unlock()
}
