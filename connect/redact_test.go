package connect_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/connect"
)

func TestRedact(t *testing.T) {
	t.Parallel()

	tests := []struct{ in, want string }{
		{"postgres://u:hunter2@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://h:5432/db?sslmode=verify-full", "postgres://h:5432/db?sslmode=verify-full"},
		{"postgres://u:Pa%ZZsecret1@127.0.0.1:1/db", "postgres://u:xxxxx@127.0.0.1:1/db"},
		{"postgres://u:pa/ss?wo#rd@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:p@ss@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u@127.0.0.1:1/db?password=secret2&sslmode=disable", "postgres://u@127.0.0.1:1/db?password=xxxxx&sslmode=disable"},
		{"postgres://u@h/db?sslmode=require&sslpassword=keypass", "postgres://u@h/db?sslmode=require&sslpassword=xxxxx"},
		{"postgres://u@h/db?pass%77ord=secret", "postgres://u@h/db?pass%77ord=xxxxx"},
		{"postgres://u@h/db?p%61ssword=secret#x", "postgres://u@h/db?p%61ssword=xxxxx"},
		// A query's password with an unescaped '#' or '@' (which url.Parse reads as a query's).
		{"postgres://u@h/db?password=se#cret", "postgres://u@h/db?password=xxxxx"},
		{"postgres://u@h:1/db?password=p@ssSECRET", "postgres://u@h:xxxxx"},
		{"host=h user=u password=secret dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password = secret dbname=db", "host=h password = xxxxx dbname=db"},
		{"host=h password='se cret' dbname=db", "host=h password=xxxxx dbname=db"},
		{`host=h password='it\'s a secret' dbname=db`, "host=h password=xxxxx dbname=db"},
		{`host=h password=se\ cret dbname=db`, "host=h password=xxxxx dbname=db"},
		{"host=h password='unclosed secret", "host=h password=xxxxx"},
		{"host=h password=un quoted secret dbname=db", "host=h password=xxxxx dbname=db"},
		{"host=h password=secret   ", "host=h password=xxxxx   "},
		{"redis://:pw@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"rediss://user:pw@h:6380", "rediss://user:xxxxx@h:6380"},
		{"redis-sentinel://:pw@h1:26379,h2:26379?master=m&password=mpw", "redis-sentinel://:xxxxx@h1:26379,h2:26379?master=m&password=xxxxx"},
		{"redis-cluster://u:pw@h1:7000,h2:7001", "redis-cluster://u:xxxxx@h1:7000,h2:7001"},
		{"redis://:pw1@h1:1,redis://:pw2@h2:2", "redis://:xxxxx@h2:2"},
		// A lone userinfo is a user name in a PostgreSQL URL, and a password anywhere else (redis-cli).
		{"redis://secret@h:6379", "redis://xxxxx@h:6379"},
		{"rediss://secret@h:6380/0", "rediss://xxxxx@h:6380/0"},
		{"redis-sentinel://secret@h1,h2?master=m", "redis-sentinel://xxxxx@h1,h2?master=m"},
		{"rediss-cluster://secret@h1:7000,h2:7001", "rediss-cluster://xxxxx@h1:7000,h2:7001"},
		{"redis-socket://secret@/run/redis.sock", "redis-socket://xxxxx@/run/redis.sock"},
		{"secret@h:6379", "xxxxx@h:6379"},
		{"redis://secret@h:6379#x@y", "redis://xxxxx@y"},
		{"redis://a@b:pw@h:6379", "redis://xxxxx@h:6379"},
		{"postgres://a@b:pw@h/db", "postgres://a@b:xxxxx@h/db"},
		// A URL without its scheme is not taken for key=value by an '=' or a space in its userinfo.
		{"//secret@h:6379", "xxxxx@h:6379"},
		{"u:se cret@h:6379", "u:xxxxx@h:6379"},
		// Key=value to the parser, a URL to the eye: the password's ends cannot be told, all is masked.
		{"//se=cret@h:6379", "xxxxx"},
		{"u:se=cret@h:6379 ", "xxxxx "},
		{"u:x=1 password=se@cret", "xxxxx"},
		{"host=h user=u@azure password=p@ss", "host=h user=u@azure password=xxxxx"},
		{"PostgreSQL://u@h/db", "PostgreSQL://u@h/db"},
		{"redis://@h:6379", "redis://@h:6379"},
		// White space around the string is kept and hides nothing.
		{" postgres://u:hunter2@h/db?sslmode=verify-full\n", " postgres://u:xxxxx@h/db?sslmode=verify-full\n"},
		{"\t redis://:pw@h:6379 ", "\t redis://:xxxxx@h:6379 "},
		{"\nredis://secret@h:6379", "\nredis://xxxxx@h:6379"},
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, connect.Redact(tt.in), "in %q", tt.in)
	}
}

