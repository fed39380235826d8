package storetest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// recorder collects what a check reports; Fatalf ends the check's
// goroutine as testing.T does.
type recorder struct{ msgs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(f string, a ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(f, a...))
}
func (r *recorder) Fatalf(f string, a ...any) {
	r.Errorf(f, a...)
	runtime.Goexit()
}

// runRecorded runs f with a recorder on its own goroutine and returns what
// it reported.
func runRecorded(f func(r reporter)) []string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msgs
}

func vector(t *testing.T, name string) Vector {
	for _, v := range Vectors {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no vector %q", name)
	return Vector{}
}

// partial is a non-atomic store: when a Take denies, it still charges the
// buckets that allowed on their own.
type partial struct{ inner quota.Store }

func (p partial) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	ok, err := p.inner.Take(ctx, bs, res)
	if err != nil || ok {
		return ok, err
	}
	saved := append([]quota.Result(nil), res[:len(bs)]...)
	for i := range bs {
		if saved[i].Allowed {
			var r [1]quota.Result
			if _, err := p.inner.Take(ctx, bs[i:i+1], r[:]); err != nil {
				return false, err
			}
		}
	}
	copy(res, saved)
	return false, nil
}

// skewed adds 1 µs to every retry-after.
type skewed struct{ inner quota.Store }

func (s skewed) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	ok, err := s.inner.Take(ctx, bs, res)
	for i := range bs {
		if res[i].RetryAfter > 0 {
			res[i].RetryAfter += time.Microsecond
		}
	}
	return ok, err
}

// reworded reports bad input in its own words.
type reworded struct{ inner quota.Store }

func (r reworded) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	ok, err := r.inner.Take(ctx, bs, res)
	if err != nil {
		return false, fmt.Errorf("reworded: %w", err)
	}
	return ok, nil
}

// lenient never reports an error: it drops what it cannot use.
type lenient struct{ inner quota.Store }

func (l lenient) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	if len(res) < len(bs) {
		return true, nil
	}
	ok, err := l.inner.Take(ctx, bs, res)
	if err != nil {
		return true, nil
	}
	return ok, err
}

// mem returns a memstore on clk (nil: the system clock).
func mem(t *testing.T, clk *clock.Fake) *memstore.Store {
	t.Helper()
	var opts []memstore.Option
	if clk != nil {
		opts = append(opts, memstore.WithClock(clk))
	}
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckCatchesPartialCharges(t *testing.T) {
	clk := clock.New(time.Time{})
	st := partial{mem(t, clk)}
	msgs := runRecorded(func(r reporter) { check(r, st, clk, vector(t, "all_or_nothing"), "p:") })
	if len(msgs) == 0 {
		t.Fatal("a store that charges on deny passed all_or_nothing")
	}
	// The probe (step 5) shows the extra charges.
	if !strings.Contains(strings.Join(msgs, "\n"), `step 5 (at 0s) bucket "user"`) {
		t.Fatalf("reports do not show the extra charge:\n%s", strings.Join(msgs, "\n"))
	}
}

func TestCheckCatchesWrongRetryAfter(t *testing.T) {
	for _, v := range Vectors {
		clk := clock.New(time.Time{})
		st := skewed{mem(t, clk)}
		if msgs := runRecorded(func(r reporter) { check(r, st, clk, v, "s:") }); len(msgs) == 0 {
			t.Errorf("%s: a store with retry-after off by 1 µs passed", v.Name)
		}
	}
}

func TestBadInputCatchesLenientStore(t *testing.T) {
	st := lenient{mem(t, nil)}
	msgs := runRecorded(func(r reporter) { badInput(r, st, "l:") })
	if len(msgs) != 19 {
		t.Fatalf("got %d reports, want one per malformed case (19):\n%s", len(msgs), strings.Join(msgs, "\n"))
	}
}

// A store that refuses the right takes in its own words fails too: every
// store must give quota.ValidateTake's text.
func TestBadInputCatchesRewordedErrors(t *testing.T) {
	msgs := runRecorded(func(r reporter) { badInput(r, reworded{mem(t, nil)}, "w:") })
	if len(msgs) != 19 {
		t.Fatalf("got %d reports, want one per malformed case (19):\n%s", len(msgs), strings.Join(msgs, "\n"))
	}
	if want := `negative cost: Take error:
 got  reworded: quota: bucket 0 ("w:c"): cost -1 is negative
 want quota: bucket 0 ("w:c"): cost -1 is negative (quota.ValidateTake's)`; !strings.Contains(strings.Join(msgs, "\n"), want) {
		t.Fatalf("reports do not show the reworded error against the expected one:\n%s", strings.Join(msgs, "\n"))
	}
}

// The real store passes the same checks through the recorder, so the
// failures above come from the broken stores, not from the recorder.
func TestRecorderPassesMemstore(t *testing.T) {
	for _, v := range Vectors {
		clk := clock.New(time.Time{})
		st := mem(t, clk)
		if msgs := runRecorded(func(r reporter) { check(r, st, clk, v, "m:") }); len(msgs) != 0 {
			t.Errorf("%s: %s", v.Name, strings.Join(msgs, "\n"))
		}
	}
	if msgs := runRecorded(func(r reporter) { badInput(r, mem(t, nil), "m:") }); len(msgs) != 0 {
		t.Errorf("badInput: %s", strings.Join(msgs, "\n"))
	}
}

// settleWrong is a memstore whose Settle is wrong: "noop" settles
// nothing, "twice" applies every adjustment twice, "nodebt" never lets a
// charge overdraw a bucket (it settles only what the bucket holds, like a
// capped refund the other way), "nogiveback" ignores negative costs (the
// units given back).
type settleWrong struct {
	*memstore.Store
	how string
}

func (w settleWrong) Settle(ctx context.Context, bs []quota.Bucket, took []quota.Result) error {
	switch w.how {
	case "noop":
		return nil
	case "twice":
		if err := w.Store.Settle(ctx, bs, took); err != nil {
			return err
		}
		return w.Store.Settle(ctx, bs, took)
	case "nogiveback":
		if err := quota.ValidateSettle(bs, took); err != nil {
			return err
		}
		kept := make([]quota.Bucket, 0, len(bs))
		for _, b := range bs {
			if b.Cost > 0 {
				kept = append(kept, b)
			}
		}
		return w.Store.Settle(ctx, kept, took)
	}
	// nodebt: charge at most what a zero-cost take says remains.
	capped := append([]quota.Bucket(nil), bs...)
	for i := range capped {
		if capped[i].Cost <= 0 {
			continue
		}
		probe := capped[i]
		probe.Cost = 0
		var r [1]quota.Result
		if _, err := w.Store.Take(ctx, []quota.Bucket{probe}, r[:]); err != nil {
			return err
		}
		capped[i].Cost = min(capped[i].Cost, r[0].Remaining)
	}
	return w.Store.Settle(ctx, capped, took)
}

func TestSettleVectorsCatchWrongSettles(t *testing.T) {
	for _, how := range []string{"noop", "twice", "nodebt", "nogiveback"} {
		for _, v := range SettleVectors {
			if (how == "nodebt" && (!settles(v, 1) || v.Name == "settle/hierarchy")) || (how == "nogiveback" && !settles(v, -1)) {
				continue // no debt, or nothing given back, in it
			}
			clk := clock.New(time.Time{})
			st := settleWrong{Store: mem(t, clk), how: how}
			if msgs := runRecorded(func(r reporter) { check(r, st, clk, v, "s:") }); len(msgs) == 0 {
				t.Errorf("%s: a store whose Settle is wrong (%s) passed", v.Name, how)
			}
		}
	}
	msgs := runRecorded(func(r reporter) { settleBadInput(r, settleWrong{Store: mem(t, nil), how: "noop"}, "n:") })
	if len(msgs) != 5 {
		t.Errorf("a Settle that accepts everything: %d reports, want 5:\n%s", len(msgs), strings.Join(msgs, "\n"))
	}
}

// settles reports whether v has a Settle step with a cost of sign's sign.
func settles(v Vector, sign int64) bool {
	for _, step := range v.Steps {
		for _, c := range step.Charges {
			if step.Settle && c.Cost*sign > 0 {
				return true
			}
		}
	}
	return false
}

// noWait is a memstore that ignores MaxWait: it decides every take as if
// no bucket could wait.
type noWait struct{ *memstore.Store }

func (n noWait) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	plain := append([]quota.Bucket(nil), bs...)
	for i := range plain {
		plain[i].MaxWait = 0
	}
	return n.Store.Take(ctx, plain, res)
}

