package tiers_test

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones these tests name, on a machine without a zone database too

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// calendarLimiter returns a Limiter with policy over a memstore, both on
// a fake clock set to start.
func calendarLimiter(t *testing.T, start time.Time, policy string) (*tiers.Limiter, *clock.Fake) {
	t.Helper()
	clk := clock.New(start)
	s := newMemstore(t, memstore.WithClock(clk))
	return mustLimiter(t, s, policy, tiers.WithClock(clk)), clk
}

// calendarStores are the stores the month-end test runs on: memstore, and
// Redis, whose take.lua counts the window the Limiter computed.
var calendarStores = map[string]func(t *testing.T, clk *clock.Fake) quota.Store{
	"memstore": func(t *testing.T, clk *clock.Fake) quota.Store { return newMemstore(t, memstore.WithClock(clk)) },
	"redisstore": func(t *testing.T, clk *clock.Fake) quota.Store {
		s, err := redisstore.New(redistest.Start(t).Client(), redisstore.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	},
}

// drain admits r until the first deny and returns how many were admitted
// and the deny.
func drain(t *testing.T, l *tiers.Limiter, r *floodgate.Request, most int) (int, floodgate.Decision) {
	t.Helper()
	for n := 0; n <= most; n++ {
		if d := admit(t, l, r); !d.Allowed {
			return n, d
		}
	}
	t.Fatalf("more than %d admitted", most)
	return 0, floodgate.Decision{}
}

// A monthly quota counts to the last instant of the month and starts
// again at midnight on the first, in the rule's zone; the deny's
// RetryAfter and Reset are the time left to that midnight, and the
// decision's window is the month's true length. On memstore and on Redis.
func TestCalendarMonthEnd(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for name, newStore := range calendarStores {
		t.Run(name, func(t *testing.T) { monthEnd(t, berlin, newStore) })
	}
}

func monthEnd(t *testing.T, berlin *time.Location, newStore func(t *testing.T, clk *clock.Fake) quota.Store) {
	// 2026-01-31 23:00 in Berlin (UTC+1): one hour of January left.
	clk := clock.New(time.Date(2026, 1, 31, 23, 0, 0, 0, berlin))
	l := mustLimiter(t, newStore(t, clk), `
rules:
  - {name: plan, key: [tenant], rate: 5/month, time_zone: Europe/Berlin}
`, tiers.WithClock(clk))
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme"}}
	n, d := drain(t, l, r, 10)
	if n != 5 {
		t.Fatalf("January admitted %d, want 5", n)
	}
	if d.RetryAfter != time.Hour || d.Reset != time.Hour || d.Window != 31*24*time.Hour || d.Limit != 5 {
		t.Fatalf("deny at 23:00: %+v, want RetryAfter and Reset 1h, window 31 days", d)
	}
	clk.Advance(time.Hour - time.Microsecond) // 23:59:59.999999: still January
	if d := admit(t, l, r); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("last µs of January: %+v, want denied for 1µs", d)
	}
	clk.Advance(time.Microsecond) // February 1st, 00:00 in Berlin
	n, d = drain(t, l, r, 10)
	if n != 5 {
		t.Fatalf("February admitted %d, want 5", n)
	}
	if feb := 28 * 24 * time.Hour; d.RetryAfter != feb || d.Reset != feb || d.Window != feb {
		t.Fatalf("deny on February 1st: %+v, want RetryAfter, Reset and window 28 days", d)
	}
}

// A daily quota in a named zone follows its DST change: the day of the
// spring change (Europe/Berlin, 2026-03-29) lasts 23 hours, the autumn
// one (2026-10-25) 25, and each resets at local midnight.
func TestCalendarDayAcrossDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		day    time.Time
		length time.Duration
	}{
		{time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), 23 * time.Hour},
		{time.Date(2026, 10, 25, 0, 0, 0, 0, berlin), 25 * time.Hour},
	} {
		t.Run(c.day.Format("2006-01-02"), func(t *testing.T) {
			l, clk := calendarLimiter(t, c.day.Add(time.Minute), `
rules:
  - {name: daily, key: [user], rate: 3/day, time_zone: Europe/Berlin}
`)
			r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "bob"}}
			n, d := drain(t, l, r, 10)
			if left := c.length - time.Minute; n != 3 || d.RetryAfter != left || d.Window != c.length {
				t.Fatalf("admitted %d, deny %+v; want 3, RetryAfter %v, window %v", n, d, left, c.length)
			}
			clk.Advance(c.length - time.Minute) // the next local midnight
			if got := clk.Now().In(berlin); got.Hour() != 0 || got.Minute() != 0 {
				t.Fatalf("the next day starts at %v, want local midnight", got)
			}
			n, d = drain(t, l, r, 10)
			if n != 3 || d.RetryAfter != 24*time.Hour {
				t.Fatalf("next day admitted %d, deny %+v; want 3, RetryAfter 24h", n, d)
			}
		})
	}
}

