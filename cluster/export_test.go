package cluster

// crash stops gossip without telling anyone, as a killed process would:
// the others' failure detectors must find out. A test hook.
func (c *Cluster) crash() {
	c.view.close()
	c.disp.stop()
	if c.markDown() {
		c.ml.Shutdown()
	}
}
