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
//	db, _ := pgopen.Open(ctx, os.Getenv("DATABASE_URL"), pgopen.Options{})
//	_ = shop.Migrate(ctx, db)                       // bunbox's schema, then the shop's tables
//	shop.Register(db, "default")                   // order.placed, on insert of an Order
//	r, _ := relay.New(db, asynq.RedisClientOpt{Addr: addr}, relay.Config{})
//	go r.Run(ctx)                                  // committed events -> asynq
//	go shop.RunWorker(ctx, asynq.RedisClientOpt{Addr: addr}, db, shop.WorkerConfig{})
//	order, err := shop.PlaceOrder(ctx, db, shop.PlaceOrderRequest{
//		Customer: "ada@example.com",
//		Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 2, PriceCents: 450}},
//	})
//
// pgopen.Open is the module's internal helper around pgdriver: outside this module, open the database with
// pgdriver.NewConnector(pgdriver.WithDSN(dsn)) and mind that pgdriver v1.2.18's default TLS does not verify
// the server's certificate; pgopen turns verification on when the URL says sslmode=require/verify-full.
//
// The command example/cmd/shop runs the API, the relay and the worker together or apart, and its demo
// subcommand (make demo) places a few thousand orders, rolls some back on purpose, and checks that every
// committed order got exactly one confirmation and no rolled-back one got any.
package shop
