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
	"path/filepath"
	"strings"
	"time"
)

// tlsPolicy is what sslmode asks for: whether to try TLS, whether it is required, and how to verify.
type tlsPolicy struct {
	try      bool        // send an SSLRequest
	fallback bool        // allow/prefer: go on in plain text when the server has no TLS or the handshake fails
	config   *tls.Config // nil when try is false
}

// newTLSPolicy turns libpq's parameters into a policy, as libpq does:
//
//	disable       no TLS
//	allow/prefer  TLS if the server has it, plain text otherwise (also after a failed handshake)
//	require       TLS
//	verify-ca     TLS, the chain checked against the root certificate, not the host name
//	verify-full   TLS, the chain and the host name checked
//
// The root certificate is sslrootcert, or else ~/.postgresql/root.crt when that file exists; with one,
// every mode checks the chain (require then works as verify-ca, and prefer falls back to plain text
// when the check fails), and without one verify-ca and verify-full are refused. The system's roots are
// used only with sslrootcert=system (libpq 16), which makes verify-full the default and refuses any
// other sslmode: anyone can get a certificate from a public CA for a host name of their own, so a
// check of the chain alone against the system's roots proves nothing.
func newTLSPolicy(s *pgSettings) (tlsPolicy, error) {
	mode := s.ssl.mode
	if s.ssl.rootCert == "system" {
		if mode == "" {
			mode = "verify-full"
		}
		if mode != "verify-full" {
			return tlsPolicy{}, weakSystemRootsError(mode)
		}
	}
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
	roots, verify, err := rootCertificates(s.ssl.rootCert, mode)
	if err != nil {
		return tlsPolicy{}, err
	}
	p := tlsPolicy{try: true, config: cfg, fallback: mode == "allow" || mode == "prefer"}
	switch {
	case !verify:
		cfg.InsecureSkipVerify = true // allow, prefer or require without a root certificate
	case mode != "verify-full":
		verifyChain(cfg, roots, "") // libpq checks the chain whenever it has a root certificate
	case !s.ssl.sniEnabled:
		verifyChain(cfg, roots, s.host) // the name is checked, but not sent (sslsni=0)
	default:
		cfg.RootCAs = roots
		cfg.ServerName = s.host // also an IP address: Go then checks the certificate's IP SANs
	}
	return p, nil
}

// rootCertificates reads the root certificate as libpq finds it: sslrootcert (a file; "system" is the
// system's roots, returned as a nil pool), or else ~/.postgresql/root.crt if it exists. verify is false
// when there is none, which only modes below verify-ca accept.
func rootCertificates(rootCert, mode string) (roots *x509.CertPool, verify bool, err error) {
	if rootCert == "system" {
		return nil, true, nil
	}
	from := "sslrootcert"
	if rootCert == "" {
		rootCert = defaultRootCert()
		if _, statErr := os.Stat(rootCert); rootCert == "" || statErr != nil {
			if strings.HasPrefix(mode, "verify-") {
				return nil, false, noRootCertError(rootCert, mode)
			}
			return nil, false, nil
		}
		from = "the default root certificate"
	}
	pem, err := os.ReadFile(rootCert)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", from, err)
	}
	roots = x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, false, fmt.Errorf("%s %s holds no PEM certificate", from, rootCert)
	}
	return roots, true, nil
}

// defaultRootCert is libpq's default sslrootcert, ~/.postgresql/root.crt, or "" without a home directory.
func defaultRootCert() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".postgresql", "root.crt")
}

// noRootCertError is verify-ca or verify-full without a root certificate, which libpq refuses too.
func noRootCertError(path, mode string) error {
	where := "there is no home directory for the default ~/.postgresql/root.crt"
	if path != "" {
		where = fmt.Sprintf("the default root certificate file %s does not exist", path)
	}
	return fmt.Errorf("sslmode=%s checks the server's certificate against a root certificate, and %s: "+
		"give sslrootcert=FILE (the CA that signed the server's certificate), use the system's roots with sslrootcert=system and sslmode=verify-full, "+
		"or choose an sslmode that does not check the certificate", mode, where)
}

// weakSystemRootsError is an sslmode other than verify-full with sslrootcert=system, which libpq refuses:
// any host can get a certificate that the system's roots trust.
func weakSystemRootsError(mode string) error {
	return fmt.Errorf("sslmode=%s may not be used with sslrootcert=system (use verify-full, the default with it): "+
		"the system's roots trust certificates anyone can get for a host of their own, so only the host name check makes them safe", mode)
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
