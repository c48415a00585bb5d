package worker

// AsynqRedeliverySpan is asynqRedeliverySpan, for the external tests.
var AsynqRedeliverySpan = asynqRedeliverySpan

// CleanerConfig is the configuration in effect of c, defaults applied.
func CleanerConfig(c *InboxCleaner) InboxCleanerConfig { return c.cfg }

// The defaults, for the external tests.
const (
	InboxWindowDefault              = inboxWindowDefault
	InboxTaskRetentionDefault       = inboxTaskRetentionDefault
	InboxReconcileWindowDefault     = inboxReconcileWindowDefault
	TaskCheckIntervalDefault        = taskCheckIntervalDefault
	DelayedTaskCheckIntervalDefault = delayedTaskCheckIntervalDefault
)
