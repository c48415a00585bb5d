package connect

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pgSettings is what a PostgreSQL connection string says, read from either form.
type pgSettings struct {
	network, addr, host string // host: the name TLS checks (verify-full); "" for a Unix socket
	user, password      string
	database, appName   string
	timeouts            map[string]time.Duration // connect_timeout, dial_timeout, read_timeout, write_timeout, timeout
	ssl                 sslSettings
	params              map[string]any // everything else: session parameters, SET at connect
}

// sslSettings are libpq's TLS parameters.
type sslSettings struct {
	mode                string // disable, allow, prefer, require, verify-ca, verify-full; "" means prefer
	rootCert, cert, key string
	sniEnabled          bool // sslsni: send the host name in the TLS handshake; defaults to true
}

// parseDSN reads a PostgreSQL URL (postgres://user:pass@host:port/db?param=value) or a libpq key=value
// list (host=h port=5432 user=u password='p w' dbname=db sslmode=verify-full). Its errors never quote
// the password; the caller wraps them in an *Error, which shows the string redacted.
func parseDSN(dsn string) (*pgSettings, error) {
	kv, err := dsnPairs(dsn)
	if err != nil {
		return nil, err
	}
	s := &pgSettings{network: "tcp", ssl: sslSettings{sniEnabled: true}, params: map[string]any{}}
	host, port := "localhost", "5432"
	for _, p := range kv {
		k, v := p[0], p[1]
		switch k {
		case "host":
			host = v
		case "port":
			port = v
		case "user":
			s.user = v
		case "password":
			s.password = v
		case "dbname":
			s.database = v
		case "application_name":
			s.appName = v
		case "sslmode":
			s.ssl.mode = v
		case "sslrootcert":
			s.ssl.rootCert = v
		case "sslcert":
			s.ssl.cert = v
		case "sslkey":
			s.ssl.key = v
		case "sslsni":
			s.ssl.sniEnabled = v != "0"
		case "sslcompression":
			// obsolete in libpq (PostgreSQL 14 and later refuse compression): ignored, as libpq does
		case "connect_timeout", "dial_timeout", "read_timeout", "write_timeout", "timeout":
			d, err := parseTimeout(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %w", k, v, err)
			}
			if s.timeouts == nil {
				s.timeouts = map[string]time.Duration{}
			}
			s.timeouts[k] = d
		default:
			if strings.HasPrefix(k, "ssl") || strings.Contains(k, "pass") || k == "hostaddr" || k == "service" ||
				k == "target_session_attrs" || k == "load_balance_hosts" || k == "gssencmode" || k == "requiressl" {
				// A security or routing setting this package would otherwise send as a session parameter
				// (or ignore): say so rather than connect in a way the string did not ask for.
				return nil, fmt.Errorf("parameter %s is not supported", k)
			}
			s.params[k] = v
		}
	}
	switch s.ssl.mode {
	case "", "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
	default:
		return nil, fmt.Errorf("sslmode %q is not one of disable, allow, prefer, require, verify-ca, verify-full", s.ssl.mode)
	}
	if (s.ssl.cert == "") != (s.ssl.key == "") {
		return nil, errors.New("sslcert and sslkey go together: give both or neither")
	}
	if strings.Contains(host, ",") || strings.Contains(port, ",") {
		return nil, errors.New("several hosts are not supported: give one host")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if strings.HasPrefix(host, "/") {
		// A Unix socket directory, as libpq reads it (a path to the socket itself is taken as is). libpq
		// never uses TLS on a Unix socket.
		s.network, s.addr = "unix", host
		if !strings.Contains(host[strings.LastIndexByte(host, '/'):], ".s.PGSQL.") {
			s.addr = strings.TrimSuffix(host, "/") + "/.s.PGSQL." + port
		}
		return s, nil
	}
	if host == "" {
		return nil, errors.New("the host is empty")
	}
	s.host, s.addr = host, net.JoinHostPort(host, port)
	return s, nil
}

// dsnPairs splits either form into key/value pairs, in order (a later one wins).
func dsnPairs(dsn string) ([][2]string, error) {
	if i := schemeEnd(dsn); i > 0 {
		return urlPairs(dsn, dsn[:i-3])
	}
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("it is empty")
	}
	return keyValuePairs(dsn)
}

func urlPairs(dsn, scheme string) ([][2]string, error) {
	if scheme != "postgres" && scheme != "postgresql" {
		return nil, fmt.Errorf("the scheme is %q: want postgres:// or postgresql://", scheme)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, withoutURL(err)
	}
	if u.Opaque != "" || u.Fragment != "" {
		return nil, errors.New("it does not parse as a URL (characters such as @ / ? # : in a password must be percent-encoded)")
	}
	var kv [][2]string
	if h := u.Hostname(); h != "" {
		kv = append(kv, [2]string{"host", h})
	}
	if p := u.Port(); p != "" {
		kv = append(kv, [2]string{"port", p})
	}
	if u.User != nil {
		kv = append(kv, [2]string{"user", u.User.Username()})
		if pw, ok := u.User.Password(); ok {
			kv = append(kv, [2]string{"password", pw})
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		kv = append(kv, [2]string{"dbname", db})
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, errors.New("its query does not parse (a value's '%' must be written %25)")
	}
	// Query parameters override the URL's parts, as in libpq; their own order does not matter.
	for _, k := range sortedKeys(q) {
		vs := q[k]
		kv = append(kv, [2]string{k, vs[len(vs)-1]})
	}
	return kv, nil
}

// keyValuePairs reads libpq's key=value form: values may be single-quoted, with \' and \\ escapes.
func keyValuePairs(s string) ([][2]string, error) {
	var kv [][2]string
	i := 0
	skipSpace := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		skipSpace()
		if i >= len(s) {
			return kv, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		skipSpace()
		if i >= len(s) || s[i] != '=' || key == "" {
			// Not quoting the word: it may be the half of a password with a space.
			return nil, errors.New("it is neither a postgres:// URL nor key=value pairs (a word has no '=': quote a value with spaces in '...')")
		}
		i++ // '='
		skipSpace()
		var v strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) && !closed {
				switch c := s[i]; {
				case c == '\\' && i+1 < len(s):
					v.WriteByte(s[i+1])
					i += 2
				case c == '\'':
					closed = true
					i++
				default:
					v.WriteByte(c)
					i++
				}
			}
			if !closed {
				return nil, fmt.Errorf("the value of %s has no closing quote", truncate(key, 40))
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
				i++
			}
		}
		kv = append(kv, [2]string{key, v.String()})
	}
}

// parseTimeout reads a timeout as pgdriver does: whole seconds, or a Go duration; zero or less means none.
func parseTimeout(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n <= 0 {
			return -1, nil
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("not a number of seconds nor a duration like 5s")
	}
	return d, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func sortedKeys(q url.Values) []string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
