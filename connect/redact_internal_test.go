package connect

import (
	"net/url"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
)

// FuzzRedactParsed feeds any string to the parsers and checks that a password they would use, whatever
// they read it from, does not survive Redact. Unlike FuzzRedact, it knows no form: it trusts the parsers
// to say where the password is.
func FuzzRedactParsed(f *testing.F) {
	for _, s := range []string{
		"postgres://u:hunter2@h:5432/db?sslmode=verify-full",
		"postgres://u@h/db?password=secret2&sslmode=disable",
		"postgres://u@h/db?pass%77ord=secret3",
		"host=h user=u password='se cret' dbname=db",
		`host=h password=se\ cret`,
		"password = secret4",
		"redis://:pw12@h:6379/0",
		"rediss://user:pw34@h:6380",
		"redis-sentinel://:pw56@h1,h2?master=m&password=pw78",
		"redis-cluster://u:pw90@h1:7000,h2:7001",
		"redis-socket://:pwab@/tmp/redis.sock?db=1",
		"redis://pwcd@h:6379/0",
		"rediss-sentinel://:pwef@h1,h2?master=m&password=pwgh&tls_ca_file=/ca.pem",
		"rediss-cluster://u:pwij@h1:7000,h2:7001",
		" postgres://u:pwkl@h/db?sslmode=verify-full\n",
		"\tredis://:pwmn@h:6379 ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Redact(s)
		var pws []string
		// A lone userinfo in a URL that is not PostgreSQL's: the password as Redis's own client reads it.
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil && !loneUserIsName(u.Scheme) {
			if _, ok := u.User.Password(); !ok {
				pws = append(pws, u.User.Username())
			}
		}
		if st, err := parseDSN(strings.TrimSpace(s)); err == nil {
			pws = append(pws, st.password)
		}
		if opt, err := parseRedis(strings.TrimSpace(s), func(string) string { return "" }); err == nil {
			switch o := opt.(type) {
			case asynq.RedisClientOpt:
				pws = append(pws, o.Password)
			case asynq.RedisFailoverClientOpt:
				pws = append(pws, o.Password, o.SentinelPassword)
			case asynq.RedisClusterClientOpt:
				pws = append(pws, o.Password)
			}
		}
		for _, pw := range pws {
			// The password as the string holds it: as is, or percent-encoded in a URL.
			for _, written := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw)} {
				// A password that the rest of the string holds anyway, or that the mask holds, proves nothing.
				if len(written) < 3 || strings.Count(s, written) != 1 || strings.Contains(mask, written) {
					continue
				}
				if strings.Contains(out, written) {
					t.Fatalf("password %q survives redaction:\n in: %q\nout: %q", written, s, out)
				}
			}
		}
	})
}
