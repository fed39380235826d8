package tiers

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Calendar quotas. A rule whose rate is counted per calendar unit
// ("50000/month") counts in fixed windows that start at midnight in the
// rule's time zone (Rule.TimeZone): every day, on a weekday
// (Rule.WeekStarts), on the first of each month or on January 1st. The
// Limiter computes the window holding the request's time on its clock
// (WithClock) and hands it to the store as the bucket's quota.Span, so
// the store counts windows of unequal length (a 31-day month, a 23-hour
// day of a DST change) exactly, needs no time-zone data, and reports the
// window's end as Reset and RetryAfter.

// Calendar is the unit of a calendar rate; the zero value is no calendar
// (a rate per duration).
type Calendar uint8

// Calendar units, written after the slash of a rate: "1000/day".
const (
	// NoCalendar: the rate is per Rate.Period, in windows of that length.
	NoCalendar Calendar = iota
	// CalendarDay resets at midnight.
	CalendarDay
	// CalendarWeek resets at midnight starting Rule.WeekStarts.
	CalendarWeek
	// CalendarMonth resets at midnight starting the first of the month.
	CalendarMonth
	// CalendarYear resets at midnight starting January 1st.
	CalendarYear
)

var calendarNames = [...]string{"", "day", "week", "month", "year"}

// nominal is each unit's nominal length: Rate.Period of a calendar rate.
// The store counts the true window (quota.Bucket.Span).
var nominal = [...]time.Duration{0, 24 * time.Hour, 7 * 24 * time.Hour, 31 * 24 * time.Hour, 366 * 24 * time.Hour}

// String returns the unit's name as written in a rate ("month"), or ""
// for NoCalendar.
func (c Calendar) String() string {
	if int(c) < len(calendarNames) {
		return calendarNames[c]
	}
	return fmt.Sprintf("calendar(%d)", uint8(c))
}

// parseCalendar returns the unit named s, if s names one.
func parseCalendar(s string) (Calendar, bool) {
	for i, n := range calendarNames[1:] {
		if s == n {
			return Calendar(i + 1), true
		}
	}
	return NoCalendar, false
}

// weekdays are the names week_starts accepts.
var weekdays = [...]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// parseWeekday returns the weekday named s (case-insensitive).
func parseWeekday(s string) (time.Weekday, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for i, n := range weekdays {
		if t == n {
			return time.Weekday(i), nil
		}
	}
	return 0, fmt.Errorf("unknown weekday %q (want one of %s)", s, strings.Join(weekdays[:], ", "))
}

// calendar is a compiled calendar rate: its unit, zone and first weekday,
// and the window last computed, which every request until its end reuses.
type calendar struct {
	unit  Calendar
	loc   *time.Location
	week  time.Weekday
	clock floodgate.Clock
	cur   atomic.Pointer[quota.Span]
}

// span returns the window holding the clock's now.
func (c *calendar) span() quota.Span {
	now := c.clock.Now()
	if s := c.cur.Load(); s != nil && !now.Before(s.Start) && now.Before(s.End) {
		return *s
	}
	s := c.window(now)
	c.cur.Store(&s)
	return s
}

// window returns the calendar window holding now: from midnight (in c's
// zone) of its first day to midnight of the first day after it.
func (c *calendar) window(now time.Time) quota.Span {
	t := now.In(c.loc)
	y, m, d := t.Date()
	var from, to time.Time
	switch c.unit {
	case CalendarDay:
		from, to = c.midnight(y, m, d), c.midnight(y, m, d+1)
	case CalendarWeek:
		back := (int(t.Weekday()) - int(c.week) + 7) % 7
		from, to = c.midnight(y, m, d-back), c.midnight(y, m, d-back+7)
	case CalendarMonth:
		from, to = c.midnight(y, m, 1), c.midnight(y, m+1, 1)
	default: // CalendarYear
		from, to = c.midnight(y, 1, 1), c.midnight(y+1, 1, 1)
	}
	// A zone whose midnight is skipped (a DST change at 00:00) has no
	// such instant: time.Date then picks one of the two offsets, the same
	// one for every request, so the window keeps one start.
	return quota.Span{Start: from.UTC(), End: to.UTC()}
}

func (c *calendar) midnight(y int, m time.Month, d int) time.Time {
	return time.Date(y, m, d, 0, 0, 0, 0, c.loc)
}

