// Package store holds every statement the relay and its services run on bunbox's tables, one function or
// method per row transition, so that a reader finds in one place how a row moves: written, claimed or
// streamed, delivered, released, handed to the exception queue, charged, dead, cancelled, cleaned up.
package store
