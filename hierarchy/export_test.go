package hierarchy

// setLeadShardOnly is a test hook: when on, the large AllReduce reduces
// only the lead's shard across nodes, as the reference stack's nexar-nccl
// did. The conformance suite must catch it.
func (h *Comm) setLeadShardOnly(on bool) { h.leadShardOnly = on }
