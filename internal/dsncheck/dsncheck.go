// Package dsncheck lets a package check a PostgreSQL connection string the way package connect reads it,
// without connect exporting its connector: connect sets Check when it is linked in, and a package that
// imports connect (relay, for Config.ListenURL) calls it while it validates its Config.
package dsncheck

// Check reports what is wrong with the PostgreSQL connection string dsn as connect.Postgres reads it with
// pgdriver, or nil; it does no I/O. Its errors are connect's *Error, which mask the password. Package
// connect sets it in its init.
var Check func(dsn string) error
