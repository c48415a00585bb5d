// Package readmetest keeps the Go code of README.md honest, as Rust's doc tests do: its tests type-check
// every ```go block of the README and run the quick start, a complete program, against the real servers.
//
// A block is either a complete program (it starts with a package clause; it is checked as it stands) or a
// fragment, marked by an HTML comment on the line right before its fence:
//
//	<!-- fragment -->
//
// A fragment is checked as the body of a function that returns error, with these names given:
// ctx (context.Context), db (*bun.DB), ob (*bunx.Outbox), redisOpt (asynq.RedisConnOpt) and logger
// (*slog.Logger); the packages it names (bunx, relay, asynq, bun, time, ...) are imported for it, and
// variables and imports it leaves unused are no error. What else it needs is declared in the marker,
// after the word fragment, as Go declarations that the README's reader does not see:
//
//	<!-- fragment
//	var in *worker.Inbox
//	-->
//
// Errors name the README's lines (README.md:LINE:COL).
package readmetest