// A weekly quota resets at midnight (UTC) on its week_starts day: a week
// starting Monday resets between Sunday 23:59 and Monday 00:00, one
// starting Sunday (the zero value) a day earlier.
func TestCalendarWeekday(t *testing.T) {
	// 2026-01-04 is a Sunday.
	sun := time.Date(2026, 1, 4, 23, 59, 0, 0, time.UTC)
	l, clk := calendarLimiter(t, sun, `
rules:
  - {name: mon, key: [user], rate: 2/week, week_starts: monday}
  - {name: sun, key: [tenant], rate: 2/week}
`)
	mon := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "bob"}}
	sunReq := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme"}}
	n, d := drain(t, l, mon, 5)
	if n != 2 || d.RetryAfter != time.Minute || d.Policy != "mon" {
		t.Fatalf("Sunday 23:59, monday week: admitted %d, %+v; want 2 and a reset in 1m", n, d)
	}
	n, d = drain(t, l, sunReq, 5)
	if week := 7*24*time.Hour - 23*time.Hour - 59*time.Minute; n != 2 || d.RetryAfter != week || d.Policy != "sun" {
		t.Fatalf("Sunday 23:59, sunday week: admitted %d, %+v; want 2 and a reset in %v", n, d, week)
	}
	clk.Advance(time.Minute) // Monday 00:00
	if n, d = drain(t, l, mon, 5); n != 2 || d.RetryAfter != 7*24*time.Hour {
		t.Fatalf("Monday 00:00, monday week: admitted %d, %+v; want 2 more, reset in 7 days", n, d)
	}
	if d := admit(t, l, sunReq); d.Allowed || d.RetryAfter != 6*24*time.Hour {
		t.Fatalf("Monday 00:00, sunday week: %+v, want still denied for 6 days", d)
	}
}

// Bad calendar input is an error naming the field and its line.
func TestCalendarBadInput(t *testing.T) {
	for _, c := range []struct{ policy, want, line string }{
		{"rules:\n  - name: a\n    rate: 5/fortnight\n", `rules[0].rate: "5/fortnight" is not N/duration`, "at line 3"},
		{"rules:\n  - name: a\n    rate: 5/month\n    time_zone: Mars/Olympus\n", `rules[0].time_zone: unknown time zone "Mars/Olympus"`, "at line 4"},
		{"rules:\n  - name: a\n    rate: 5/month\n    algorithm: gcra\n", "rules[0].algorithm: a calendar rate (5/month) counts in fixed windows: algorithm must be fixed_window, not gcra", "at line 4"},
		{"rules:\n  - name: a\n    rate: 5/1h\n    time_zone: UTC\n", "rules[0].time_zone: is only for a calendar rate", "at line 4"},
		{"rules:\n  - name: a\n    rate: 5/month\n    week_starts: monday\n", "rules[0].week_starts: is only for a weekly rate (rate: N/week), not N/month", "at line 4"},
		{"rules:\n  - name: a\n    rate: 5/week\n    week_starts: mondy\n", `rules[0].week_starts: unknown weekday "mondy"`, "at line 4"},
		{"rules:\n  - name: a\n    rate: [5/day, 100/month]\n", "rules[0].rate[0]: a calendar rate (5/day) is only for a rule's own rate", "at line 3"},
	} {
		_, err := tiers.Load([]byte(c.policy))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.line) {
			t.Errorf("policy:\n%s\nerror %v\nwant it to contain %q, %s", c.policy, err, c.want, c.line)
		}
	}
}

// An override of a calendar rule counts per the same unit, in the rule's
// zone: the big tenant gets 4 a day, the others 2, all reset at midnight.
func TestCalendarOverride(t *testing.T) {
	l, clk := calendarLimiter(t, time.Date(2026, 5, 4, 20, 0, 0, 0, time.UTC), `
rules:
  - {name: daily, key: [tenant], rate: 2/day}
overrides:
  - {rule: daily, key: {tenant: big}, rate: 4/day}
`)
	for tenant, want := range map[string]int{"big": 4, "small": 2} {
		r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: tenant}}
		if n, d := drain(t, l, r, 10); n != want || d.RetryAfter != 4*time.Hour || d.Limit != int64(want) {
			t.Fatalf("%s: admitted %d, %+v; want %d and a reset at midnight, 4h away", tenant, n, d, want)
		}
	}
	clk.Advance(4 * time.Hour)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "big"}}
	if n, _ := drain(t, l, r, 10); n != 4 {
		t.Fatalf("big, next day: admitted %d, want 4", n)
	}
	for _, c := range []struct{ override, want string }{
		{"rate: 4/1h", `overrides[0].rate: rule "daily" counts per day: its override's rate must too (N/day)`},
		{"rate: 4/week", `overrides[0].rate: rule "daily" counts per day`},
		{"rate: 4/day, algorithm: gcra", `overrides[0].algorithm: rule "daily" has a calendar rate, counted in fixed windows: not gcra`},
	} {
		_, err := tiers.Load([]byte("rules:\n  - {name: daily, key: [tenant], rate: 2/day}\noverrides:\n  - {rule: daily, key: {tenant: big}, " + c.override + "}\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "at line 4") {
			t.Errorf("%s: error %v, want %q at line 4", c.override, err, c.want)
		}
	}
}
