package worker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bunbox/bunbox/worker"
)

// An InboxCleaner keeps inbox_events from growing forever. Run it next to the asynq worker; its Window
// must outlast the time asynq may deliver a task again (about 21 days with asynq's defaults) and the time
// the relay's reconciler may enqueue it again (25h with the relay's defaults).
func ExampleInboxCleaner() {
	ctx, cancel := context.WithCancel(context.Background())
	db := exampleDB(ctx) // the worker's database
	defer db.Close()
	inbox := worker.NewInbox(db)
	cfg := worker.InboxCleanerConfig{
		MaxRetry:    5,                // the largest model.WithMaxRetry of the handled events
		TaskTimeout: 10 * time.Minute, // the largest model.WithTimeout of the handled events
		Window:      72 * time.Hour,   // refused if shorter than cfg.MinWindow()
	}
	cleaner, err := worker.NewInboxCleaner(inbox, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("shortest Window:", cfg.MinWindow())
	stopped := make(chan error, 1)
	go func() { stopped <- cleaner.Run(ctx) }() // a pass every Interval until ctx is done

	cancel() // the worker shuts down
	fmt.Println(<-stopped)
	// Output:
	// shortest Window: 25h0m0s
	// <nil>
}
