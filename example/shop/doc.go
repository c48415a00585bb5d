// Package shop is bunbox's runnable example: a small shop whose order confirmations go out if and only if
// the order was committed.
//
// PlaceOrder inserts an order and its lines in one db.RunInTx. The Order model embeds bunx.Hooks, and
// Register binds an OnInsert handler to the database, so the insert writes an order.placed event into
// outbox_events in that same transaction: a rollback takes the event with it, a commit keeps it. The
// relay (package relay) forwards committed events to asynq, and the worker (HandleOrderPlaced, Worker)
// writes the confirmation it would send as a row in the confirmations table, keyed by order id, so a
// repeated delivery is counted rather than hidden.
//
//	db, _ := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{}) // TLS as sslmode says
//	redisOpt, _ := connect.Redis(os.Getenv("REDIS_URL"))                        // redis://:pass@host:6379/0
//	_ = shop.Migrate(ctx, db)                       // bunbox's schema, then the shop's tables
//	shop.Register(db, "default")                   // order.placed, on insert of an Order
//	r, _ := relay.New(db, redisOpt, relay.Config{})
//	go r.Run(ctx)                                  // committed events -> asynq
//	go shop.RunWorker(ctx, redisOpt, db, shop.WorkerConfig{})
//	order, err := shop.PlaceOrder(ctx, db, shop.PlaceOrderRequest{
//		Customer: "ada@example.com",
//		Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 2, PriceCents: 450}},
//	})
//
// connect.Postgres opens bun over pgdriver with TLS as libpq's sslmode says (use sslmode=verify-full in
// production), where pgdriver.WithDSN alone encrypts without checking the server's certificate.
//
// The command example/cmd/shop runs the API, the relay and the worker together or apart, and its demo
// subcommand (make demo) places a few thousand orders, rolls some back on purpose, and checks that every
// committed order got exactly one confirmation and no rolled-back one got any.
package shop
