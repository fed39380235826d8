package fair

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
)

func tenant(t string) *floodgate.Request {
	return &floodgate.Request{Identity: floodgate.Identity{Tenant: t}}
}

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		room, w, active int64
		over            bool
		want            int64
	}{
		{80, 1000, 5000, false, 24}, // share 16, burst 1.5
		{80, 1000, 5000, true, 16},  // over: the share
		{80, 1000, 1000, false, 80}, // alone: the room, no more
		{80, 1000, 0, true, 80},     // active below its own weight: counted as alone
		{10, 1000, 3000, true, 3},   // share 3.33: rounded down
		{10, 1000, 3000, false, 5},  // 5.0: rounded up
		{1, 1000, 100000, true, 1},  // a share below one request is one
		{80, 3000, 6000, true, 40},  // weight 3 of 6
	} {
		if got := Limit(c.room, c.w, c.active, c.over); got != c.want {
			t.Errorf("Limit(%d, %d, %d, over %v) = %d, want %d", c.room, c.w, c.active, c.over, got, c.want)
		}
	}
}

func TestHoldCountsUntilDone(t *testing.T) {
	s := New(&floodgate.Fairness{By: "tenant", Weights: map[string]float64{"pro": 3}})
	calls := 0
	next := func(floodgate.Result) { calls++ }
	var dones []floodgate.Done
	for range 5 {
		dones = append(dones, s.Hold(tenant("a"), next))
	}
	pro := tenant("b")
	pro.Tier = "pro"
	dones = append(dones, s.Hold(pro, next))
	if got := s.InFlight(tenant("a")); got != 5 {
		t.Fatalf("a holds %d, want 5", got)
	}
	if got := s.active.Load(); got != 4*milli {
		t.Fatalf("active weight %d, want %d (a 1, b 3)", got, 4*milli)
	}
	if s.Callers() != 2 {
		t.Fatalf("callers %d, want 2", s.Callers())
	}
	for _, d := range dones {
		d(floodgate.Result{})
	}
	if calls != 6 {
		t.Fatalf("the wrapped Done ran %d times, want 6", calls)
	}
	if s.Callers() != 0 || s.active.Load() != 0 {
		t.Fatalf("after every Done: %d callers, active %d; want none", s.Callers(), s.active.Load())
	}
}

// A caller is refused at Burst times its share while its recent requests
// were seldom refused, and held to its share once over a third of them
// were (7 refusals in a row from none); when the stage is not shedding,
// only a caller over its share is refused.
func TestAdmits(t *testing.T) {
	s := New(&floodgate.Fairness{By: "tenant"})
	noisy, quiet := tenant("noisy"), tenant("quiet")
	if !s.Admits(quiet, 80, true) {
		t.Fatal("a caller with nothing in flight is refused")
	}
	var dones []floodgate.Done
	for range 60 {
		dones = append(dones, s.Hold(noisy, nil))
	}
	s.Hold(quiet, nil)
	// Two callers: share 40, burst 60. noisy holds 60.
	for i := range 6 {
		if s.Admits(noisy, 80, true) {
			t.Fatalf("noisy at 60 of its burst 60 admitted (refusal %d)", i+1)
		}
	}
	dones[0](floodgate.Result{}) // noisy holds 59: under its burst, not over yet
	if !s.Admits(noisy, 80, true) {
		t.Fatal("noisy at 59 of 60, six refusals in, refused")
	}
	dones = dones[1:]
	s.Hold(noisy, nil)
	if s.Admits(noisy, 80, true) {
		t.Fatal("noisy at 60 of 60 admitted")
	}
	// Its refused share: 1-(15/16)^6 = 0.321 after six refusals, 0.301
	// after the admit, 0.345 after this last refusal: over a third, so it
	// is held to its share, 40, from now on.
	for s.InFlight(noisy) > 40 {
		dones[0](floodgate.Result{})
		dones = dones[1:]
	}
	if s.Admits(noisy, 80, true) {
		t.Fatal("noisy, over its share, admitted at 40 of its share 40")
	}
	if s.Admits(noisy, 80, false) {
		t.Fatal("noisy, over its share, admitted at 40 when the stage does not shed")
	}
	dones[0](floodgate.Result{})
	if !s.Admits(noisy, 80, false) {
		t.Fatal("noisy at 39 of its share 40 refused when the stage does not shed")
	}
	if !s.Admits(quiet, 80, false) || !s.Admits(quiet, 80, true) {
		t.Fatal("quiet at 1 refused")
	}
}

func TestCallersByIdentity(t *testing.T) {
	ip := func(s string) *floodgate.Request {
		return &floodgate.Request{Identity: floodgate.Identity{IP: netip.MustParseAddr(s), Tenant: "same"}}
	}
	s := New(&floodgate.Fairness{By: "ip"})
	s.Hold(ip("10.0.0.1"), nil)
	s.Hold(ip("10.0.0.2"), nil)
	s.Hold(ip("10.0.0.1"), nil)
	if s.Callers() != 2 || s.InFlight(ip("10.0.0.1")) != 2 {
		t.Fatalf("by ip: %d callers, 10.0.0.1 holds %d; want 2 and 2", s.Callers(), s.InFlight(ip("10.0.0.1")))
	}
	u := New(&floodgate.Fairness{By: "user"})
	u.Hold(&floodgate.Request{Identity: floodgate.Identity{User: "x", Tenant: "t"}}, nil)
	u.Hold(&floodgate.Request{Identity: floodgate.Identity{User: "y", Tenant: "t"}}, nil)
	u.Hold(&floodgate.Request{}, nil)
	if u.Callers() != 3 {
		t.Fatalf("by user: %d callers, want 3 (x, y and the requests without a user)", u.Callers())
	}
}

func TestFieldErrors(t *testing.T) {
	errs := FieldErrors(&floodgate.Fairness{By: "org", Weights: map[string]float64{"free": 0, "pro": 2}})
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{`by: "org" is not one of tenant, user, api_key, ip`, "weights.free: 0 must be a number in (0, 1e6]"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if errs := FieldErrors(&floodgate.Fairness{By: "api_key"}); errs != nil {
		t.Fatalf("a good Fairness: %v", errs)
	}
}

func TestSame(t *testing.T) {
	f := &floodgate.Fairness{By: "tenant", Weights: map[string]float64{"pro": 4}}
	s := New(f)
	if !s.Same(Copy(f)) {
		t.Fatal("a Share is not the Same as its own Fairness")
	}
	if s.Same(&floodgate.Fairness{By: "tenant", Weights: map[string]float64{"pro": 5}}) || s.Same(&floodgate.Fairness{By: "user", Weights: map[string]float64{"pro": 4}}) || s.Same(nil) {
		t.Fatal("a changed Fairness is the Same")
	}
	if !(*Share)(nil).Same(nil) {
		t.Fatal("no fairness is not the same as no fairness")
	}
}

func TestHoldAllocatesNothing(t *testing.T) {
	s := New(&floodgate.Fairness{By: "tenant"})
	r := tenant("a")
	s.Hold(r, nil) // a's entry stays: the measured holds find it
	if n := testing.AllocsPerRun(1000, func() { s.Hold(r, nil)(floodgate.Result{}) }); n != 0 {
		t.Fatalf("Hold and its Done: %v allocations, want 0", n)
	}
}
