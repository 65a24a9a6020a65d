package netmesh

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

var testJobKey = []byte("0123456789abcdef-test-job-key")

func TestJobCADeterministic(t *testing.T) {
	a, err := newJobCA(testJobKey, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newJobCA(bytes.Clone(testJobKey), "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.der, b.der) {
		t.Fatal("the same key and job id gave different CA certificates")
	}
	other, err := newJobCA([]byte("another key, sixteen bytes+"), "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.der, other.der) {
		t.Fatal("different keys gave the same CA certificate")
	}
	otherJob, err := newJobCA(testJobKey, "job-2")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.key, otherJob.key) {
		t.Fatal("different job ids gave the same CA key")
	}
	if !a.cert.IsCA || !strings.Contains(a.cert.Subject.CommonName, "job-1") {
		t.Fatalf("CA subject %q, IsCA %v", a.cert.Subject, a.cert.IsCA)
	}
	if _, err := newJobCA(testJobKey[:15], "job-1"); err == nil {
		t.Fatal("a 15-byte key was accepted")
	}
}

func TestLeafBindsRank(t *testing.T) {
	ca, err := newJobCA(testJobKey, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.issueLeaf(5)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaf.Leaf.URIs[0].String(); got != "hiercomm://job-1/rank/5" {
		t.Fatalf("leaf URI %q", got)
	}
	rank, err := ca.verifyPeer(leaf.Certificate)
	if err != nil || rank != 5 {
		t.Fatalf("verifyPeer = %d, %v", rank, err)
	}
	leaf2, _ := ca.issueLeaf(5)
	if bytes.Equal(leaf.Certificate[0], leaf2.Certificate[0]) {
		t.Fatal("two leaves for the same rank are identical: the leaf key is not fresh")
	}
}

// side is one end of a TLS handshake in a test.
type side struct {
	key   []byte
	jobID string
	rank  int
}

// handshake runs a TLS 1.3 handshake over loopback TCP between a
// dialer expecting rank want at the other end and an acceptor that accepts
// the ranks for which acceptRank holds. It returns the rank the acceptor
// learned and both sides' errors.
func handshake(t *testing.T, dialer, acceptor side, want int, acceptRank func(int) bool) (learned int, dialErr, acceptErr error) {
	t.Helper()
	dca, err := newJobCA(dialer.key, dialer.jobID)
	if err != nil {
		t.Fatal(err)
	}
	aca, err := newJobCA(acceptor.key, acceptor.jobID)
	if err != nil {
		t.Fatal(err)
	}
	dleaf, err := dca.issueLeaf(dialer.rank)
	if err != nil {
		t.Fatal(err)
	}
	aleaf, err := aca.issueLeaf(acceptor.rank)
	if err != nil {
		t.Fatal(err)
	}
	// A loopback TCP pair, not net.Pipe: a refusing side writes its alert
	// while the other may be writing too, which an unbuffered pipe deadlocks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client := tls.Client(c1, dca.clientTLS(dleaf, want, nil))
	server := tls.Server(c2, aca.serverTLS(aleaf, func(r int) error {
		if !acceptRank(r) {
			return fmt.Errorf("rank %d may not dial rank %d", r, acceptor.rank)
		}
		return nil
	}, nil))
	errc := make(chan error, 1)
	go func() {
		err := server.HandshakeContext(ctx)
		if err == nil {
			// TLS 1.3: the server's handshake may end before the client
			// has checked the server's certificate; a read sees the
			// client's verdict.
			_, err = server.Read(make([]byte, 1))
		}
		c2.Close()
		errc <- err
	}()
	dialErr = client.HandshakeContext(ctx)
	if dialErr == nil {
		_, dialErr = client.Write([]byte{1})
	}
	if dialErr == nil {
		// The acceptor closes after reading our byte (end of stream) or
		// sends an alert if it refused our certificate.
		if _, dialErr = client.Read(make([]byte, 1)); dialErr == io.EOF {
			dialErr = nil
		}
	}
	c1.Close()
	acceptErr = <-errc
	learned = -1
	if acceptErr == nil {
		learned, acceptErr = peerRank(server.ConnectionState())
	}
	return learned, dialErr, acceptErr
}

func TestJobCAHandshake(t *testing.T) {
	otherKey := []byte("fedcba9876543210-other-job-key")
	higher := func(r int) bool { return r > 1 }
	tests := []struct {
		name             string
		dialer, acceptor side
		want             int
		accept           func(int) bool
		dialOK, acceptOK bool
		errHas           string // in the error of the side that refuses first
	}{
		{"same key", side{testJobKey, "j", 3}, side{testJobKey, "j", 1}, 1, higher, true, true, ""},
		{"different key", side{otherKey, "j", 3}, side{testJobKey, "j", 1}, 1, higher, false, false, "different job key"},
		{"different job id", side{testJobKey, "j2", 3}, side{testJobKey, "j", 1}, 1, higher, false, false, `claims job "j"`},
		{"acceptor is not the rank dialed", side{testJobKey, "j", 3}, side{testJobKey, "j", 1}, 2, higher, false, false, "certificate for rank 1"},
		{"dialer may not dial", side{testJobKey, "j", 0}, side{testJobKey, "j", 1}, 1, higher, false, false, "rank 0 may not dial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			learned, dialErr, acceptErr := handshake(t, tt.dialer, tt.acceptor, tt.want, tt.accept)
			if (dialErr == nil) != tt.dialOK || (acceptErr == nil) != tt.acceptOK {
				t.Fatalf("dialer: %v; acceptor: %v", dialErr, acceptErr)
			}
			if tt.dialOK && learned != tt.dialer.rank {
				t.Fatalf("acceptor learned rank %d, want %d", learned, tt.dialer.rank)
			}
			if tt.errHas != "" {
				all := fmt.Sprint(dialErr, " | ", acceptErr)
				if !strings.Contains(all, tt.errHas) {
					t.Fatalf("errors do not say %q: %s", tt.errHas, all)
				}
			}
		})
	}
}

func TestVerifyPeerRefusesForgedRank(t *testing.T) {
	ca, _ := newJobCA(testJobKey, "j")
	evil, _ := newJobCA([]byte("attacker key, not the job's one"), "j")
	forged, _ := evil.issueLeaf(0) // claims rank 0 of job j
	_, err := ca.verifyPeer(forged.Certificate)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "claims rank 0") {
		t.Fatalf("verifyPeer(forged) = %v", err)
	}
	if _, err := ca.verifyPeer(nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("verifyPeer(nil) = %v", err)
	}
	if _, err := ca.verifyPeer([][]byte{[]byte("junk")}); !errors.Is(err, ErrAuth) {
		t.Fatalf("verifyPeer(junk) = %v", err)
	}
}

func TestTCPAuthKeyDistinct(t *testing.T) {
	k1, err := tcpAuthKey(testJobKey, "j")
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := tcpAuthKey(testJobKey, "k")
	ca, _ := newJobCA(testJobKey, "j")
	if bytes.Equal(k1, k2) || bytes.Equal(k1, ca.key.Seed()) {
		t.Fatal("derived keys are not distinct")
	}
}

func TestValidJobID(t *testing.T) {
	for _, id := range []string{"hiercomm", "12345_3", "train-42.run~a"} {
		if !validJobID(id) {
			t.Errorf("validJobID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "a b", "a/b", "x:1", "ü", strings.Repeat("a", 129)} {
		if validJobID(id) {
			t.Errorf("validJobID(%q) = true", id)
		}
	}
}
