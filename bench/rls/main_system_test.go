//go:build system

package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The built contenders that need no envoyproxy/ratelimit: grpc-floor and
// floodgate-rls-async (floodgate-rls built from this repository, serving
// the async translation). The async row is restarted around each phase so
// that its deferred reports count in its own row: its Redis work shows
// (bucket writes), and the floor's phases, which follow its own, show none.
//
// Bound: counts, none on time. Each measured phase ends at its budget of
// 2 000 calls (-max-ops) or after its second, whichever comes first; every
// call must be answered OK (the limits are far above any load, and
// neither service waits on Redis to answer), with no error; the async row
// must show bucket writes and the floor none. Neither depends on how many
// calls a loaded machine completes, only on there being some, and the
// calls have no deadline of their own (a phase gives up only 30 s after
// its end).
func TestShortBuiltFloorAndAsync(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"rls", "-short", "-only", "floodgate-async,floor", "-c", "8", "-keys", "500", "-max-ops", "2000"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	o := out.String()
	row := regexp.MustCompile(`(?m)^\s+(floodgate-rls-async|grpc-floor)\s+(\d+)\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+\.\d)\s+(\d+)\s+-\s+-$`)
	rows := row.FindAllStringSubmatch(o, -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 rows (2 contenders x 2 descriptor counts):\n%s", o)
	}
	for _, r := range rows {
		if calls, _ := strconv.Atoi(r[2]); calls <= 0 || r[3] != "100.0" || r[4] != "0" {
			t.Errorf("%s: %v: want calls, 100.0%% OK, 0 errors", r[1], r)
		}
	}
	for _, p := range regexp.MustCompile(`(floodgate-rls-async|grpc-floor): redis commands per call: (.*)`).FindAllStringSubmatch(o, -1) {
		set := 0.0
		for _, part := range strings.Split(p[2], ", ") {
			if name, v, _ := strings.Cut(part, " "); name == "SET" {
				set, _ = strconv.ParseFloat(v, 64)
			}
		}
		switch {
		case p[1] == "floodgate-rls-async" && set <= 0:
			t.Errorf("the async row counts no bucket writes: its deferred reports were not counted in it (%s)", p[2])
		case p[1] == "grpc-floor" && set > 0:
			t.Errorf("the floor's phases show bucket writes: another row's deferred reports leaked into them (%s)", p[2])
		}
	}
}
