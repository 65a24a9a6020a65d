package shm

// kill is a test hook: from now on this rank behaves like a process that
// died. Its heartbeat stops, it never writes the segment again, and its
// operations in flight end with errKilled; peers notice by the heartbeat,
// within FailureTimeout. Close still releases its resources.
func (c *Comm) kill() { c.killed.Store(true) }
