package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/bench/internal/child"
)

// TestMain lets the test binary be the service: startChild starts
// os.Executable() with -serve, which here is this binary.
func TestMain(m *testing.M) {
	child.ServeIfAsked(serveFlag, serve)
	os.Exit(m.Run())
}

// TestBadFlags checks that every mistake is refused, named, before
// anything runs.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"memload", "-limit", "4"}, "-limit 4 MiB must be at least 8"},
		{[]string{"memload", "-buffer", "131072"}, "-buffer 131072 KiB must be at least 4 and at most the limit"},
		{[]string{"memload", "-hold", "3s"}, "-hold 3s must be positive and below -deadline 2s"},
		{[]string{"memload", "-overload", "0"}, "-overload 0 must lie in (0, 20]"},
		{[]string{"memload", "-target", "1.5"}, "-target 1.5 must lie in (0, 1]"},
		{[]string{"memload", "-rows", "memory,cpu"}, `-rows: unknown row "cpu" (want latency, latency+cpu, memory)`},
		{[]string{"memload", "-rounds", "0"}, "-server-procs and -rounds must be at least 1"},
	} {
		var out bytes.Buffer
		if _, err := run(context.Background(), tc.args, &out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	v := make([]int64, 100)
	for i := range v {
		v[i] = int64(100 - i) // 100 .. 1
	}
	if p99, p50, none := quantile(v, 0.99), quantile(v, 0.5), quantile(nil, 0.99); p99 != 99 || p50 != 50 || none != 0 {
		t.Errorf("p99 %d, p50 %d, of none %d; want 99, 50, 0", p99, p50, none)
	}
}
