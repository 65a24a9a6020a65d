// Package netemu builds an emulated multi-node network on this host out of
// Linux network namespaces, veth pairs, a bridge and tbf rate limiters, so
// that a local job (cluster.StartLocal, `hiercomm run --link-rate`) meets
// the bottleneck of a real cluster: traffic between nodes crosses rate
// limited links, traffic between the ranks of one node does not.
//
// Layout of a Fabric named hcnet-<pid>-<k> (pid: the creating process):
//
//	hcnet-<pid>-<k>-sw   the switch: bridge sw0, one port n<n>r<l> per NIC
//	hcnet-<pid>-<k>-n<n> node n: lo and its NICs nic0, nic1, ...
//
// Every NIC is a veth pair, nic<l> in the node's namespace and n<n>r<l> on
// the switch's bridge; with a rate, both ends get a tbf qdisc at that rate
// on egress, so a NIC's upload and its download are each limited. Rank
// (node n, local l) has the address 10.0.l.(n+1) (so at most 254 nodes and
// 256 ranks per node); all NICs share one layer-2 segment and 10.0.0.0/16.
//
// With one NIC per rank (the default: rail-optimized, like GPU clusters
// with one NIC per GPU), 10.0.l.(n+1) sits on node n's nic<l>, and
// traffic leaves by the NIC of the address it is sent from: a policy rule
// "from 10.0.l.(n+1) lookup table 100+l" routes 10.0.0.0/16 out of nic<l>.
// Sockets that bind no address get the main table, which routes
// 10.0.l.0/24 out of nic<l> (rail l to rail l), anything else in the /16
// out of nic0. Since a node has several NICs on one segment, the node
// namespaces answer ARP only on the NIC that holds the address
// (arp_ignore=1), announce the NIC's own address (arp_announce=2), and do
// not filter by reverse path (rp_filter=0: a reply to a rank on another
// rail arrives by a NIC other than the one its route would leave by). With
// one NIC per node (Config.PerNode), every rank's address sits on nic0,
// which its ranks share.
//
// Ranks of one node reach each other's addresses through the node's local
// routing table (lo), which has no limiter. Namespaces are isolated, so
// concurrent fabrics reuse the same addresses and interface names; only
// the namespace names are global, and they are unique per process and
// fabric. Close deletes the namespaces, which removes their veths and the
// bridge with them; Setup also deletes the fabrics of processes that died
// without Close.
//
// Everything here needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the ip
// and tc commands of iproute2; Available says whether they are there.
// netem is not used (it is missing on some kernels this runs on); tbf is.
//
// netemu imports the standard library only; it knows nothing of ranks'
// meaning or of the cluster layer, which takes a Fabric through its own
// small interface (cluster.Fabric).
package netemu
