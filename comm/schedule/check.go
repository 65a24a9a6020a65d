package schedule

import "fmt"

// Check says whether s keeps the promises a runtime relies on and cannot
// see by running it: every step's lane is below Lanes, every After names
// an earlier-or-later step of another lane, at most one lane waits for any
// one lane, its waits are in increasing step order, and Waited marks every
// waited lane. The schedules of this package keep them (their tests call
// Check); a runtime given a schedule from elsewhere can call it first.
func (s Schedule) Check() error {
	if len(s.Waited) < s.Lanes {
		return fmt.Errorf("schedule marks %d lanes as waited or not, of %d", len(s.Waited), s.Lanes)
	}
	waiter := make([]int, s.Lanes)
	last := make([]int, s.Lanes)
	for l := range waiter {
		waiter[l], last[l] = -1, -1
	}
	for i, st := range s.Steps {
		if st.Lane < 0 || st.Lane >= s.Lanes {
			return fmt.Errorf("step %d: lane %d of %d", i, st.Lane, s.Lanes)
		}
		if st.After < 0 {
			continue
		}
		if st.After >= len(s.Steps) {
			return fmt.Errorf("step %d: After %d out of range", i, st.After)
		}
		wl := s.Steps[st.After].Lane
		switch {
		case wl == st.Lane:
			return fmt.Errorf("step %d waits for step %d of its own lane", i, st.After)
		case waiter[wl] >= 0 && waiter[wl] != st.Lane:
			return fmt.Errorf("lanes %d and %d both wait for lane %d", waiter[wl], st.Lane, wl)
		case st.After < last[wl]:
			return fmt.Errorf("step %d waits for step %d, before an earlier wait of its lane", i, st.After)
		case !s.Waited[wl]:
			return fmt.Errorf("lane %d is waited for but not marked Waited", wl)
		}
		waiter[wl], last[wl] = st.Lane, st.After
	}
	for i, st := range s.Steps {
		if st.Free && st.Src.Buf != TempBuf {
			return fmt.Errorf("step %d frees %v, not a temp slot", i, st.Src)
		}
		for _, r := range []Range{st.Src, st.Dst} {
			if r.Buf == TempBuf && (r.Slot < 0 || r.Slot >= len(s.Temps)) {
				return fmt.Errorf("step %d: temp slot %d of %d", i, r.Slot, len(s.Temps))
			}
		}
	}
	return nil
}
