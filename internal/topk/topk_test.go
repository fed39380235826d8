package topk_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/topk"
	"github.com/floodgate-go/floodgate/testing/clock"
)

func newSummary(t testing.TB, cfg topk.Config) (*topk.Summary, *clock.Fake) {
	t.Helper()
	clk := clock.New(clock.Epoch)
	cfg.Clock = clk
	s, err := topk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func record(s *topk.Summary, key, p string, n int) {
	for range n {
		s.Record(key, []byte(p))
	}
}

// entries is the principals of key with their counts and errors,
// "p=count±err", in Top's order.
func entries(s *topk.Summary, key string, n int) string {
	groups, _ := s.Top(key, n)
	var out []string
	for _, g := range groups {
		for _, e := range g.Entries {
			out = append(out, fmt.Sprintf("%s=%d±%d", e.Principal, e.Count, e.Error))
		}
	}
	return strings.Join(out, " ")
}

func TestExactWithinCapacity(t *testing.T) {
	t.Parallel()
	s, _ := newSummary(t, topk.Config{Capacity: 4})
	record(s, "r", "ip=192.0.2.1", 7)
	record(s, "r", "user=bob", 3)
	record(s, "r", "user=alice", 5)
	record(s, "r", "tenant=acme", 1)
	record(s, "other", "ip=192.0.2.1", 2)
	if got, want := entries(s, "r", 0), "ip=192.0.2.1=7±0 user=alice=5±0 user=bob=3±0 tenant=acme=1±0"; got != want {
		t.Errorf("Top(r):\n got %s\nwant %s", got, want)
	}
	if got, want := entries(s, "r", 2), "ip=192.0.2.1=7±0 user=alice=5±0"; got != want {
		t.Errorf("Top(r, 2):\n got %s\nwant %s", got, want)
	}
	groups, covered := s.Top("", 1)
	if len(groups) != 2 || groups[0].Key != "r" || groups[0].Total != 16 || groups[1].Key != "other" || groups[1].Total != 2 {
		t.Errorf("Top(\"\") groups = %+v, want r (16) then other (2)", groups)
	}
	if covered != 50*time.Second { // clock.Epoch is a whole hour: the oldest slice started 50 s ago
		t.Errorf("covered = %s, want 50s", covered)
	}
}

// TestSlidingInterval: a record counts for the slices of the interval,
// and is forgotten whole when its slice comes round again.
func TestSlidingInterval(t *testing.T) {
	t.Parallel()
	s, clk := newSummary(t, topk.Config{Capacity: 8, Slices: 6, Interval: time.Minute})
	record(s, "r", "a", 5) // slice 0: [0s, 10s)
	clk.Advance(10 * time.Second)
	record(s, "r", "a", 2) // slice 1
	record(s, "r", "b", 4)
	if got, want := entries(s, "r", 0), "a=7±0 b=4±0"; got != want {
		t.Errorf("after 10s: got %s, want %s", got, want)
	}
	clk.Advance(49*time.Second + 999*time.Millisecond) // 59.999 s: slice 0 still in
	if got, want := entries(s, "r", 0), "a=7±0 b=4±0"; got != want {
		t.Errorf("after 59.999s: got %s, want %s", got, want)
	}
	clk.Advance(time.Millisecond) // 60 s: slice 0 is out
	if got, want := entries(s, "r", 0), "b=4±0 a=2±0"; got != want {
		t.Errorf("after 60s: got %s, want %s", got, want)
	}
	record(s, "r", "c", 1) // reuses slice 0's sketch for slice 6
	if got, want := entries(s, "r", 0), "b=4±0 a=2±0 c=1±0"; got != want {
		t.Errorf("after a record at 60s: got %s, want %s", got, want)
	}
	clk.Advance(10 * time.Second)
	if got, want := entries(s, "r", 0), "c=1±0"; got != want {
		t.Errorf("after 70s: got %s, want %s", got, want)
	}
	clk.Advance(time.Hour)
	if groups, _ := s.Top("", 0); len(groups) != 0 {
		t.Errorf("an hour later: %+v, want nothing", groups)
	}
}

// TestErrorBound: with more distinct principals than counters, every
// reported count is within its error of the truth, the error is at most
// N/Capacity, and every principal with more than N/Capacity records is
// reported; over several slices as over one.
func TestErrorBound(t *testing.T) {
	t.Parallel()
	for _, slices := range []int{1, 3} {
		t.Run(strconv.Itoa(slices)+" slices", func(t *testing.T) {
			t.Parallel()
			const k = 16
			s, clk := newSummary(t, topk.Config{Capacity: k, Slices: slices, Interval: time.Duration(slices) * time.Second})
			rng := rand.New(rand.NewPCG(1, 2))
			zipf := rand.NewZipf(rng, 1.2, 1, 5000)
			truth := map[string]uint64{}
			const n = 50_000
			for i := range n {
				if i > 0 && i*slices/n != (i-1)*slices/n {
					clk.Advance(time.Second) // the next slice
				}
				p := "p" + strconv.FormatUint(zipf.Uint64(), 10)
				truth[p]++
				s.Record("r", []byte(p))
			}
			groups, _ := s.Top("r", k)
			if len(groups) != 1 || groups[0].Total != n {
				t.Fatalf("groups = %+v, want one of total %d", groups, n)
			}
			reported := map[string]bool{}
			for _, e := range groups[0].Entries {
				reported[e.Principal] = true
				tr := truth[e.Principal]
				if e.Count < tr || e.Count-e.Error > tr {
					t.Errorf("%s: count %d error %d, true %d: not in [count-error, count]", e.Principal, e.Count, e.Error, tr)
				}
				if e.Error > n/k {
					t.Errorf("%s: error %d > N/k = %d", e.Principal, e.Error, n/k)
				}
			}
			for p, c := range truth {
				if c > n/k && !reported[p] {
					t.Errorf("%s has %d > N/k = %d records and is not reported", p, c, n/k)
				}
			}
			if len(reported) == 0 {
				t.Fatal("nothing reported")
			}
		})
	}
}

// heavyStream records 1,000,000 distinct principals once each and, in
// between, "ip=203.0.113.7" every 10th record and "user=admin" every 25th.
func heavyStream(s *topk.Summary) {
	var arr [32]byte
	buf := arr[:0]
	for i := range 1_000_000 {
		buf = strconv.AppendInt(append(buf[:0], "ip=10."...), int64(i), 10)
		s.Record("r", buf)
		switch {
		case i%10 == 0:
			s.Record("r", []byte("ip=203.0.113.7"))
		case i%25 == 1:
			s.Record("r", []byte("user=admin"))
		}
	}
}

// TestHeavyHitterFirst: among a million distinct principals, the true
// heavy hitters come first, in order, each within its error.
func TestHeavyHitterFirst(t *testing.T) {
	t.Parallel()
	s, _ := newSummary(t, topk.Config{})
	heavyStream(s)
	groups, _ := s.Top("r", 3)
	if len(groups) != 1 {
		t.Fatalf("groups = %+v", groups)
	}
	g := groups[0]
	const hh, admin = 100_000, 40_000 // i%10==0; i%25==1 (never also i%10==0)
	if g.Total != 1_000_000+hh+admin {
		t.Errorf("total = %d, want %d", g.Total, 1_000_000+hh+admin)
	}
	e := g.Entries
	if len(e) < 2 || e[0].Principal != "ip=203.0.113.7" || e[1].Principal != "user=admin" {
		t.Fatalf("top = %+v, want ip=203.0.113.7 then user=admin", e)
	}
	if e[0].Count < hh || e[0].Count-e[0].Error > hh || e[1].Count < admin || e[1].Count-e[1].Error > admin {
		t.Errorf("counts %+v not within their errors of %d and %d", e[:2], hh, admin)
	}
	if bound := g.Total / uint64(s.Capacity()); e[0].Error > bound || e[1].Error > bound {
		t.Errorf("errors %d, %d > N/k = %d", e[0].Error, e[1].Error, bound)
	}
}

// TestMemoryFlat: a million distinct principals use the same counters,
// the same heap, and no allocation at all.
func TestMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("a million records")
	}
	s, _ := newSummary(t, topk.Config{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s.Record("r", []byte("warm-up")) // the key's slices are allocated here
	runtime.GC()
	runtime.ReadMemStats(&after)
	keyBytes := after.TotalAlloc - before.TotalAlloc
	t.Logf("one key's slices: %d bytes", keyBytes)
	if keyBytes > 56<<10 && !raceEnabled { // the race detector allocates beside
		t.Errorf("one key's slices took %d bytes, more than the 56 KiB the docs say", keyBytes)
	}
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(1, func() { heavyStream(s) })
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("a million distinct principals: heap %d bytes before, %d after (%+d); %d counters in use; %.0f allocations",
		before.HeapAlloc, after.HeapAlloc, int64(after.HeapAlloc)-int64(before.HeapAlloc), s.Len("r"), allocs)
	if n := s.Len("r"); n != s.Capacity() {
		t.Errorf("counters in use = %d, want the capacity %d (one slice of time)", n, s.Capacity())
	}
	if allocs != 0 && !raceEnabled {
		t.Errorf("recording a million distinct principals allocated %.0f times, want 0", allocs)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<10 {
		t.Errorf("the heap grew by %d bytes over a million distinct principals, want < 64 KiB", grew)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector")
	}
	s, clk := newSummary(t, topk.Config{Capacity: 4})
	tracked := []byte("user=bob")
	long := []byte(strings.Repeat("x", 200))
	s.Record("r", tracked)
	i := 0
	var buf []byte
	for name, f := range map[string]func(){
		"tracked": func() { s.Record("r", tracked) },
		"new":     func() { i++; buf = strconv.AppendInt(buf[:0], int64(i), 10); s.Record("r", buf) },
		"long":    func() { s.Record("r", long) },
		"next slice": func() {
			clk.Advance(10 * time.Second)
			s.Record("r", tracked)
		},
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %.1f allocations per record, want 0", name, n)
		}
	}
}

func TestLongPrincipal(t *testing.T) {
	t.Parallel()
	s, _ := newSummary(t, topk.Config{})
	a := strings.Repeat("a", 100) + "1"
	b := strings.Repeat("a", 100) + "2"
	record(s, "r", a, 2)
	record(s, "r", b, 1)
	groups, _ := s.Top("r", 0)
	e := groups[0].Entries
	if len(e) != 2 || e[0].Count != 2 || e[1].Count != 1 {
		t.Fatalf("entries = %+v, want two principals counted 2 and 1", e)
	}
	for _, x := range e {
		if len(x.Principal) != topk.MaxPrincipal || !strings.HasPrefix(x.Principal, strings.Repeat("a", topk.MaxPrincipal-33)+"#") {
			t.Errorf("principal %q: want %d bytes, the first %d kept and '#' and a hash", x.Principal, topk.MaxPrincipal, topk.MaxPrincipal-33)
		}
	}
}

func TestMaxKeys(t *testing.T) {
	t.Parallel()
	s, clk := newSummary(t, topk.Config{MaxKeys: 2})
	record(s, "a", "x", 1)
	record(s, "b", "x", 1)
	record(s, "c", "x", 3) // dropped: a and b have records in the interval
	if s.Dropped() != 3 {
		t.Errorf("dropped = %d, want 3", s.Dropped())
	}
	clk.Advance(time.Minute)
	record(s, "c", "y", 2) // takes the place of an idle key
	if got := entries(s, "c", 0); got != "y=2±0" {
		t.Errorf("c: %s, want y=2±0", got)
	}
	if groups, _ := s.Top("", 0); len(groups) != 1 {
		t.Errorf("groups = %+v, want c only", groups)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := topk.New(topk.Config{Capacity: -1, Slices: 61, Interval: time.Millisecond, MaxKeys: 2000})
	if err == nil {
		t.Fatal("New accepted a bad Config")
	}
	for _, want := range []string{"Capacity -1", "Slices 61", "Interval 1ms", "MaxKeys 2000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func BenchmarkRecord(b *testing.B) {
	for _, bc := range []struct {
		name     string
		distinct int
	}{{"tracked", 16}, {"distinct", 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			s, _ := newSummary(b, topk.Config{})
			ps := make([][]byte, min(bc.distinct, 1<<16))
			for i := range ps {
				ps[i] = []byte("ip=198.51.100." + strconv.Itoa(i))
			}
			s.Record("r", ps[0])
			var buf []byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if bc.distinct <= len(ps) {
					s.Record("r", ps[i%bc.distinct])
					continue
				}
				buf = strconv.AppendInt(append(buf[:0], "ip="...), int64(i), 10)
				s.Record("r", buf)
			}
		})
	}
}

// TestReplacesLeastCounted: a new principal takes the counter of the
// least counted one, its count that count plus one, its error that count.
func TestReplacesLeastCounted(t *testing.T) {
	t.Parallel()
	s, _ := newSummary(t, topk.Config{Capacity: 2})
	record(s, "r", "a", 5)
	record(s, "r", "b", 1)
	record(s, "r", "c", 1)
	if got, want := entries(s, "r", 0), "a=5±0 c=2±1"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	record(s, "r", "b", 3) // takes c's counter (2): 3 of its own, error 2
	if got, want := entries(s, "r", 0), "a=5±0 b=5±2"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestOlderRecordKeepsNewerSlice: a record whose time is a whole
// interval older than the slice now in its place (it read the clock long
// before it got the lock, or the clock stepped back) is not counted, and
// does not wipe that slice.
func TestOlderRecordKeepsNewerSlice(t *testing.T) {
	t.Parallel()
	s, clk := newSummary(t, topk.Config{Capacity: 4, Slices: 6, Interval: time.Minute})
	clk.Advance(time.Minute) // slice 6, in the place of slice 0
	record(s, "r", "a", 3)
	clk.Advance(-time.Minute) // slice 0
	record(s, "r", "b", 1)
	clk.Advance(time.Minute)
	if got, want := entries(s, "r", 0), "a=3±0"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
