package model_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/model"
)

func TestDeliveryOptions(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		opts    []model.Option
		wantErr string
		check   func(t *testing.T, ev *model.Event)
	}{
		{name: "None", check: func(t *testing.T, ev *model.Event) {
			require.Nil(t, ev.ProcessAt)
			require.Nil(t, ev.MaxRetry)
			require.Zero(t, ev.Timeout)
			require.Nil(t, ev.Deadline)
			require.Empty(t, ev.Group)
			require.Zero(t, ev.TaskRetention)
		}},
		{name: "All", opts: []model.Option{
			model.WithProcessAt(at), model.WithMaxRetry(3), model.WithTimeout(30 * time.Second),
			model.WithDeadline(at.Add(time.Hour)), model.WithGroup("digest"), model.WithTaskRetention(48 * time.Hour),
		}, check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, at, *ev.ProcessAt)
			require.Equal(t, 3, *ev.MaxRetry)
			require.Equal(t, 30*time.Second, ev.Timeout)
			require.Equal(t, at.Add(time.Hour), *ev.Deadline)
			require.Equal(t, "digest", ev.Group)
			require.Equal(t, 48*time.Hour, ev.TaskRetention)
		}},
		{name: "ProcessInIsAbsolute", opts: []model.Option{model.WithProcessIn(24 * time.Hour)}, check: func(t *testing.T, ev *model.Event) {
			require.WithinDuration(t, time.Now().Add(24*time.Hour), *ev.ProcessAt, time.Minute)
		}},
		{name: "ProcessInZeroIsNow", opts: []model.Option{model.WithProcessIn(0)}, check: func(t *testing.T, ev *model.Event) {
			require.WithinDuration(t, time.Now(), *ev.ProcessAt, time.Minute)
		}},
		{name: "ProcessAtInThePast", opts: []model.Option{model.WithProcessAt(past)}, check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, past, *ev.ProcessAt, "kept: the relay enqueues it as pending")
		}},
		{name: "LastScheduleWins", opts: []model.Option{model.WithProcessIn(time.Hour), model.WithProcessAt(at)}, check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, at, *ev.ProcessAt)
		}},
		{name: "MaxRetryZero", opts: []model.Option{model.WithMaxRetry(0)}, check: func(t *testing.T, ev *model.Event) {
			require.NotNil(t, ev.MaxRetry, "0 is kept: no retries, not asynq's default")
			require.Zero(t, *ev.MaxRetry)
		}},

		{name: "ZeroProcessAt", opts: []model.Option{model.WithProcessAt(time.Time{})}, wantErr: "WithProcessAt: the time must not be zero"},
		{name: "NegativeProcessIn", opts: []model.Option{model.WithProcessIn(-time.Second)}, wantErr: "WithProcessIn(-1s): the delay must not be negative"},
		{name: "NegativeMaxRetry", opts: []model.Option{model.WithMaxRetry(-1)}, wantErr: "WithMaxRetry(-1): the retry count must not be negative"},
		{name: "NegativeTimeout", opts: []model.Option{model.WithTimeout(-time.Second)}, wantErr: "WithTimeout(-1s): the timeout must be at least 1s"},
		{name: "ZeroTimeout", opts: []model.Option{model.WithTimeout(0)}, wantErr: "WithTimeout(0s)"},
		{name: "SubSecondTimeout", opts: []model.Option{model.WithTimeout(500 * time.Millisecond)}, wantErr: "WithTimeout(500ms)"},
		{name: "ZeroDeadline", opts: []model.Option{model.WithDeadline(time.Time{})}, wantErr: "WithDeadline: the time must not be zero"},
		{name: "PassedDeadline", opts: []model.Option{model.WithDeadline(past)}, wantErr: "WithDeadline(2020-01-01T00:00:00Z): the deadline has already passed"},
		{name: "DeadlineBeforeProcessAt", opts: []model.Option{model.WithProcessAt(at), model.WithDeadline(at.Add(-time.Hour))}, wantErr: "Deadline 2030-01-02T02:04:05Z is not after ProcessAt 2030-01-02T03:04:05Z"},
		{name: "EmptyGroup", opts: []model.Option{model.WithGroup("")}, wantErr: `WithGroup(""): the group name must not be empty or blank`},
		{name: "BlankGroup", opts: []model.Option{model.WithGroup("  ")}, wantErr: "must not be empty or blank"},
		{name: "SpaceInGroup", opts: []model.Option{model.WithGroup("daily digest")}, wantErr: "must not contain spaces or control characters"},
		{name: "ControlInGroup", opts: []model.Option{model.WithGroup("d\x00")}, wantErr: "must not contain spaces or control characters"},
		{name: "InvalidUTF8Group", opts: []model.Option{model.WithGroup("\xff")}, wantErr: "is not valid UTF-8"},
		{name: "LongGroup", opts: []model.Option{model.WithGroup(strings.Repeat("g", 256))}, wantErr: "is 256 bytes, over the limit of 255"},
		{name: "ZeroRetention", opts: []model.Option{model.WithTaskRetention(0)}, wantErr: "WithTaskRetention(0s): the retention must be at least 1s"},
		{name: "FirstErrorWins", opts: []model.Option{model.WithMaxRetry(-2), model.WithTimeout(-1)}, wantErr: "WithMaxRetry(-2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := model.NewEvent("report.due", nil, tt.opts...)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, model.ErrInvalidEvent)
				require.ErrorContains(t, err, `model: invalid event "report.due": `)
				require.ErrorContains(t, err, tt.wantErr)
				require.Nil(t, ev)
				return
			}
			require.NoError(t, err)
			tt.check(t, ev)
		})
	}
}

