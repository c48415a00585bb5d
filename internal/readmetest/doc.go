// Package readmetest keeps the documentation honest, as Rust's doc tests do: its tests type-check every
// ```go block of README.md and of the pages of docs/ (docs/*.md), run the README's quick start, a
// complete program, against the real servers, and check that every relative link reaches a file (and a
// heading), that the README links every page, names only folders and make targets that exist, and stays
// within 300 lines.
//
// A block is either a complete program (it starts with a package clause; it is checked as it stands and
// must be gofmt-clean) or a fragment, marked by an HTML comment on the line right before its fence:
//
//	<!-- fragment -->
//
// A fragment is checked as the body of a function that returns error, with these names given:
// ctx (context.Context), db (*bun.DB), ob (*bunx.Outbox), redisOpt (asynq.RedisConnOpt) and logger
// (*slog.Logger); the packages it names (bunx, relay, asynq, bun, time, ...) are imported for it, and
// variables and imports it leaves unused are no error. What else it needs is declared in the marker,
// after the word fragment, as Go declarations that the page's reader does not see:
//
//	<!-- fragment
//	var in *worker.Inbox
//	-->
//
// Errors name the file and line (docs/hooks.md:LINE:COL).
package readmetest
