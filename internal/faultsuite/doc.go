// Package faultsuite proves the outbox's promise under the faults that happen in production: it drives
// real processes (a producer placing orders through bunx, three relays with reconcilers, asynq workers
// using the bunx Inbox) against private PostgreSQL and Redis servers, kills relays and workers with
// SIGKILL at random points, restarts Redis without persistence (losing every task) and crashes
// PostgreSQL, then checks the ledger: every event of every committed transaction handled once, none of a
// rolled-back one, no task enqueued twice inside the dedupe window, nothing left pending or locked.
//
// The suite is behind the build tag "fault" and takes a few minutes:
//
//	make test/fault                                   # or:
//	go test -race -count=1 -tags fault -v ./internal/faultsuite/
//	FAULT_SEED=1234 go test -tags fault -v ./internal/faultsuite/   # replay a schedule
//
// The processes are one binary, faultproc, with a subcommand per role; the test builds it with go build.
package faultsuite
