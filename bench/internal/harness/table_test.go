package harness

import (
	"strings"
	"testing"
	"time"
)

// TestTableCPUColumn checks the "CPU x" column: the baseline's CPU per
// operation (process + Redis) over each row's, and n/a for a row that used
// Redis without its CPU known.
func TestTableCPUColumn(t *testing.T) {
	h := &Histogram{}
	h.Record(time.Millisecond)
	rows := []Row{
		{"base", Stats{Ops: 100, Elapsed: time.Second, Latency: h, CPU: 6 * time.Millisecond, CPUKnown: true}},
		// 60 µs + 90 µs of Redis per op: 150 µs, 0.40 of the base's 60.
		{"redis", Stats{Ops: 100, Elapsed: 2 * time.Second, Latency: h, CPU: 6 * time.Millisecond, CPUKnown: true,
			RoundTrips: 100, RedisCPU: 9 * time.Millisecond, RedisCPUKnown: true}},
		{"blind", Stats{Ops: 100, Elapsed: time.Second, Latency: h, CPU: 6 * time.Millisecond, CPUKnown: true, RoundTrips: 100}},
	}
	var b strings.Builder
	if err := (Table{OpsUnit: "RPC", Baseline: "base", Redis: true}).Write(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table has %d lines, want 4:\n%s", len(lines), b.String())
	}
	last := func(l string) string { f := strings.Fields(l); return f[len(f)-1] }
	for i, want := range []string{"base", "1.00x", "0.40x", "n/a"} {
		if got := last(lines[i]); got != want {
			t.Errorf("line %d ends %q, want %q:\n%s", i, got, want, b.String())
		}
	}
	if !strings.Contains(lines[0], "CPU x base") {
		t.Errorf("header lacks the CPU column: %s", lines[0])
	}
	// the throughput ratio is still there, before it
	if f := strings.Fields(lines[2]); f[len(f)-2] != "0.50x" {
		t.Errorf("redis row's throughput ratio is %q, want 0.50x", f[len(f)-2])
	}
}
