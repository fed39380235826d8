package redisstore

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/quota"
)

// TestPreludeFromQuota: the prelude names every algorithm of package quota
// with its id, and the wait, partial-grant and span flags, epoch and slack with the Go values; and
// every script starts with it.
func TestPreludeFromQuota(t *testing.T) {
	defs := map[string]string{}
	for line := range strings.Lines(prelude) {
		if name, val, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "local "), " = "); ok {
			defs[name] = val
		}
	}
	want := map[string]string{
		"WAITS":   strconv.Itoa(waitFlag),
		"AT_MOST": strconv.Itoa(atMostFlag),
		"SPAN":    strconv.Itoa(spanFlag),
		"EPOCH":   strconv.FormatInt(quota.GCRAEpoch, 10),
		"SLACK":   fmt.Sprint(quota.GCRASlack),
	}
	n := 0
	for a := quota.Algorithm(0); a.Known(); a++ {
		want[luaName(a)] = strconv.Itoa(int(a))
		n++
	}
	if n != 5 {
		t.Fatalf("quota has %d algorithms; the scripts implement 5: teach them the new one", n)
	}
	if fmt.Sprint(defs) != fmt.Sprint(want) {
		t.Fatalf("prelude defines %v, want %v:\n%s", defs, want, prelude)
	}
	for _, sc := range []script{takeScript, refundScript, settleScript, reportScript} {
		if !strings.HasPrefix(sc.src, prelude) {
			t.Errorf("a script does not start with the prelude:\n%.200s", sc.src)
		}
	}
}

// TestScriptsUseThePrelude: no script compares an algorithm byte with a
// number, or holds its own copy of the epoch or slack: they use the
// prelude's names, so a change to package quota's algorithms cannot leave
// them behind.
func TestScriptsUseThePrelude(t *testing.T) {
	numeric := regexp.MustCompile(`(\balg\b|\ba\b|TL\[6 \* q - 4\])\s*(==|~=|>=|<=|<|>)\s*[0-9]`)
	copies := regexp.MustCompile(`1767225600000000|local (EPOCH|SLACK|WAITS|AT_MOST|SPAN)\b|\b128\b`)
	for name, src := range map[string]string{
		"take.lua": takeSrc, "refund.lua": refundSrc, "settle.lua": settleSrc,
		"report.lua": reportSrc, "state.lua": stateSrc, "log.lua": logSrc,
	} {
		for i, line := range strings.Split(src, "\n") {
			code, _, _ := strings.Cut(line, "--")
			if m := numeric.FindString(code); m != "" {
				t.Errorf("%s:%d compares an algorithm with a number (%q): use the prelude's names", name, i+1, m)
			}
			if m := copies.FindString(code); m != "" {
				t.Errorf("%s:%d holds a copy of a prelude value (%q)", name, i+1, m)
			}
		}
	}
}