// secretForms are connection strings that each hold a secret, in every form a user may write, for the
// tests that feed them through the CLI, the example and the relay.
func secretForms(secret string) []string {
	return []string{
		"postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable",
		"postgres://u:Pa%ZZ" + secret + "@127.0.0.1:1/db",
		"postgres://u:" + secret + "/x@127.0.0.1:1/db",
		"postgres://u@127.0.0.1:1/db?password=" + secret + "&sslmode=disable",
		"postgres://u@127.0.0.1:1/db?sslmode=bogus&password=" + secret,
		"host=127.0.0.1 port=1 user=u password=" + secret + " sslmode=disable",
		"host=127.0.0.1 port=1 user=u password='" + secret + " x' sslmode=disable",
		"host=127.0.0.1 port=1 user=u password='" + secret + "' sslmode=sometimes",
		"mysql://u:" + secret + "@127.0.0.1:1/db",
		// pgx's own parse errors quote a word without '=' and the TLS setting that failed.
		"host=127.0.0.1 port=1 user=u password=Pa " + secret + " sslmode=disable",
		"postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
		"host=127.0.0.1 port=1 user=u password='" + secret + "' sslmode=require sslrootcert=/nonexistent/ca.pem",
		// White space around a URL once made it a key=value list, shown unmasked.
		" postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
		"postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem\n",
		"\tpostgres://u@127.0.0.1:1/db?password=" + secret + "&sslmode=bogus ",
	}
}

func TestPostgresErrorsHideThePassword(t *testing.T) {
	t.Parallel()

	const secret = "s3cretPW"
	for _, driver := range drivers {
		for _, dsn := range secretForms(secret) {
			t.Run(string(driver)+"/"+dsn, func(t *testing.T) {
				t.Parallel()
				db, err := connect.Postgres(context.Background(), dsn, connect.Options{Driver: driver})
				if db != nil {
					_ = db.Close()
				}
				require.Error(t, err)
				for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
					require.NotContains(t, s, secret)
				}
				var cerr *connect.Error
				require.ErrorAs(t, err, &cerr)
				require.Equal(t, "PostgreSQL", cerr.Kind)
				// pgx's errors that hold the string or the configuration (with the password) are not in the chain.
				require.False(t, errors.As(err, new(*pgconn.ParseConfigError)), "a *pgconn.ParseConfigError in %v", err)
				require.False(t, errors.As(err, new(*pgconn.ConnectError)), "a *pgconn.ConnectError in %v", err)
			})
		}
	}
}

func TestRedisErrorsHideThePassword(t *testing.T) {
	t.Parallel()

	const secret = "s3cretPW"
	for _, u := range []string{
		"redis://:Pa%ZZ" + secret + "@h:6379",
		"redis://:" + secret + "@h:6379/notanumber",
		"redis://:" + secret + "/x@h:6379",
		"rediss://u:" + secret + "@h:6379?tls=maybe",
		"redis-sentinel://:" + secret + "@h1,h2",
		"redis-cluster://:" + secret + "@h1:1,,h2:2",
		"memcached://:" + secret + "@h",
		":" + secret + "@h:6379",
		secret + "@h:6379",
		"redis://" + secret + "@h:6379",
		"rediss://" + secret + "@h:6379/0",
		"redis-sentinel://" + secret + "@h1,h2?master=m",
		"redis-cluster://" + secret + "@h1:1,h2:2",
		" redis://:" + secret + "@h:6379/notanumber\n",
		"rediss://:" + secret + "@h:6379?tls_ca_file=/nonexistent/ca.pem",
		"memcached://" + secret + "@h",
	} {
		_, err := connect.Redis(u)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), secret, u)
		require.NotContains(t, fmt.Sprintf("%#v", err), secret, u)
	}
}

