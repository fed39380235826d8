package concurrency

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Option configures New.
type Option func(*config)

// config is what Options set; errs collects their errors.
type config struct {
	global     int64
	globalName string
	perKey     []PerKey
	names      []capName // every cap's name, in option order
	retryAfter time.Duration
	wait       Wait
	clock      floodgate.Clock
	errs       []error
}

// capName is the name of one per-key cap, and the option that added it.
type capName struct{ option, name string }

func (o *config) fail(option, format string, args ...any) {
	o.errs = append(o.errs, errors.New("concurrency: "+option+": "+fmt.Sprintf(format, args...)))
}

// WithGlobal caps the requests in flight on this instance at limit (>= 1),
// reported under the policy name DefaultPolicy unless WithGlobalPolicy
// renames it.
func WithGlobal(limit int64) Option {
	return func(o *config) {
		if limit < 1 {
			o.fail("WithGlobal", "limit %d must be >= 1", limit)
		}
		o.global = limit
	}
}

// WithGlobalPolicy renames the global cap's policy (default DefaultPolicy).
func WithGlobalPolicy(name string) Option {
	return func(o *config) {
		if name == "" {
			o.fail("WithGlobalPolicy", "policy name is empty")
		}
		o.globalName = name
	}
}

// PerKey describes a per-key cap on this instance, for WithPerKey. The zero
// value of an optional field is its default; New reports a bad field by its
// name.
type PerKey struct {
	// Name is the cap's policy name, reported in Decisions. Required: it
	// must be non-empty, must not contain ':' and must differ from every
	// other cap's name.
	Name string
	// Cap is the most requests in flight per key. Required: at least 1.
	Cap int64
	// Key computes the key a request is counted under. ok false means the
	// cap does not apply to r (for example another method). The empty
	// string is a valid key: every request that maps to it shares one
	// count. It must be fast and, to keep Admit allocation-free, should
	// return a string that already exists (a field of r) rather than
	// build one. Required: nil is an error.
	Key func(r *floodgate.Request) (key string, ok bool)
	// MaxKeys bounds the number of keys in flight at once; a request for a
	// new key beyond it is denied with ErrTooManyKeys. 0 means
	// DefaultMaxKeys; it must not be negative.
	MaxKeys int
}

// WithPerKey adds a per-key cap on this instance. A Limiter holds at most
// MaxPerKeyCaps of them.
func WithPerKey(c PerKey) Option {
	return func(o *config) {
		f := o.fields("WithPerKey", "PerKey", c.Name)
		f.checkCap(c.Cap, c.Key)
		if c.MaxKeys < 0 {
			f.bad("MaxKeys", "%d is negative", c.MaxKeys)
		}
		if c.MaxKeys == 0 {
			c.MaxKeys = DefaultMaxKeys
		}
		o.perKey = append(o.perKey, c)
	}
}

// WithRetryAfter sets the RetryAfter of a deny (> 0; default
// DefaultRetryAfter).
func WithRetryAfter(d time.Duration) Option {
	return func(o *config) {
		if d <= 0 {
			o.fail("WithRetryAfter", "retry-after %s must be positive", d)
		}
		o.retryAfter = d
	}
}

// WithWait lets a request that finds a cap full wait up to w.Max for a
// slot instead of being denied at once (see the package documentation,
// "Waiting for a slot"); SetWait changes it at run time.
func WithWait(w Wait) Option {
	return func(o *config) {
		for _, e := range w.fieldErrors("") {
			o.fail("WithWait", "Wait.%s %s", waitFieldNames[e.Path], e.Err)
		}
		o.wait = w
	}
}

// waitFieldNames maps Wait's policy file keys to its Go field names.
var waitFieldNames = map[string]string{"max": "Max", "queue": "Queue", "order": "Order", "target": "Target", "interval": "Interval"}

// WithClock sets the Clock a wait for a slot is timed on (default
// floodgate.SystemClock(); a Clock with an After method, as package
// testing/clock's fake has, times the wait itself).
func WithClock(c floodgate.Clock) Option {
	return func(o *config) {
		if c == nil {
			o.fail("WithClock", "clock is nil")
			return
		}
		o.clock = c
	}
}

// fields reports the bad fields of one cap description, typ (PerKey)
// given to option; it also records the cap's name.
type fields struct {
	o      *config
	option string
	typ    string
	name   string
}

func (o *config) fields(option, typ, name string) fields {
	f := fields{o: o, option: option, typ: typ, name: name}
	switch {
	case name == "":
		o.fail(option, "%s.Name is empty", typ)
	case strings.Contains(name, ":"):
		o.fail(option, "%s.Name %q contains ':'", typ, name)
	}
	o.names = append(o.names, capName{option, name})
	return f
}

// bad reports field of the cap description: "<option>: <typ>.<field>
// <problem> (cap <name>)".
func (f fields) bad(field, format string, args ...any) {
	msg := f.typ + "." + field + " " + fmt.Sprintf(format, args...)
	if f.name != "" {
		msg += fmt.Sprintf(" (cap %q)", f.name)
	}
	f.o.fail(f.option, "%s", msg)
}

// checkCap checks the fields every cap description has besides Name.
func (f fields) checkCap(capN int64, key keyFunc) {
	if capN < 1 {
		f.bad("Cap", "%d must be >= 1", capN)
	}
	if key == nil {
		f.bad("Key", "is nil")
	}
}

// checkCaps reports what no single option can see: no cap at all, too many
// caps, and a name used twice.
func (o *config) checkCaps() {
	if o.global == 0 && len(o.perKey) == 0 {
		o.errs = append(o.errs, errors.New("concurrency: no cap configured (use WithGlobal or WithPerKey; fleet-wide caps are package concurrency/fleetconc's)"))
	}
	if len(o.perKey) > MaxPerKeyCaps {
		o.fail("WithPerKey", "%d per-key caps, at most %d", len(o.perKey), MaxPerKeyCaps)
	}
	seen := map[string]bool{}
	if o.global > 0 {
		seen[o.globalName] = true
	}
	for _, n := range o.names {
		if n.name != "" && seen[n.name] {
			o.fail(n.option, "cap name %q is used twice", n.name)
		}
		seen[n.name] = true
	}
}