// compileCalendar checks a rule's calendar rate and its time zone and
// first weekday, and returns the compiled calendar (nil: the rule has no
// calendar rate) and whether the rule is fine. A calendar rate is the
// rule's own single rate, counted by fixed_window, without settle (its
// overrides count per the same unit: overrideCalendar); time_zone and
// week_starts need one.
func (rc *ruleCompiler) compileCalendar(rp string, r *Rule) (*calendar, bool) {
	u := r.Rate.Calendar
	if u == NoCalendar {
		ok := true
		if r.TimeZone != "" {
			rc.rep.add(rp+".time_zone", "is only for a calendar rate (rate: N/day, N/week, N/month or N/year)")
			ok = false
		}
		if r.WeekStarts != 0 {
			rc.rep.add(rp+".week_starts", "is only for a weekly rate (rate: N/week)")
			ok = false
		}
		return nil, ok
	}
	ok := true
	if int(u) >= len(calendarNames) {
		rc.rep.addf(rp+".rate", "unknown calendar unit %d", u)
		return nil, false
	}
	if r.Algorithm != quota.FixedWindow {
		rc.rep.addf(rp+".algorithm", "a calendar rate (%s) counts in fixed windows: algorithm must be fixed_window, not %s", r.Rate, r.Algorithm)
		ok = false
	}
	if u != CalendarWeek && r.WeekStarts != 0 {
		rc.rep.addf(rp+".week_starts", "is only for a weekly rate (rate: N/week), not N/%s", u)
		ok = false
	}
	if r.WeekStarts < time.Sunday || r.WeekStarts > time.Saturday {
		rc.rep.addf(rp+".week_starts", "unknown weekday %d", r.WeekStarts)
		ok = false
	}
	if r.Settle {
		rc.rep.add(rp+".settle", "a calendar rate cannot settle")
		ok = false
	}
	loc := time.UTC
	if r.TimeZone != "" {
		l, err := time.LoadLocation(r.TimeZone)
		if err != nil || r.TimeZone == "Local" {
			rc.rep.addf(rp+".time_zone", "unknown time zone %q (want an IANA name such as Europe/Berlin, or UTC)", r.TimeZone)
			ok = false
		} else {
			loc = l
		}
	}
	if !ok {
		return nil, false
	}
	return &calendar{unit: u, loc: loc, week: r.WeekStarts, clock: floodgate.SystemClock()}, true
}

// setClock makes every calendar rule of c compute its windows on clk.
func (c *compiled) setClock(clk floodgate.Clock) {
	if clk == nil {
		return
	}
	for i := range c.rules {
		if cal := c.rules[i].cal; cal != nil {
			cal.clock = clk
		}
	}
}

// calendarField decodes a rule's time_zone or week_starts (key).
func (d *decoder) calendarField(key string, v *yaml.Node, fp string, r *Rule) {
	if key == "time_zone" {
		tz, ok := d.str(v, fp)
		r.TimeZone = tz
		if ok && tz == "" {
			d.fail(fp, v, "must not be empty (omit time_zone for UTC)")
		}
		return
	}
	if s, ok := d.str(v, fp); ok {
		wd, err := parseWeekday(s)
		if err != nil {
			d.fail(fp, v, "%s", err.Error())
		}
		r.WeekStarts = wd
	}
}

// overrideCalendar returns the rate of override o of rule r as limitsOf
// compiles it: a calendar rule's override counts per the rule's unit
// ("100000/month" for a rule of "50000/month"), in the rule's zone, and
// is compiled as one window of the unit's nominal length.
func (rc *ruleCompiler) overrideCalendar(op string, o *Override, r *cRule) (Rate, bool) {
	rate := o.Rate
	if r.cal == nil {
		return rate, true // limitsOf refuses a calendar rate
	}
	switch {
	case len(o.Windows) > 0 || rate.Calendar != r.cal.unit:
		rc.rep.addf(op+".rate", "rule %q counts per %s: its override's rate must too (N/%s)", o.Rule, r.cal.unit, r.cal.unit)
		return rate, false
	case o.Algorithm != nil && *o.Algorithm != quota.FixedWindow:
		rc.rep.addf(op+".algorithm", "rule %q has a calendar rate, counted in fixed windows: not %s", o.Rule, *o.Algorithm)
		return rate, false
	}
	rate.Calendar = NoCalendar
	return rate, true
}
