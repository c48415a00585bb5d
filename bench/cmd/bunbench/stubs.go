package main

import "context"

const childCommand = "child"

func runChild(args []string) int                                  { return 0 }
func runDrain(ctx context.Context, e *env, o options) error  { return nil }
func runE2E(ctx context.Context, e *env, o options) error    { return nil }
func runGrowth(ctx context.Context, e *env, o options) error { return nil }
func runMemory(ctx context.Context, e *env, o options) error { return nil }
