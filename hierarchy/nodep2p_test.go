package hierarchy

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
)

// TestNodeP2PViaWorld: with Config.NodeP2PViaWorld, a Send and Recv
// between the two ranks of node 0 go through the world part (its Start
// sees them, with the ranks' own numbers), and without it through the
// intra part (the world part sees none). Between nodes the world part
// carries them either way. Messages with one tag arrive in order.
// NodeP2PViaWorldWhenCrowded takes the world's route where
// Cost.RanksPerCore exceeds 1, and only there.
func TestNodeP2PViaWorld(t *testing.T) {
	const N, G, n = 2, 2, 3
	for _, tc := range []struct {
		name string
		cfg  Config
		via  bool
	}{
		{"intra", Config{}, false},
		{"world", Config{NodeP2PViaWorld: true}, true},
		{"crowded", Config{NodeP2PViaWorldWhenCrowded: true, Cost: schedule.Hierarchy{RanksPerCore: 2}}, true},
		{"a core each", Config{NodeP2PViaWorldWhenCrowded: true, Cost: schedule.Hierarchy{RanksPerCore: 1}}, false},
	} {
		via := tc.via
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			hs, worlds, _ := countedHierarchy(ctx, t, N, G, tc.cfg)
			if hs[0].NodeP2PViaWorld() != via {
				t.Errorf("NodeP2PViaWorld() = %t, want %t", hs[0].NodeP2PViaWorld(), via)
			}
			if got := hs[0].String(); strings.Contains(got, "via the world part") != via {
				t.Errorf("String() = %q: NodeP2PViaWorld %t should show", got, via)
			}
			// Rank 0 sends 2 messages to its node-mate 1, and 1 to rank 2
			// on the other node; 1 and 2 receive them.
			errs := make([]error, N*G)
			got := make([][]int32, N*G)
			var wg sync.WaitGroup
			wg.Go(func() {
				for k := range 2 {
					if errs[0] = hs[0].Send(ctx, comm.Host([]int32{int32(10 * k), 1, 2}), 1, 7); errs[0] != nil {
						return
					}
				}
				errs[0] = hs[0].Send(ctx, comm.Host([]int32{5, 6, 7}), 2, 7)
			})
			for _, r := range []int{1, 2} {
				wg.Go(func() {
					msgs := 1
					if r == 1 {
						msgs = 2
					}
					for range msgs {
						b := make([]int32, n)
						if errs[r] = hs[r].Recv(ctx, comm.Host(b), 0, 7); errs[r] != nil {
							return
						}
						got[r] = append(got[r], b...)
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if want := []int32{0, 1, 2, 10, 1, 2}; !slices.Equal(got[1], want) {
				t.Errorf("rank 1 received %v, want %v (in send order)", got[1], want)
			}
			if want := []int32{5, 6, 7}; !slices.Equal(got[2], want) {
				t.Errorf("rank 2 received %v, want %v", got[2], want)
			}
			worlds[0].mu.Lock()
			sent, sendPeers := worlds[0].kinds[comm.KindSend], slices.Clone(worlds[0].peers)
			worlds[0].mu.Unlock()
			worlds[1].mu.Lock()
			recvPeers := slices.Clone(worlds[1].peers)
			worlds[1].mu.Unlock()
			wantSends, wantRecvs := []int{2}, []int(nil) // only the message to the other node
			if via {
				wantSends, wantRecvs = []int{1, 1, 2}, []int{0, 0}
			}
			if !slices.Equal(sendPeers, wantSends) || sent != 4*n*len(wantSends) || !slices.Equal(recvPeers, wantRecvs) {
				t.Errorf("the world part carried Sends to %v (%d bytes) from rank 0 and Recvs from %v on rank 1, want %v, %d bytes and %v",
					sendPeers, sent, recvPeers, wantSends, 4*n*len(wantSends), wantRecvs)
			}
		})
	}
}

// TestBuildAgreesOnNodeP2P: ranks given different NodeP2PViaWorld would
// send where their node-mates do not receive; Build fails on every rank
// with an error that names the field.
func TestBuildAgreesOnNodeP2P(t *testing.T) {
	var cfgs [4]Config
	cfgs[1].NodeP2PViaWorld = true
	_, errs := built2x2(t, cfgs)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "NodeP2PViaWorld") {
			t.Errorf("rank %d: Build = %v, want an error that names NodeP2PViaWorld", r, err)
		}
	}
	cfgs = [4]Config{}
	cfgs[2].NodeP2PViaWorldWhenCrowded = true
	_, errs = built2x2(t, cfgs)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "NodeP2PViaWorldWhenCrowded") {
			t.Errorf("rank %d: Build = %v, want an error that names NodeP2PViaWorldWhenCrowded", r, err)
		}
	}
	// The same rule on every rank, each host's own crowding: the most
	// crowded host's decides for all, so every rank takes one route.
	for r := range cfgs {
		cfgs[r] = Config{NodeP2PViaWorldWhenCrowded: true, Cost: schedule.Hierarchy{RanksPerCore: 1}}
	}
	cfgs[3].Cost.RanksPerCore = 1.5
	hs, errs := built2x2(t, cfgs)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Build: %v", r, err)
		}
		if !hs[r].NodeP2PViaWorld() {
			t.Errorf("rank %d: its node-mates' Send and Recv via the intra part, though rank 3's host is crowded; want every rank via the world", r)
		}
	}
}
