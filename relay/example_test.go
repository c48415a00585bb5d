package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/connect"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// Run a relay next to the service: it forwards every committed outbox row to asynq until ctx ends.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// TLS as the URL's sslmode says: ...?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem in production.
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err) // the error shows the URL with its password masked
	}
	defer db.Close()
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		panic(err)
	}
	// Optional: wake idle relays at commit instead of at the next poll.
	if err := relay.EnableNotifyTrigger(ctx, db, model.Location{}); err != nil {
		panic(err)
	}
	redisOpt, err := connect.Redis(os.Getenv("REDIS_URL")) // e.g. redis://:password@127.0.0.1:6379/0
	if err != nil {
		panic(err)
	}

	// A committed event to forward (the application's transactions write them with package bunx).
	ev, err := model.NewEvent("order.placed", map[string]int{"order_id": 1})
	if err != nil {
		panic(err)
	}
	if err := bunx.New(db).Record(ctx, db, ev); err != nil {
		panic(err)
	}

	r, err := relay.New(db, redisOpt, relay.Config{
		Logger: slog.Default(),
		Observer: relay.Observer{OnEnqueue: func(_ context.Context, e relay.EnqueueEvent) {
			if e.EventID == ev.EventID.String() && e.Err == nil {
				cancel() // for this example: stop once the event is in Redis
			}
		}},
	})
	if err != nil {
		panic(err) // Redis does not answer, or the schema is missing
	}
	defer r.Close()
	if err := r.Run(ctx); err != nil { // blocks until ctx is done; nil on a clean stop
		panic(err)
	}

	ins := asynq.NewInspector(redisOpt)
	defer ins.Close()
	task, err := ins.GetTaskInfo(ev.Queue, ev.EventID.String()) // the TaskID is the event id
	if err != nil {
		panic(err)
	}
	fmt.Println(task.Type, task.Queue, task.State)
	// Output: order.placed default pending
}