// Events built without NewEvent (bunx.Outbox.Record validates them too) are checked field by field.
func TestValidateDeliveryFields(t *testing.T) {
	t.Parallel()
	zero, neg := time.Time{}, -1
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	early := at.Add(-time.Second)
	tests := []struct {
		name    string
		edit    func(ev *model.Event)
		wantErr string
	}{
		{"Valid", func(ev *model.Event) { ev.ProcessAt, ev.Deadline, ev.Timeout = &at, nil, time.Minute }, ""},
		{"ZeroProcessAt", func(ev *model.Event) { ev.ProcessAt = &zero }, "ProcessAt must not be the zero time"},
		{"NegativeMaxRetry", func(ev *model.Event) { ev.MaxRetry = &neg }, "MaxRetry must not be negative, got -1"},
		{"SubSecondTimeout", func(ev *model.Event) { ev.Timeout = time.Millisecond }, "Timeout must be 0 (asynq's default) or at least 1s, got 1ms"},
		{"NegativeTimeout", func(ev *model.Event) { ev.Timeout = -time.Hour }, "Timeout must be 0"},
		{"ZeroDeadline", func(ev *model.Event) { ev.Deadline = &zero }, "Deadline must not be the zero time"},
		{"DeadlineBeforeProcessAt", func(ev *model.Event) { ev.ProcessAt, ev.Deadline = &at, &early }, "is not after ProcessAt"},
		{"DeadlineAtProcessAt", func(ev *model.Event) { ev.ProcessAt, ev.Deadline = &at, &at }, "is not after ProcessAt"},
		{"BadGroup", func(ev *model.Event) { ev.Group = "a b" }, `Group "a b" must not contain spaces`},
		{"NegativeRetention", func(ev *model.Event) { ev.TaskRetention = -time.Second }, "Retention must be 0 (the relay's) or at least 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := model.NewEvent("report.due", nil)
			require.NoError(t, err)
			tt.edit(ev)
			err = ev.Validate(0)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, model.ErrInvalidEvent)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// Whatever the option values, NewEvent either refuses them with ErrInvalidEvent or builds an event that
// Validate accepts.
func FuzzDeliveryOptions(f *testing.F) {
	f.Add(int64(3600), -1, int64(30), int64(7200), "digest", int64(48*3600))
	f.Add(int64(-1), 0, int64(0), int64(0), "", int64(0))
	f.Add(int64(0), 25, int64(1), int64(-5), "a b", int64(1))
	f.Fuzz(func(t *testing.T, inSec int64, retry int, timeoutSec, deadlineSec int64, group string, retentionSec int64) {
		ev, err := model.NewEvent("x", nil,
			model.WithProcessIn(time.Duration(inSec)*time.Second),
			model.WithMaxRetry(retry),
			model.WithTimeout(time.Duration(timeoutSec)*time.Second),
			model.WithDeadline(time.Now().Add(time.Duration(deadlineSec)*time.Second)),
			model.WithGroup(group),
			model.WithTaskRetention(time.Duration(retentionSec)*time.Second),
		)
		if err != nil {
			require.ErrorIs(t, err, model.ErrInvalidEvent)
			return
		}
		require.NoError(t, ev.Validate(0))
	})
}
