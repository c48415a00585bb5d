package ui

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"unicode/utf8"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/configcheck"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// listLimitDefault is how many rows each list of the page shows (Config.ListLimit).
const listLimitDefault = 50

// minTokenLength is the shortest token New accepts, in characters (runes); the token must also have at
// least minTokenDistinct distinct characters. A token guards the page, so it must not be guessable.
const minTokenLength = 16

// minTokenDistinct is how many distinct characters a token needs: "aaaaaaaaaaaaaaaa" is refused, a
// random hex token of 16 characters passes but for about 1 in 20,000.
const minTokenDistinct = 6

// Config tunes a Handler. The zero value serves a read-only page on the outbox table alone, open to
// whoever reaches it, with payloads, errors and metadata truncated; set Token to guard it.
type Config struct {
	// Token, when set, guards the page: every route but the stylesheet asks for it (OpenReads), and an
	// operator who signs in with it may retry and purge dead events. At least 16 characters (runes), 6 of
	// them distinct. Defaults to none: the page is read-only, open to whoever reaches it, and shows
	// payloads, errors and metadata only truncated.
	Token string
	// OpenReads, with a Token, lets whoever reaches the page read it without the token: lists, counts and
	// event pages, with payloads, last errors and metadata truncated, database errors and the
	// reconciler's lease holder hidden; writes still need a sign-in. Defaults to false: with a Token,
	// every route but POST /login and the stylesheet answers 401 until the reader signs in (a session
	// cookie) or sends the token by HTTP basic auth (any user name), and such a reader sees everything in
	// full on an event's page. Without a Token the page is open either way.
	OpenReads bool
	// TrustProxy, when true, believes the headers of a reverse proxy in front of the page: the session
	// cookie is Secure when X-Forwarded-Proto is https, and the sign-in throttle counts failures per
	// client by the last address of X-Forwarded-For. Set it only when a proxy sets both headers.
	// Defaults to false: the cookie is Secure only on a TLS connection to the page, and a client is its
	// connection's remote address.
	TrustProxy bool
	// Redis, when set, adds what asynq holds per queue (and each event's task) to the page. Defaults to
	// none: the page shows the outbox table only and says so.
	Redis asynq.RedisConnOpt
	// Logger receives a line for every write (who, what, how many) and every refused write.
	// Defaults to a logger that writes Info and above to stderr.
	Logger *slog.Logger
	// ListLimit is how many rows each list shows, 1 to 1000. Defaults to 50.
	ListLimit int
	// Location is the outbox the page shows and changes (see model.Location; the one relay.Config.Location
	// names): its Schema and TablePrefix name the tables ("tenant_a".orders_outbox_events and its leases
	// table), one Handler per outbox. Its Codec is not used: the page never decodes a payload, it
	// describes an encoded one (encoding, key id, size). A Location that model.Location.Validate refuses
	// is an error naming the field. Defaults to the zero Location: today's unqualified tables.
	Location model.Location
}

// tokenRunes counts the characters of a token and how many of them are distinct.
func tokenRunes(token string) (n, distinct int) {
	seen := map[rune]bool{}
	for _, r := range token {
		n++
		seen[r] = true
	}
	return n, len(seen)
}

func (c Config) withDefaults() Config {
	c.ListLimit = cmp.Or(c.ListLimit, listLimitDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return c
}

// ErrInvalidConfig is wrapped by the errors of a Config that cannot work; the message names the field.
var ErrInvalidConfig = errors.New("ui: invalid config")

func (c Config) validate() error {
	var p configcheck.Problems
	if c.Token != "" {
		n, distinct := tokenRunes(c.Token)
		p.Check(n >= minTokenLength, "Token must be at least %d characters, got %d", minTokenLength, n)
		p.Check(distinct >= minTokenDistinct, "Token must have at least %d distinct characters, got %d: use a random token (openssl rand -hex 16)", minTokenDistinct, distinct)
		p.Check(utf8.ValidString(c.Token), "Token must be valid UTF-8")
	}
	switch _, err := tables.New(c.Location.Schema, c.Location.TablePrefix); {
	case errors.Is(err, tables.ErrInvalidSchema):
		p.Add(fmt.Errorf("Location.Schema: %w", err))
	case err != nil:
		p.Add(fmt.Errorf("Location.TablePrefix: %w", err))
	}
	p.Check(c.ListLimit >= 1 && c.ListLimit <= 1000, "ListLimit must be between 1 and 1000, got %d", c.ListLimit)
	return p.Err(ErrInvalidConfig)
}
