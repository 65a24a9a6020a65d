package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// onRanks runs fn on every rank of an in-memory world of n ranks, one
// goroutine per rank as one process per rank would be, and returns the
// first error. A real job does the same in each process with the
// communicator hiercomm.Init returns.
func onRanks(n int, fn func(ctx context.Context, c comm.Communicator) error) error {
	ranks, err := nexar.NewMemoryWorld(n, nexar.Options{})
	if err != nil {
		return err
	}
	defer nexar.CloseAll(ranks)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Go(func() { errs[r] = fn(context.Background(), c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// show prints err, or else the lines.
func show(err error, lines []string) {
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// ZeRO-style sharding with the reducing family: each rank reduces only its
// shard of the gradients (ReduceScatter, half the traffic of an
// AllReduce), updates that shard of the parameters, and AllGather puts the
// shards back together on every rank.
func ExampleComm_ReduceScatter() {
	const shard = 2
	params := make([][]float32, 3)
	err := onRanks(3, func(ctx context.Context, c comm.Communicator) error {
		r, p := c.Rank(), c.Size()
		grads := make([]float32, p*shard) // rank r's gradient for every parameter
		for i := range grads {
			grads[i] = float32(r + 1)
		}
		mine := make([]float32, shard) // the sum over ranks of shard r
		if err := c.ReduceScatter(ctx, comm.Host(grads), comm.Host(mine), comm.Sum); err != nil {
			return err
		}
		for i := range mine {
			mine[i] = float32(10*r) - 0.5*mine[i] // this rank's shard of the update
		}
		params[r] = make([]float32, p*shard)
		return c.AllGather(ctx, comm.Host(mine), comm.Host(params[r]))
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(params[0])
	fmt.Println(params[2])
	// Output:
	// [-3 -3 7 7 17 17]
	// [-3 -3 7 7 17 17]
}

// The rooted family: the root broadcasts a value, scatters one block to
// each rank, gathers one back from each, and reduces to itself.
func ExampleComm_Broadcast() {
	const root = 1
	var lines [4]string
	err := onRanks(4, func(ctx context.Context, c comm.Communicator) error {
		r, p := c.Rank(), c.Size()
		lr := []float64{0}
		if r == root {
			lr[0] = 0.01
		}
		if err := c.Broadcast(ctx, comm.Host(lr), root); err != nil {
			return err
		}
		var all, gathered comm.Buffer // only the root's are used
		got := make([]int32, p)
		if r == root {
			all = comm.Host([]int32{100, 101, 102, 103})
			gathered = comm.Host(got)
		}
		block := make([]int32, 1)
		if err := c.Scatter(ctx, all, comm.Host(block), root); err != nil {
			return err
		}
		block[0] *= 2
		if err := c.Gather(ctx, comm.Host(block), gathered, root); err != nil {
			return err
		}
		loss := []float64{float64(r)}
		total := make([]float64, 1)
		if err := c.Reduce(ctx, comm.Host(loss), comm.Host(total), comm.Sum, root); err != nil {
			return err
		}
		lines[r] = fmt.Sprintf("rank %d: lr %v, block %v", r, lr[0], block[0])
		if r == root {
			lines[r] += fmt.Sprintf(", gathered %v, total loss %v", got, total[0])
		}
		return nil
	})
	show(err, lines[:])
	// Output:
	// rank 0: lr 0.01, block 200
	// rank 1: lr 0.01, block 202, gathered [200 202 204 206], total loss 6
	// rank 2: lr 0.01, block 204
	// rank 3: lr 0.01, block 206
}

// AllToAll sends block j of every rank's buffer to rank j (the
// mixture-of-experts token exchange); AllToAllV does the same with a
// different number of elements per pair.
func ExampleComm_AllToAll() {
	var got, gotV [3][]int64
	err := onRanks(3, func(ctx context.Context, c comm.Communicator) error {
		r, p := c.Rank(), c.Size()
		send := make([]int64, p) // block j (one element) is for rank j
		for j := range send {
			send[j] = int64(10*r + j)
		}
		recv := make([]int64, p)
		if err := c.AllToAll(ctx, comm.Host(send), comm.Host(recv)); err != nil {
			return err
		}
		// Rank r sends j+1 copies of r to rank j, and so receives r+1
		// elements from every rank.
		var sendV []int64
		sendCounts, recvCounts := make([]int, p), make([]int, p)
		for j := range p {
			for range j + 1 {
				sendV = append(sendV, int64(r))
			}
			sendCounts[j], recvCounts[j] = j+1, r+1
		}
		recvV := make([]int64, p*(r+1))
		if err := c.AllToAllV(ctx, comm.Host(sendV), sendCounts, comm.Host(recvV), recvCounts); err != nil {
			return err
		}
		got[r], gotV[r] = recv, recvV
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for r := range got {
		fmt.Println(r, got[r], gotV[r])
	}
	// Output:
	// 0 [0 10 20] [0 1 2]
	// 1 [1 11 21] [0 0 1 1 2 2]
	// 2 [2 12 22] [0 0 0 1 1 1 2 2 2]
}

// Scan and ExScan: with each rank holding some number of items, the
// exclusive prefix sum is where its items start in the concatenation of
// everyone's, and the inclusive one where they end.
func ExampleComm_Scan() {
	var lines [4]string
	err := onRanks(4, func(ctx context.Context, c comm.Communicator) error {
		r := c.Rank()
		n := []int64{int64(3 + r)} // rank r has 3+r items
		start, end := make([]int64, 1), make([]int64, 1)
		if err := c.ExScan(ctx, comm.Host(n), comm.Host(start), comm.Sum); err != nil {
			return err
		}
		if err := c.Scan(ctx, comm.Host(n), comm.Host(end), comm.Sum); err != nil {
			return err
		}
		lines[r] = fmt.Sprintf("rank %d: items [%d, %d)", r, start[0], end[0])
		return nil
	})
	show(err, lines[:])
	// Output:
	// rank 0: items [0, 3)
	// rank 1: items [3, 7)
	// rank 2: items [7, 12)
	// rank 3: items [12, 18)
}

// Send and Recv, matched by peer and tag: a pipeline passes activations
// from stage to stage. Recv's buffer must match the message's dtype and
// length.
func ExampleComm_Send() {
	var out []float32
	err := onRanks(3, func(ctx context.Context, c comm.Communicator) error {
		r, p := c.Rank(), c.Size()
		act := []float32{1, 2}
		if r > 0 {
			if err := c.Recv(ctx, comm.Host(act), r-1, 0); err != nil {
				return err
			}
		}
		for i := range act {
			act[i] *= 10 // this stage's layer
		}
		if r < p-1 {
			return c.Send(ctx, comm.Host(act), r+1, 0)
		}
		out = act
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out)
	// Output: [1000 2000]
}

// The typed non-blocking forms start an operation and return a *comm.Work:
// start the gradient AllReduce, keep computing, wait later. Every rank
// starts the same collectives in the same order; it may wait in any order.
// Point-to-point calls start the same way (MPI's Isend and Irecv), so two
// ranks can exchange without agreeing who sends first.
func Example_nonBlocking() {
	var lines [2]string
	err := onRanks(2, func(ctx context.Context, c comm.Communicator) error {
		r := c.Rank()
		grads := []float32{float32(r + 1), 10}
		step := []int64{int64(100 + r)}
		ar := comm.StartAllReduce(ctx, c, comm.Host(grads), comm.Host(grads), comm.Avg)
		mx := comm.StartAllReduce(ctx, c, comm.Host(step), comm.Host(step), comm.Max)

		other := 1 - r
		got := make([]int32, 1)
		recv := comm.StartRecv(ctx, c, comm.Host(got), other, 7)
		send := comm.StartSend(ctx, c, comm.Host([]int32{int32(r)}), other, 7)

		// … compute here; the buffers belong to the operations until done …

		for _, w := range []*comm.Work{send, recv, mx, ar} {
			if err := w.Wait(); err != nil {
				return err
			}
		}
		lines[r] = fmt.Sprintf("rank %d: grads %v, step %d, got %d", r, grads, step[0], got[0])
		return nil
	})
	show(err, lines[:])
	// Output:
	// rank 0: grads [1.5 10], step 101, got 1
	// rank 1: grads [1.5 10], step 101, got 0
}

// NewGroup is torch.distributed's new_group(ranks): every rank calls it
// with the same list; the listed ranks get a communicator whose rank i is
// ranks[i], the others nil. Here ranks 3 and 1, in that order, form a
// group and sum their ranks there.
func Example_newGroup() {
	var lines [4]string
	err := onRanks(4, func(ctx context.Context, c comm.Communicator) error {
		g, err := comm.NewGroup(ctx, c, []int{3, 1})
		if err != nil {
			return err
		}
		if g == nil {
			lines[c.Rank()] = fmt.Sprintf("rank %d: not in the group", c.Rank())
			return nil
		}
		defer g.Close()
		x := []int32{int32(c.Rank())}
		if err := g.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
			return err
		}
		lines[c.Rank()] = fmt.Sprintf("rank %d: rank %d of %d in the group, sum %d", c.Rank(), g.Rank(), g.Size(), x[0])
		return nil
	})
	show(err, lines[:])
	// Output:
	// rank 0: not in the group
	// rank 1: rank 1 of 2 in the group, sum 4
	// rank 2: not in the group
	// rank 3: rank 0 of 2 in the group, sum 4
}
