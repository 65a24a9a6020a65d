package nccl

// FakeEvents counts the events alive in the fake driver behind d, and how
// many were ever created, for the external tests.
func FakeEvents(d *Device) (live, created int) {
	w := d.lib.drv.(fakeDriver).w
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events), w.eventsCreated
}
