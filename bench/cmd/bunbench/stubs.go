package main

import (
	"context"
	"log/slog"
)

const childCommand = "child"

func runChild(args []string) int                             { return 0 }
func runE2E(ctx context.Context, e *env, o options) error    { return nil }
func runGrowth(ctx context.Context, e *env, o options) error { return nil }
func runMemory(ctx context.Context, e *env, o options) error { return nil }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
