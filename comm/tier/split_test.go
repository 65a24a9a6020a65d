package tier_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

func TestSplitMembersExtremeKeys(t *testing.T) {
	for _, tc := range []struct {
		colors, keys []int
		color        int
		want         []int
	}{
		// Subtraction (a.key - b.key) overflows on these; comparison does not.
		{[]int{0, 0, 0, 0}, []int{0, math.MinInt, math.MaxInt, -5}, 0, []int{1, 3, 0, 2}},
		{[]int{1, 1, 1, 1}, []int{math.MaxInt, math.MaxInt, math.MinInt, math.MinInt}, 1, []int{2, 3, 0, 1}},
		{[]int{0, 1, 0, 1}, []int{math.MaxInt, math.MinInt, math.MinInt, math.MaxInt}, 0, []int{2, 0}},
		{[]int{0, 1, 0, 1}, []int{7, 7, 7, 7}, 1, []int{1, 3}},
		{[]int{comm.NoColor, 2, comm.NoColor}, []int{0, 0, 0}, comm.NoColor, nil},
	} {
		got := tier.SplitMembers(tc.colors, tc.keys, tc.color)
		if !slices.Equal(got, tc.want) {
			t.Errorf("SplitMembers(%v, %v, %d) = %v, want %v", tc.colors, tc.keys, tc.color, got, tc.want)
		}
		groups := tier.SplitGroups(tc.colors, tc.keys)
		if tc.color != comm.NoColor && !slices.Equal(groups[tc.color], tc.want) {
			t.Errorf("SplitGroups(%v, %v)[%d] = %v, want %v", tc.colors, tc.keys, tc.color, groups[tc.color], tc.want)
		}
		if _, ok := groups[comm.NoColor]; ok {
			t.Errorf("SplitGroups(%v, %v) has a NoColor group", tc.colors, tc.keys)
		}
	}
}

func TestFailCodeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code tier.FailCode
		is   []error
	}{
		{&comm.PeerError{Peer: 3, Err: errors.New("killed")}, tier.FailPeer, []error{comm.ErrPeerFailed}},
		{&comm.MismatchError{Peer: 1}, tier.FailMismatch, []error{comm.ErrMismatch}},
		{tier.ContextError(fmt.Errorf("waiting for rank 1: %w", context.DeadlineExceeded)), tier.FailTimeout, []error{comm.ErrTimeout}},
		{comm.ErrCanceled, tier.FailCanceled, []error{comm.ErrCanceled}},
		{&comm.ArgError{Kind: comm.KindAllReduce, Arg: "recv", Problem: "short"}, tier.FailInvalid, nil},
		{errors.New("disk full"), tier.FailOther, nil},
		// A failure that aborted a communicator keeps its kind.
		{&comm.AbortedError{Cause: &comm.PeerError{Peer: 2, Err: errors.New("gone")}}, tier.FailPeer, []error{comm.ErrPeerFailed}},
	} {
		code := tier.FailCodeOf(tc.err)
		if code != tc.code {
			t.Errorf("FailCodeOf(%v) = %d, want %d", tc.err, code, tc.code)
		}
		re := code.Remote(5, tc.err.Error())
		if re.Peer != 5 || re.Reason != tc.err.Error() || !errors.Is(re, comm.ErrPeerAbandoned) {
			t.Errorf("Remote: %+v", re)
		}
		for _, target := range []error{comm.ErrPeerFailed, comm.ErrMismatch, comm.ErrTimeout, comm.ErrCanceled} {
			if want := slices.Contains(tc.is, target); errors.Is(re, target) != want {
				t.Errorf("the peer's error for %v: errors.Is(%v) = %v, want %v", tc.err, target, !want, want)
			}
		}
		if got := tier.FailCodeOf(re); len(tc.is) > 0 && got != code {
			t.Errorf("a relayed %v classifies as %d, want %d (the kind survives every hop)", tc.err, got, code)
		}
	}
}
