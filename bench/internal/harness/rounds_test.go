package harness

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRoundsInterleaves checks the order of the measurements (round by
// round, contenders in order), that every key prefix is distinct, and that
// each row totals its contender's rounds.
func TestRoundsInterleaves(t *testing.T) {
	var calls []string
	prefixes := map[string]bool{}
	r := Rounds{Names: []string{"x", "y"}, Rounds: 3, NameWidth: 4, Table: Table{OpsUnit: "ops", Baseline: "x"}}
	var out bytes.Buffer
	rows, err := r.Run(context.Background(), &out, func(_ context.Context, round, i int, prefix string) (Stats, error) {
		calls = append(calls, r.Names[i]+string(rune('0'+round)))
		prefixes[prefix] = true
		h := &Histogram{}
		h.Record(time.Millisecond)
		return Stats{Ops: uint64(10 * (i + 1)), Allowed: uint64(10 * (i + 1)), Elapsed: time.Second, Latency: h}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(calls, " "); got != "x1 y1 x2 y2 x3 y3" {
		t.Errorf("measured in order %s, want x1 y1 x2 y2 x3 y3", got)
	}
	if len(prefixes) != 6 {
		t.Errorf("%d distinct prefixes for 6 measurements", len(prefixes))
	}
	if len(rows) != 2 || rows[0].Name != "x" || rows[0].Stats.Ops != 30 || rows[1].Stats.Ops != 60 {
		t.Errorf("rows %+v, want x with 30 ops and y with 60", rows)
	}
	if !strings.Contains(out.String(), "  round 2/3  y          20 ops/s  p99 ") {
		t.Errorf("progress lines not as expected:\n%s", out.String())
	}
}

func TestRoundsStopsAtError(t *testing.T) {
	boom := errors.New("boom")
	n := 0
	r := Rounds{Names: []string{"x", "y"}, Rounds: 2, Table: Table{OpsUnit: "ops"}}
	_, err := r.Run(context.Background(), &bytes.Buffer{}, func(context.Context, int, int, string) (Stats, error) {
		n++
		return Stats{}, boom
	})
	if !errors.Is(err, boom) || n != 1 {
		t.Errorf("error %v after %d calls, want boom after 1", err, n)
	}
}
