package cluster

// Fabric is an emulated network for a local job (LocalSpec.Fabric): each
// node is a network namespace of its own, reached from the others over
// links the fabric may rate limit. internal/netemu builds one; cluster
// knows it only through this interface. Its methods must be safe for
// concurrent use.
type Fabric interface {
	// Addr is the IP address that rank (node, local) binds and
	// advertises, for gossip and data, or "" if the fabric has no such
	// rank.
	Addr(node, local int) string
	// Do runs fn on an OS thread inside node's network namespace, so
	// that the sockets fn creates belong to the node, and returns fn's
	// error (or why it could not enter the namespace). fn must not start
	// goroutines that create sockets: they run elsewhere.
	Do(node int, fn func() error) error
	// Wrap is the command prefix that runs a program inside node's
	// namespace ("ip netns exec NAME"). The program's environment and
	// open file descriptors must pass through it, and it must exec the
	// program (not fork), so that signals reach it.
	Wrap(node int) []string
}
