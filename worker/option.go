package worker

import (
	"log/slog"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
	"go.opentelemetry.io/otel/trace"
)

// Option configures an Inbox (NewInbox).
type Option func(*options)

type options struct {
	logger *slog.Logger
	tp     trace.TracerProvider
	codec  *model.Codec // WithLocation's Codec
	tables tables.Names // WithLocation's Schema and TablePrefix
	err    error        // an invalid WithLocation
}

func applyOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// WithInboxLogger sets the Inbox's logger for failed handlers (Warn; Error for a task asynq archives),
// rejected tasks (Error) and skipped duplicates (Info); nil keeps the default. Defaults to a logger that writes Warn and above to stderr, so that a handler that keeps
// failing is never silent (asynq logs no handler error).
func WithInboxLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithTracerProvider sets the TracerProvider of the consumer spans of an Inbox's handlers (see
// Inbox.Handler; TraceMiddleware takes its own); nil keeps the default. Defaults to the global one
// (otel.GetTracerProvider), read when the Inbox is made.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) {
		if tp != nil {
			o.tp = tp
		}
	}
}
