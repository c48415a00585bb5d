package connect_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/internal/outboxtest"
)

// passwordsWithDelimiters are passwords with the characters a driver may split a URL at, written
// unescaped, each piece distinctive.
var passwordsWithDelimiters = []string{
	"Alpha7@Bravo7",
	"Alpha7:Bravo7",
	"Alpha7/Bravo7",
	"Alpha7?Bravo7",
	"Alpha7#Bravo7",
	"Alpha7@Bravo7@Charlie7",
	"Alpha7#Bravo7@Charlie7",
	"Alpha7:Bravo7@Charlie7:Delta7",
	"Alpha7@Bravo7:Charlie7/Delta7?Echo7#Foxtrot7",
	"Alpha7?Bravo7=Charlie7&Delta7@Echo7",
	"@Alpha7Bravo7",
	"Alpha7Bravo7@",
	"Alpha7%40Bravo7@Charlie7",
	"Alpha7 Bravo7@Charlie7",
}

// passwordPieces are the pieces of pw a driver's split can leave: the parts between delimiters, each
// as written and percent-decoded.
func passwordPieces(pw string) []string {
	var out []string
	for _, p := range regexp.MustCompile(`[@:/?#&= ]|%40`).Split(pw, -1) {
		if len(p) >= 4 {
			out = append(out, p)
		}
	}
	return out
}

// requireNoPiece checks that no piece of pw is in err, its formats, or any error of its chain.
func requireNoPiece(t *testing.T, err error, pw string) {
	t.Helper()
	require.Error(t, err)
	texts := []string{fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)}
	for _, e := range errorChain(err) {
		texts = append(texts, e.Error())
	}
	for _, s := range texts {
		for _, p := range passwordPieces(pw) {
			require.NotContains(t, s, p, "a piece of the password %q", pw)
		}
	}
}

func errorChain(err error) []error {
	if err == nil {
		return nil
	}
	out := []error{err}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, errorChain(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, errorChain(e)...)
		}
	}
	return out
}

// TestDriverErrorsMaskEveryPieceOfThePassword opens PostgreSQL on both drivers with passwords holding
// '@', ':', '/', '?', '#' unescaped, in URLs and key=value lists that fail as the string is read, as it
// is checked, as a host name is looked up or dialled, and at a live server, and checks that no piece
// of the password is in the error: pgx ends the userinfo at the first '@' and looked the rest of the
// password up as a host name, which its error quoted.
func TestDriverErrorsMaskEveryPieceOfThePassword(t *testing.T) {
	t.Parallel()

	live := ""
	if !testing.Short() {
		u, err := url.Parse(outboxtest.DatabaseURL())
		require.NoError(t, err)
		live = u.Host
	}
	for _, driver := range drivers {
		for i, pw := range passwordsWithDelimiters {
			quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
			forms := []string{
				"postgres://u:" + pw + "@127.0.0.1:1/db?sslmode=disable",
				"postgres://u:" + pw + "@127.0.0.1:1/db",
				"postgresql://u:" + pw + "@nohost.invalid:5432/db?sslmode=disable",
				"postgres://u:" + pw + "@127.0.0.1:1/db?sslmode=sometimes",
				"postgres://u:" + pw + "@127.0.0.1:1/db?read_timeout=5s&sslmode=disable",
				"postgres://u:" + pw + "@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
				"postgres://u@127.0.0.1:1/db?sslmode=disable&password=" + url.QueryEscape(pw),
				"host=127.0.0.1 port=1 user=u sslmode=disable password=" + quoted,
				"host=nohost.invalid user=u password=" + quoted + " sslmode=disable",
				"host=127.0.0.1 port=1 user=u password=" + quoted + " sslmode=sometimes",
			}
			if !strings.Contains(pw, "&") {
				// Unescaped in a query, but for '&', which starts another parameter there.
				forms = append(forms, "postgres://u@127.0.0.1:1/db?sslmode=disable&password="+pw)
			}
			if live != "" {
				forms = append(forms,
					"postgres://nosuchrole:"+pw+"@"+live+"/postgres?sslmode=disable",
					"host="+strings.Replace(live, ":", " port=", 1)+" user=nosuchrole password="+quoted+" sslmode=disable")
			}
			for j, dsn := range forms {
				t.Run(fmt.Sprintf("%s/%d/%d", driver, i, j), func(t *testing.T) {
					t.Parallel()
					db, err := connect.Postgres(context.Background(), dsn, connect.Options{Driver: driver, PingTimeout: 10 * time.Second})
					if db != nil {
						_ = db.Close()
					}
					var cerr *connect.Error
					require.ErrorAs(t, err, &cerr, dsn)
					requireNoPiece(t, err, pw)
				})
			}
		}
	}
}

// TestRedisErrorsMaskEveryPieceOfThePassword is the same for Redis URLs, which fail as they are read.
func TestRedisErrorsMaskEveryPieceOfThePassword(t *testing.T) {
	t.Parallel()

	for _, pw := range passwordsWithDelimiters {
		urls := []string{
			"redis://:" + pw + "@h:6379/notanumber",
			"redis://u:" + pw + "@h:6379?x=1",
			"rediss://:" + pw + "@h:6379?tls=maybe",
			"redis-sentinel://:" + pw + "@h1,h2",
			"redis-cluster://u:" + pw + "@h1:1,,h2:2",
		}
		if !strings.Contains(pw, "&") {
			urls = append(urls, "redis-sentinel://:x@h1,h2?bogus=1&master=m&password="+pw)
		}
		for _, u := range urls {
			_, err := connect.Redis(u)
			var cerr *connect.Error
			require.ErrorAs(t, err, &cerr, u)
			requireNoPiece(t, err, pw)
		}
	}
}
