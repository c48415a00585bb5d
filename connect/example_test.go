package connect_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/relay"
)

// Open the database and Redis as their URLs say, and run the relay on both. In production the URLs ask
// for full verification of the servers' certificates:
//
//	postgres://app:secret@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem
//	rediss://app:secret@cache.internal:6380/0
func Example() {
	ctx := context.Background()
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{MaxOpenConns: 20})
	if err != nil {
		log.Fatal(err) // the error shows postgres://app:xxxxx@db.internal:5432/app?...
	}
	defer db.Close()
	redisOpt, err := connect.Redis(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(db, redisOpt, relay.Config{}) // checks that both answer and that the schema is there
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	fmt.Println("relay ready") // r.Run(ctx) would forward the outbox until ctx is done
	// Output: relay ready
}

// Redact masks the password of a connection string in every form, including strings that do not parse.
func ExampleRedact() {
	fmt.Println(connect.Redact("postgres://app:s3cret@db:5432/app?sslmode=verify-full"))
	fmt.Println(connect.Redact("postgres://app:Pa%ZZs3cret@db/app"))
	fmt.Println(connect.Redact("postgres://app@db/app?password=s3cret&sslmode=require"))
	fmt.Println(connect.Redact("host=db user=app password='s3 cret' dbname=app"))
	fmt.Println(connect.Redact("redis-sentinel://:s3cret@s1:26379,s2:26379?master=main"))
	// Output:
	// postgres://app:xxxxx@db:5432/app?sslmode=verify-full
	// postgres://app:xxxxx@db/app
	// postgres://app@db/app?password=xxxxx&sslmode=require
	// host=db user=app password=xxxxx dbname=app
	// redis-sentinel://:xxxxx@s1:26379,s2:26379?master=main
}

// Redis reads a URL into asynq's options: one server, Sentinel or a Cluster.
func ExampleRedis() {
	for _, u := range []string{
		"redis://app:s3cret@cache:6379/2",
		"rediss://cache.example.com:6380",
		"redis-sentinel://s1:26379,s2?master=main",
		"redis-cluster://n1:7000,n2:7001,n3:7002",
	} {
		opt, err := connect.Redis(u)
		if err != nil {
			log.Fatal(err)
		}
		switch o := opt.(type) {
		case asynq.RedisClientOpt:
			fmt.Println("server", o.Addr, "user", o.Username, "db", o.DB, "tls", o.TLSConfig != nil)
		case asynq.RedisFailoverClientOpt:
			fmt.Println("sentinel", o.SentinelAddrs, "master", o.MasterName)
		case asynq.RedisClusterClientOpt:
			fmt.Println("cluster", o.Addrs)
		}
	}
	// Output:
	// server cache:6379 user app db 2 tls false
	// server cache.example.com:6380 user  db 0 tls true
	// sentinel [s1:26379 s2:26379] master main
	// cluster [n1:7000 n2:7001 n3:7002]
}

// An error names what is wrong and shows the connection string with its password masked.
func ExamplePostgres_invalid() {
	_, err := connect.Postgres(context.Background(), "postgres://app:s3cret@db/app?sslmode=sometimes", connect.Options{})
	fmt.Println(err)
	// Output:
	// connect: invalid PostgreSQL URL postgres://app:xxxxx@db/app?sslmode=sometimes: sslmode "sometimes" is not one of disable, allow, prefer, require, verify-ca, verify-full
}

// With Options.Driver set to DriverPgx, the pool is pgx's and pgx reads the connection string (its
// errors, too, show it redacted).
func ExamplePostgres_pgx() {
	_, err := connect.Postgres(context.Background(), "postgres://app:s3cret@db/app?sslmode=sometimes",
		connect.Options{Driver: connect.DriverPgx, MaxOpenConns: 20})
	fmt.Println(err)
	// Output:
	// connect: invalid PostgreSQL URL postgres://app:xxxxx@db/app?sslmode=sometimes: failed to configure TLS: sslmode is invalid
}
