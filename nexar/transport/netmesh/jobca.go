package netmesh

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Certificates without distributing certificates.
//
// Every rank of a job derives the same certificate authority from the job
// key and the job id alone: HKDF-SHA256 over the key gives an Ed25519 seed,
// the seed the CA's private key, and the CA certificate is self-signed with a
// fixed serial, a fixed validity and a subject that names the job, so every
// rank computes the same bytes. Each rank then makes a fresh Ed25519 key and
// signs its own leaf certificate with that CA; the leaf binds the job id and
// the rank in a URI SAN, hiercomm://<job id>/rank/<r>.
//
// A TLS peer is accepted only if its leaf chains to the job CA, names this
// job, and names the rank that is supposed to be at the other end: a dialer
// checks that rank j answered at rank j's address, an acceptor that the rank
// dialing it is one that should. A process without the job key cannot sign
// a leaf, so it can neither connect nor accept; nothing but the key is
// shared. There are no host names, so hostname verification is replaced by
// this check (InsecureSkipVerify on the client only turns off the former).
//
// The same key also gives, under a different HKDF label, the key of the TCP
// transport's challenge-response (see tcp.go).

// ErrAuth is wrapped by every error about a peer that could not prove it
// belongs to this job, or that refused our proof: a different job key or job
// id, or a rank where another was expected. Retrying does not help.
var ErrAuth = errors.New("nexar: peer authentication failed")

// alpn is the TLS application protocol of the QUIC transport.
const alpn = "hiercomm/1"

// The HKDF labels. Changing one changes every derived key: it is a protocol
// version change.
const (
	hkdfSalt     = "hiercomm job key v1"
	caInfo       = "hiercomm/1 job CA "
	tcpAuthInfo  = "hiercomm/1 tcp auth "
	minJobKeyLen = 16
)

// The validity of the CA and of every leaf: fixed, so that the CA is the
// same bytes on every rank and clock skew between nodes never matters. A
// leaf's key lives only as long as its process.
var (
	certNotBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	certNotAfter  = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// jobCA is the certificate authority of one job, as derived on this rank.
type jobCA struct {
	jobID string
	cert  *x509.Certificate
	der   []byte
	key   ed25519.PrivateKey
	pool  *x509.CertPool
}

// newJobCA derives the job CA from the job key and job id. It is
// deterministic: the same inputs give the same certificate bytes.
func newJobCA(jobKey []byte, jobID string) (*jobCA, error) {
	if len(jobKey) < minJobKeyLen {
		return nil, fmt.Errorf("nexar: job key of %d bytes is too short, need at least %d", len(jobKey), minJobKeyLen)
	}
	seed, err := hkdf.Key(sha256.New, jobKey, []byte(hkdfSalt), caInfo+jobID, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("nexar: derive job CA key: %w", err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{Organization: []string{"hiercomm"}, CommonName: "hiercomm job CA for job " + jobID},
		NotBefore:             certNotBefore,
		NotAfter:              certNotAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	// Ed25519 signatures are deterministic, and every field that
	// CreateCertificate would otherwise randomize is fixed above.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("nexar: create job CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("nexar: parse job CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &jobCA{jobID: jobID, cert: cert, der: der, key: key, pool: pool}, nil
}

// rankURI is the URI SAN that binds a leaf to a rank of a job. Job ids are
// restricted (see validJobID) to characters that need no escaping here.
func rankURI(jobID string, rank int) *url.URL {
	return &url.URL{Scheme: "hiercomm", Host: url.PathEscape(jobID), Path: "/rank/" + strconv.Itoa(rank)}
}

// issueLeaf makes a fresh key for rank and a leaf certificate for it signed
// by the job CA.
func (ca *jobCA) issueLeaf(rank int) (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("nexar: leaf key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("nexar: leaf serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"hiercomm"}, CommonName: fmt.Sprintf("hiercomm rank %d of job %s", rank, ca.jobID)},
		NotBefore:    certNotBefore,
		NotAfter:     certNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{rankURI(ca.jobID, rank)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("nexar: sign leaf for rank %d: %w", rank, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("nexar: parse leaf: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf}, nil
}

// claimedRank reads the job id and rank a leaf names, without judging
// whether the leaf is genuine.
func claimedRank(leaf *x509.Certificate) (jobID string, rank int, err error) {
	if len(leaf.URIs) != 1 || leaf.URIs[0].Scheme != "hiercomm" {
		return "", -1, errors.New("the certificate names no hiercomm rank")
	}
	u := leaf.URIs[0]
	r, ok := strings.CutPrefix(u.Path, "/rank/")
	if !ok {
		return "", -1, fmt.Errorf("the certificate's URI %q names no rank", u)
	}
	rank, err = strconv.Atoi(r)
	if err != nil || rank < 0 {
		return "", -1, fmt.Errorf("the certificate's URI %q names no rank", u)
	}
	jobID, err = url.PathUnescape(u.Host)
	if err != nil {
		return "", -1, fmt.Errorf("the certificate's URI %q names no job", u)
	}
	return jobID, rank, nil
}

// verifyPeer checks the certificates a TLS peer presented and returns the
// rank its leaf names: the leaf must chain to this job's CA and name this
// job. Every error wraps ErrAuth.
func (ca *jobCA) verifyPeer(rawCerts [][]byte) (int, error) {
	if len(rawCerts) == 0 {
		return -1, fmt.Errorf("%w: the peer presented no certificate", ErrAuth)
	}
	leaf, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return -1, fmt.Errorf("%w: the peer's certificate does not parse: %v", ErrAuth, err)
	}
	jobID, rank, claimErr := claimedRank(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		hint := "it was started with a different job key"
		if claimErr == nil && jobID != ca.jobID {
			hint = fmt.Sprintf("it claims job %q, this is job %q", jobID, ca.jobID)
		} else if claimErr == nil {
			hint = fmt.Sprintf("it claims rank %d of this job but was started with a different job key", rank)
		}
		return -1, fmt.Errorf("%w: the peer's certificate is not signed by this job's CA (%s): %v", ErrAuth, hint, err)
	}
	if claimErr != nil {
		return -1, fmt.Errorf("%w: %v", ErrAuth, claimErr)
	}
	if jobID != ca.jobID {
		return -1, fmt.Errorf("%w: the peer's certificate is for job %q, this is job %q", ErrAuth, jobID, ca.jobID)
	}
	return rank, nil
}

// clientTLS is the TLS configuration for dialing rank want. verified, when
// not nil, is told the outcome of the check of the peer's certificate, so
// that the dialer can tell an authentication failure (final) from a peer
// that is not up yet (retried).
func (ca *jobCA) clientTLS(leaf tls.Certificate, want int, verified func(error)) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{alpn},
		Certificates: []tls.Certificate{leaf},
		ServerName:   "hiercomm",
		// No host names: the job CA check below is the verification.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			rank, err := ca.verifyPeer(raw)
			if err == nil && rank != want {
				err = fmt.Errorf("%w: the process at rank %d's address presents a certificate for rank %d: is the address list the same on every rank?", ErrAuth, want, rank)
			}
			if verified != nil {
				verified(err)
			}
			return err
		},
	}
}

// serverTLS is the TLS configuration for accepting ranks. accept decides
// whether a verified rank may dial this one; verified, when not nil, is told
// the outcome of every check.
func (ca *jobCA) serverTLS(leaf tls.Certificate, accept func(rank int) error, verified func(error)) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{alpn},
		Certificates: []tls.Certificate{leaf},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			rank, err := ca.verifyPeer(raw)
			if err == nil {
				if aerr := accept(rank); aerr != nil {
					err = fmt.Errorf("%w: %v", ErrAuth, aerr)
				}
			}
			if verified != nil {
				verified(err)
			}
			return err
		},
	}
}

// peerRank is the rank named by the leaf of a completed, verified handshake.
func peerRank(cs tls.ConnectionState) (int, error) {
	if len(cs.PeerCertificates) == 0 {
		return -1, fmt.Errorf("%w: no peer certificate", ErrAuth)
	}
	_, rank, err := claimedRank(cs.PeerCertificates[0])
	if err != nil {
		return -1, fmt.Errorf("%w: %v", ErrAuth, err)
	}
	return rank, nil
}

// tcpAuthKey is the HMAC key of the TCP transport's challenge-response,
// derived from the job key under its own label so that it reveals nothing
// about the CA key.
func tcpAuthKey(jobKey []byte, jobID string) ([]byte, error) {
	if len(jobKey) < minJobKeyLen {
		return nil, fmt.Errorf("nexar: job key of %d bytes is too short, need at least %d", len(jobKey), minJobKeyLen)
	}
	return hkdf.Key(sha256.New, jobKey, []byte(hkdfSalt), tcpAuthInfo+jobID, sha256.Size)
}

// validJobID reports whether id can be bound into certificates as is:
// letters, digits, '.', '_', '-' and '~', at most 128 of them.
func validJobID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-', c == '~':
		default:
			return false
		}
	}
	return true
}
