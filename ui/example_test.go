package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/bunbox/bunbox/connect"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/ui"
)

// A service mounts the operator page on its own mux under /outbox, guarded by a token: every page asks
// for it (a sign-in form in a browser, HTTP basic auth for other clients), only a reader with the token
// sees payloads and errors in full, and the page's links and redirects stay under /outbox. Behind a
// reverse proxy that terminates TLS, set TrustProxy so the session cookie is Secure.
func ExampleNew() {
	ctx := context.Background()
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := bunboxmigrate.Up(ctx, db); err != nil { // for this example: the outbox's tables
		panic(err)
	}
	token := os.Getenv("BUNBOX_UI_TOKEN") // openssl rand -hex 16: at least 16 characters, 6 distinct
	if token == "" {
		token = "an-example-token-0123" // for this example only
	}

	redisOpt, err := connect.Redis(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	page, err := ui.New(db, ui.Config{Token: token, Redis: redisOpt})
	if err != nil {
		panic(err)
	}
	defer page.Close()
	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", page))
	// ...the service's own routes on mux, then http.Server{Handler: mux, ...}.ListenAndServe(); here, a
	// test server:
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/outbox/")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("without the token:", resp.Status)

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/outbox/", nil)
	if err != nil {
		panic(err)
	}
	req.SetBasicAuth("ops", token) // any user name
	resp, err = srv.Client().Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("with it:", resp.Status)
	// Output:
	// without the token: 401 Unauthorized
	// with it: 200 OK
}