func TestWaitVectorsCatchStoresThatDoNotWait(t *testing.T) {
	for _, v := range WaitVectors {
		clk := clock.New(time.Time{})
		if msgs := runRecorded(func(r reporter) { check(r, noWait{mem(t, clk)}, clk, v, "w:") }); len(msgs) == 0 {
			t.Errorf("%s: a store that never waits passed", v.Name)
		}
	}
}

func TestRecorderPassesMemstoreSettleAndWait(t *testing.T) {
	for _, v := range append(append([]Vector(nil), SettleVectors...), WaitVectors...) {
		clk := clock.New(time.Time{})
		st := mem(t, clk)
		if msgs := runRecorded(func(r reporter) { check(r, st, clk, v, "m:") }); len(msgs) != 0 {
			t.Errorf("%s: %s", v.Name, strings.Join(msgs, "\n"))
		}
	}
	if msgs := runRecorded(func(r reporter) { settleBadInput(r, mem(t, nil), "m:") }); len(msgs) != 0 {
		t.Errorf("settleBadInput: %s", strings.Join(msgs, "\n"))
	}
}

// stripped forgets the partial grants and calendar windows of every take:
// it charges the whole cost and counts in windows of Limit.Period.
type stripped struct{ inner quota.Store }

func (s stripped) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	cp := append([]quota.Bucket(nil), bs...)
	for i := range cp {
		cp[i].AtMost, cp[i].Span = false, quota.Span{}
	}
	return s.inner.Take(ctx, cp, res)
}

// Every partial and calendar vector fails a store that ignores AtMost and
// Span, and passes memstore through the same recorder.
func TestPartialAndCalendarVectorsCatchStoresThatIgnoreThem(t *testing.T) {
	for _, v := range append(append([]Vector(nil), PartialVectors...), CalendarVectors...) {
		clk := clock.New(time.Time{})
		if msgs := runRecorded(func(r reporter) { check(r, stripped{mem(t, clk)}, clk, v, "x:") }); len(msgs) == 0 {
			t.Errorf("%s: a store that ignores AtMost and Span passed", v.Name)
		}
		clk = clock.New(time.Time{})
		if msgs := runRecorded(func(r reporter) { check(r, mem(t, clk), clk, v, "m:") }); len(msgs) != 0 {
			t.Errorf("%s: memstore failed:\n%s", v.Name, strings.Join(msgs, "\n"))
		}
	}
}
