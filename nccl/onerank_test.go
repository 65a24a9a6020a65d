package nccl_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
)

// NCCL before 2.29.7 can leave the last elements of a float Avg on one
// rank unwritten (NVIDIA/nccl issue 1950). The fake models which ones
// (oneRankAvgCovers); these tests hold that model to the library they run
// on: the real NCCL on a GPU host, the fake everywhere. They also check
// that Comm's Avg on one rank, which is NCCL's Sum, writes everything.

// TestGPUOneRankAvg runs the check on the real NCCL, device 0.
func TestGPUOneRankAvg(t *testing.T) {
	checkOneRankAvg(t, nccl.GPUTestDevice(t))
}

// TestOneRankAvgFake runs it on the fake as NCCL 2.28.3 (with the bug)
// and as 2.29.7 (without).
func TestOneRankAvgFake(t *testing.T) {
	for _, v := range []int{22803, 22907} {
		dev, err := ncclfake.New(ncclfake.Options{Version: v}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		checkOneRankAvg(t, dev)
	}
}

// checkOneRankAvg: on a Comm of one rank on dev, ncclAllReduce with
// ncclAvg (out of place, the result buffer zeroed) writes exactly the
// prefix that OneRankAvgCovers says on a float type before NCCL 2.29.7,
// and everything otherwise (integers: NCCL's SumPostDiv, a copy on one
// rank); Comm.AllReduce with comm.Avg writes everything.
func checkOneRankAvg(t *testing.T, dev *nccl.Device) {
	t.Helper()
	c := world1(t, dev)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, dt := range []comm.DType{comm.F64, comm.F32, comm.F16, comm.BF16, comm.I32} {
		for _, n := range []int{1000003, 65567, 4099, 7} {
			in := oneRankInput(dt, n)
			send, err := dev.Alloc(dt, n)
			if err != nil {
				t.Fatal(err)
			}
			recv, err := dev.Alloc(dt, n)
			if err != nil {
				t.Fatal(err)
			}
			written := func(what string, run func() (int, error)) (got, version int) {
				if err := dev.Write(send, in); err != nil {
					t.Fatal(err)
				}
				if err := dev.Write(recv, make([]byte, len(in))); err != nil {
					t.Fatal(err)
				}
				version, err := run()
				if err != nil {
					t.Fatalf("%v n=%d: %s: %v", dt, n, what, err)
				}
				out := make([]byte, len(in))
				if err := dev.Read(out, recv); err != nil {
					t.Fatal(err)
				}
				es := dt.Size()
				got = 0
				for got < n && string(out[got*es:(got+1)*es]) == string(in[got*es:(got+1)*es]) {
					got++
				}
				for i := got * es; i < len(out); i++ {
					if out[i] != 0 {
						t.Fatalf("%v n=%d: %s: element %d is neither the input nor left as it was", dt, n, what, i/es)
					}
				}
				return got, version
			}
			got, version := written("ncclAllReduce(ncclAvg)", func() (int, error) { return nccl.RawAllReduce(c, send, recv, comm.Avg) })
			want := n
			if dt.IsFloat() && version < 22907 {
				want = ncclfake.OneRankAvgCovers(n, dt.Size())
			}
			if got != want {
				t.Errorf("NCCL %d, %v n=%d: ncclAllReduce(ncclAvg) on one rank wrote the first %d elements, the fake's model says %d", version, dt, n, got, want)
			}
			if dt.IsFloat() { // comm's Avg is for floats only: it refuses integers
				got, _ := written("Comm.AllReduce(Avg)", func() (int, error) { return 0, c.AllReduce(ctx, send, recv, comm.Avg) })
				if got != n {
					t.Errorf("NCCL %d, %v n=%d: Comm.AllReduce(Avg) on one rank wrote the first %d elements of %d", version, dt, n, got, n)
				}
			}
			dev.Free(send)
			dev.Free(recv)
		}
	}
}

// oneRankInput is n elements of dt, each finite, not zero and not
// subnormal, so that x×1 is x and a zero byte pattern is no element.
func oneRankInput(dt comm.DType, n int) []byte {
	le := binary.LittleEndian
	b := make([]byte, n*dt.Size())
	for i := range n {
		switch dt.Size() {
		case 8:
			le.PutUint64(b[8*i:], 0x3ff0000000000000+uint64(i)*0x1000001)
		case 4:
			le.PutUint32(b[4*i:], 0x3f800000+uint32(i%(1<<20)))
		case 2:
			le.PutUint16(b[2*i:], 0x3c00+uint16(i%256))
		}
	}
	return b
}