// FuzzRedact checks that a password written in any form never survives Redact, and that Redact never
// panics. The password is encoded as each form needs (percent-encoding in a URL, quotes and backslashes
// in key=value) and also written raw, as users do.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"hunter2", "Pa%ZZsecret1", "p@ss", "a/b?c#d", "se cret", `it's`, `back\slash`,
		"with&amp", "pass=word", "xxxxx", "://", "@", ":", "'", "é日本"} {
		f.Add(s, uint8(0))
	}
	for form := range uint8(13) {
		f.Add("hunter2", form)
	}
	f.Fuzz(func(t *testing.T, pw string, form uint8) {
		if pw == "" || !utf8Valid(pw) {
			return
		}
		build := func(p string) string {
			switch form % 13 {
			case 0:
				return "postgres://user:" + url.UserPassword("user", p).String()[len("user:"):] + "@db.example.com:5432/app?sslmode=verify-full"
			case 1:
				return "postgres://user:" + p + "@db.example.com:5432/app?sslmode=verify-full"
			case 2:
				return "postgres://user@db.example.com/app?password=" + url.QueryEscape(p) + "&sslmode=require"
			case 3:
				if strings.ContainsAny(p, "&#") {
					return "" // a raw & or # ends a query value: what follows is not the password
				}
				return "postgres://user@db.example.com/app?sslmode=require&password=" + p
			case 4:
				return "host=db.example.com user=user password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p) + "' dbname=app"
			case 5:
				return "host=db.example.com user=user password=" + strings.NewReplacer(`\`, `\\`, " ", `\ `, "\t", "\\\t", "\n", "\\\n", "\v", "\\\v", "\f", "\\\f", "\r", "\\\r").Replace(p) + " dbname=app"
			case 6:
				return "redis://:" + p + "@cache.example.com:6379/0"
			case 7:
				return "rediss://app:" + p + "@cache.example.com:6380"
			case 8:
				return "redis-sentinel://:" + p + "@s1.example.com:26379,s2.example.com:26379?master=mymaster"
			case 9:
				return "redis-cluster://app:" + p + "@n1.example.com:7000,n2.example.com:7001"
			case 10:
				// A lone userinfo, which redis-cli reads as the password. A ':' in it would make it a user
				// and a password (what is after the ':'), so it is escaped too.
				return "redis://" + lone(p) + "@cache.example.com:6379/0"
			case 11:
				return "rediss-sentinel://" + lone(p) + "@s1.example.com,s2.example.com?master=m"
			default:
				// White space around the string, as a variable written with a trailing newline has it.
				return "  postgres://user:" + url.UserPassword("user", p).String()[len("user:"):] + "@db.example.com/app?sslmode=verify-full\n"
			}
		}
		in := build(pw)
		if in == "" {
			return
		}
		out := connect.Redact(in)
		// The password may show up only if the text around it holds it anyway (a password such as "xxxxx",
		// "user" or "example.com").
		ref, around := connect.Redact(build("pw")), strings.ReplaceAll(build("\x00"), "\x00", "")
		for _, written := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
			if strings.Contains(out, written) && !strings.Contains(ref, written) && !strings.Contains(around, written) {
				t.Fatalf("password %q survives redaction:\n in: %s\nout: %s", written, in, out)
			}
		}
	})
}

// lone escapes p as the lone userinfo of a URL: PathEscape leaves ':' as it is.
func lone(p string) string { return strings.ReplaceAll(url.PathEscape(p), ":", "%3A") }

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }
