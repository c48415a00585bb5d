package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// tlsPolicy is what sslmode asks for: whether to try TLS, whether it is required, and how to verify.
type tlsPolicy struct {
	try      bool        // send an SSLRequest
	fallback bool        // allow/prefer: go on in plain text when the server has no TLS or the handshake fails
	config   *tls.Config // nil when try is false
}

// newTLSPolicy turns libpq's parameters into a policy:
//
//	disable       no TLS
//	allow/prefer  TLS if the server has it, certificate not checked; plain text otherwise
//	require       TLS, certificate not checked; with sslrootcert, the chain is checked (verify-ca), as libpq
//	verify-ca     TLS, the chain checked against sslrootcert (or the system's roots), not the host name
//	verify-full   TLS, the chain and the host name checked
//
// sslrootcert=system means the system's roots, as in libpq 16 and later.
func newTLSPolicy(s *pgSettings) (tlsPolicy, error) {
	mode := s.ssl.mode
	if mode == "" {
		mode = "prefer" // libpq's default
	}
	if mode == "disable" || s.network == "unix" {
		return tlsPolicy{}, nil // libpq never uses TLS on a Unix socket
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.ssl.sniEnabled && net.ParseIP(s.host) == nil {
		cfg.ServerName = s.host
	}
	if s.ssl.cert != "" {
		pair, err := tls.LoadX509KeyPair(s.ssl.cert, s.ssl.key)
		if err != nil {
			return tlsPolicy{}, fmt.Errorf("sslcert/sslkey: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	var roots *x509.CertPool // nil: the system's roots
	if s.ssl.rootCert != "" && s.ssl.rootCert != "system" {
		pem, err := os.ReadFile(s.ssl.rootCert)
		if err != nil {
			return tlsPolicy{}, fmt.Errorf("sslrootcert: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return tlsPolicy{}, fmt.Errorf("sslrootcert %s holds no PEM certificate", s.ssl.rootCert)
		}
	}
	p := tlsPolicy{try: true, config: cfg}
	switch mode {
	case "allow", "prefer":
		p.fallback = true
		cfg.InsecureSkipVerify = true
	case "require":
		if s.ssl.rootCert == "" {
			cfg.InsecureSkipVerify = true
			break
		}
		verifyChain(cfg, roots, "") // libpq: require with a root certificate verifies like verify-ca
	case "verify-ca":
		verifyChain(cfg, roots, "")
	case "verify-full":
		if !s.ssl.sniEnabled {
			verifyChain(cfg, roots, s.host) // the name is checked, but not sent (sslsni=0)
			break
		}
		cfg.RootCAs = roots
		cfg.ServerName = s.host // also an IP address: Go then checks the certificate's IP SANs
	}
	return p, nil
}

// verifyChain makes cfg check the server's certificate chain against roots, and its name against host
// unless host is "": Go's TLS cannot check a chain without a name, or a name it does not send, so its
// verification is turned off and done here, in VerifyConnection.
func verifyChain(cfg *tls.Config, roots *x509.CertPool, host string) {
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host})
		return err
	}
}

// errNoTLS is a server answering an SSLRequest with 'N': it has no TLS.
var errNoTLS = errors.New("the server does not accept TLS (ssl = off), and sslmode requires it")

// dialer opens pgdriver's connections: it dials, then negotiates TLS as the policy says, so that pgdriver
// (whose own TLS cannot fall back to plain text) always gets a ready connection.
type dialer struct {
	policy  tlsPolicy
	timeout func() time.Duration // pgdriver's DialTimeout, read when dialling
}

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := d.dialPlain(ctx, network, addr)
	if err != nil || !d.policy.try {
		return conn, err
	}
	tconn, err := d.startTLS(ctx, conn)
	switch {
	case err == nil:
		return tconn, nil
	case errors.Is(err, errNoTLS) && d.policy.fallback:
		return conn, nil // the server said 'N' and waits for the startup message on this same connection
	case d.policy.fallback && ctx.Err() == nil:
		// The handshake failed (or the server answered neither S nor N): libpq's prefer starts again
		// without TLS.
		_ = conn.Close()
		return d.dialPlain(ctx, network, addr)
	default:
		_ = conn.Close()
		return nil, err
	}
}

func (d *dialer) dialPlain(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: max(d.timeout(), 0), KeepAlive: 5 * time.Minute} // a timeout <= 0 means none
	return nd.DialContext(ctx, network, addr)
}

// startTLS sends PostgreSQL's SSLRequest on conn and, when the server answers 'S', does the handshake.
// It reads exactly one byte before the handshake, so nothing the server sends in plain text after 'S' can
// be taken as part of the encrypted stream.
func (d *dialer) startTLS(ctx context.Context, conn net.Conn) (net.Conn, error) {
	var deadline time.Time // zero: none
	if t := d.timeout(); t > 0 {
		deadline = time.Now().Add(t)
	}
	if dl, ok := ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
		deadline = dl
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	var req [8]byte
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], 80877103) // the SSLRequest code
	if _, err := conn.Write(req[:]); err != nil {
		return nil, fmt.Errorf("TLS: send SSLRequest: %w", err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(conn, answer[:]); err != nil {
		return nil, fmt.Errorf("TLS: read the answer to SSLRequest: %w", err)
	}
	switch answer[0] {
	case 'S':
	case 'N':
		if err := conn.SetDeadline(time.Time{}); err != nil {
			return nil, err
		}
		return nil, errNoTLS
	default:
		return nil, fmt.Errorf("TLS: the server answered SSLRequest with %q", answer[0])
	}
	tconn := tls.Client(conn, d.policy.config)
	if err := tconn.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tconn, nil
}
