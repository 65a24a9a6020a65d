package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// seedStatus is what Join knows about one configured seed.
type seedStatus struct {
	seed      string
	self      bool  // some address of it is this process
	others    int   // addresses of it that are not this process, last resolved
	joined    bool  // a join through it succeeded
	handshake bool  // a connection was made but the exchange failed (key or job id?)
	lastErr   error // the last failure
}

// contactSeeds resolves the seeds and joins through every address that is
// not this process's. joined reports whether some join succeeded; err is
// set, with ErrSeedUnreachable, only when a seed cannot be routed to from
// this interface.
func (c *Cluster) contactSeeds(ctx context.Context, seeds []*seedStatus) (joined bool, err *JoinError) {
	self := c.tr.addr()
	var targets []string
	owner := make(map[string]*seedStatus)
	for _, s := range seeds {
		host, port, _ := net.SplitHostPort(s.seed) // validated
		var ips []net.IP
		if ip := net.ParseIP(host); ip != nil {
			ips = []net.IP{ip}
		} else {
			addrs, rerr := net.DefaultResolver.LookupIPAddr(ctx, host)
			if rerr != nil {
				s.lastErr = fmt.Errorf("resolving %s: %w", host, rerr)
				continue
			}
			// A dual-stack name: only the addresses of this
			// process's family can be reached from its socket.
			for _, a := range addrs {
				if (a.IP.To4() != nil) == (c.tr.ip.To4() != nil) {
					ips = append(ips, a.IP)
				}
			}
			if len(ips) == 0 {
				s.lastErr = fmt.Errorf("%s resolves to no address of this process's family (it gossips on %s)", host, c.tr.ip)
				continue
			}
		}
		s.others = 0
		for _, ip := range ips {
			a := net.JoinHostPort(ip.String(), port)
			if a == self {
				s.self = true
				continue
			}
			s.others++
			if _, dup := owner[a]; !dup {
				owner[a] = s
				targets = append(targets, a)
			}
		}
	}
	if len(targets) == 0 {
		return false, nil // this process is the seed, or no name resolved yet
	}
	result := make(chan error, 1)
	go func() {
		_, err := c.ml.Join(targets)
		result <- err
	}()
	var jerr error
	select {
	case jerr = <-result:
	case <-ctx.Done():
		return false, nil // the caller reports the timeout
	}
	text := ""
	if jerr != nil {
		text = jerr.Error()
	}
	for _, a := range targets {
		s := owner[a]
		// memberlist reports no failure at all once one address worked.
		if jerr == nil || !strings.Contains(text, "failed to join "+a+": ") {
			s.joined, s.handshake, s.lastErr = true, false, nil
			joined = true
			continue
		}
		why := joinFailure(text, a)
		dial, dialed := c.tr.lastDial(a)
		switch {
		case dialed && dial.err != nil && unroutable(dial.err):
			return false, &JoinError{Err: ErrSeedUnreachable, Cause: dial.err,
				msg: fmt.Sprintf("cannot reach seed %s (%s) from %s, this process's gossip address: %v: the interface this process gossips on has no route to the seed; pick another with HIERCOMM_SOCKET_IFNAME (or set HIERCOMM_ADDR)",
					a, s.seed, self, dial.err)}
		case dialed && dial.err != nil:
			s.lastErr = dial.err
		case dialed:
			// Connected, then the exchange failed: the peer could not
			// decrypt our state and hung up, or we could not decrypt
			// its answer.
			s.handshake = true
			s.lastErr = fmt.Errorf("connected to %s, but the exchange failed: %s", a, why)
		default:
			s.lastErr = errors.New(why)
		}
	}
	return joined, nil
}

// joinFailure extracts the reason memberlist gave for addr from its
// combined error text.
func joinFailure(text, addr string) string {
	_, rest, ok := strings.Cut(text, "failed to join "+addr+": ")
	if !ok {
		return text
	}
	if i := strings.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	return strings.TrimSpace(rest)
}

// unroutable reports whether a dial error says that this host cannot route
// to the address from the bound local IP: waiting does not help. (Linux
// refuses a connection from a loopback address to another host with
// EINVAL; an IPv4 socket cannot reach an IPv6 seed at all.)
func unroutable(err error) bool {
	var ae *net.AddrError
	return errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EINVAL) || errors.As(err, &ae)
}
