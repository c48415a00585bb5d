// Package faultsuite proves the outbox's promise under the faults that happen in production: it drives
// real processes (a producer placing orders through bunx, three relays each running a reconciler, asynq
// workers whose handlers use the worker Inbox; order.audited fans out to two listeners) against private PostgreSQL and Redis servers, SIGKILLs
// relays and workers at random points, restarts Redis without persistence (losing every task, while the
// workers are down so that a backlog is lost) and crashes PostgreSQL (pg_ctl stop -m immediate), then
// lets everything drain and checks the ledger: every event of every committed transaction handled, and
// once; none of a rolled-back one; no task enqueued twice inside the dedupe window; nothing left pending,
// dead or locked; malformed and unroutable tasks archived at their first delivery. A fifth of the
// transactions change one of eight accounts and record account.changed with the account as its ordering
// key (model.WithOrderingKey): the ledger checks that no account's events were ever handled at the same
// time or out of their commit order, counting a handler cut by a SIGKILL as running until its process
// was seen dead.
//
// The suite is behind the build tag "fault" and takes about two and a half minutes:
//
//	make test/fault
//	go test -race -count=1 -tags fault -v ./internal/faultsuite/
//
// Knobs (environment, or the -fault.* test flags):
//
//	FAULT_SEED=n      replay the schedule of a run (its seed is printed first); default time-based
//	FAULT_FLOW=90s    how long events flow while faults are injected
//	FAULT_KILLS=30    SIGKILLs of relays and workers, besides the two workers killed around the Redis loss
//	FAULT_RACE=1      build the helper processes with the race detector (make test/fault does)
//	FAULT_STREAM=0    run with the snapshot stream off (relay.DisableStream): the per-row path alone;
//	                  by default the stream is on, as the migrations leave it
//	FAULT_DIR=path   keep the ledgers and the processes' logs there (default: a temporary directory)
//	FAULT_BREAK=x     sabotage one safety mechanism to prove the ledger notices; the run must FAIL:
//	                  reconciler (relays run none), inbox (effects written without it), taskid (enqueue
//	                  without the TaskID), ordering (account events recorded without their ordering key)
//
// The processes are one binary, faultproc, with a subcommand per role; the test builds it with go build.
// Each process writes a ledger (producer outcomes, enqueues, deliveries) to files that survive SIGKILL.
package faultsuite
