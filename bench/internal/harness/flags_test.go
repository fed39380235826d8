package harness

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

var testNames = []string{"a-1", "b-4", "c-4-batch"}

func parse(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	return ParseFlags(append([]string{"prog"}, args...), &bytes.Buffer{}, Help{Batching: "c-4-batch"}, testNames)
}

func TestFlagsDefaults(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	cfg, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Load:   Load{Concurrency: 64, Keys: 10_000, Warmup: 500 * time.Millisecond, Duration: 2 * time.Second, MaxOps: 5_000_000, Seed: 1},
		Pool:   64,
		Rounds: 3, BatchFlushers: 2, BatchMax: 64,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("defaults %+v, want %+v", cfg, want)
	}
	if !cfg.Runs("a-1") || !cfg.Runs("anything") {
		t.Error("with no -only every contender must run")
	}
}

func TestFlagsValues(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	cfg, err := parse(t, "-short", "-duration", "9s", "-rounds", "7", "-c", "8", "-keys", "5",
		"-max-ops", "100", "-seed", "42", "-batch-flushers", "3", "-batch-max", "9", "-only", " b-4 ,,a-1")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Load:   Load{Concurrency: 8, Keys: 5, Warmup: 200 * time.Millisecond, Duration: time.Second, MaxOps: 100, Seed: 42},
		Redis:  "redis://127.0.0.1:1/0",
		Pool:   8,
		Rounds: 1, BatchFlushers: 3, BatchMax: 9,
		Only: []string{"b-4", "a-1"},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v, want %+v", cfg, want)
	}
	if !cfg.Runs("a-1") || cfg.Runs("c-4-batch") {
		t.Errorf("Runs disagrees with -only %v", cfg.Only)
	}
	cfg, err = parse(t, "-redis", "127.0.0.1:2", "-pool", "5")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis != "127.0.0.1:2" || cfg.Pool != 5 {
		t.Errorf("-redis/-pool gave %q/%d, want the flags over $REDIS_URL", cfg.Redis, cfg.Pool)
	}
}

func TestFlagsRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "0"}, "bad flags: concurrency 0"},
		{[]string{"-keys", "-5"}, "bad flags: keys -5"},
		{[]string{"-duration", "0s"}, "bad flags: duration 0s"},
		{[]string{"-warmup", "-1s"}, "bad flags: warmup -1s"},
		{[]string{"-max-ops", "1"}, "bad flags: max ops 1"},
		{[]string{"-pool", "-1"}, "bad flags: pool -1 is out of range [0, 10000]"},
		{[]string{"-pool", "10001"}, "bad flags: pool 10001"},
		{[]string{"-rounds", "0"}, "bad flags: rounds 0 is out of range [1, 100]"},
		{[]string{"-rounds", "101"}, "bad flags: rounds 101"},
		{[]string{"-batch-flushers", "0"}, "bad flags: batch-flushers 0 / batch-max 64"},
		{[]string{"-batch-max", "100001"}, "batch-max 100001 out of range"},
		{[]string{"-only", "d-9"}, `bad flags: unknown contender "d-9" in -only (want some of a-1, b-4, c-4-batch)`},
		{[]string{"-only", " , "}, "bad flags: -only names no contender"},
		{[]string{"a-1"}, `unexpected arguments ["a-1"]`},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
	} {
		_, err := parse(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestFlagsShortOverridesButStillValidates(t *testing.T) {
	// -short replaces -rounds, so a bad -rounds is not reported under it.
	if _, err := parse(t, "-short", "-rounds", "0"); err != nil {
		t.Errorf("-short -rounds 0: %v, want the round count overridden", err)
	}
	if _, err := parse(t, "-short", "-c", "0"); err == nil {
		t.Error("-short -c 0 passed, want the concurrency rejected")
	}
}

func TestFlagsHelp(t *testing.T) {
	var out bytes.Buffer
	h := Help{Warmup: "W-text", Concurrency: "C-text", Keys: "K-text", MaxOps: "M-text", Pool: "P-text", Batching: "c-4-batch"}
	_, err := ParseFlags([]string{"prog", "-h"}, &out, h, testNames)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: error %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"W-text", "C-text", "K-text", "M-text", "P-text",
		"c-4-batch: pipelines in flight", "c-4-batch: most Takes per pipeline", "(default all): a-1, b-4, c-4-batch"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}
