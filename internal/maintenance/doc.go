// Package maintenance is the home of the services a relay runs beside its delivery: each in a package of
// its own below this one (cleanup, cancel, wake, listen, keytrack, reconcile, lease), a small type with
// its Config, Run and one pass that tests call directly. The relay builds and starts them; none of them
// knows the relay. Their statements on bunbox's tables are in internal/store.
package maintenance
