package core

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults both shedders share.
const (
	DefaultHysteresis = 0.05
	DefaultRetryAfter = time.Second
	DefaultPriority   = floodgate.PriorityWrite
)

// Settings are the settings both shedders' constructors take, and the
// errors their options report.
type Settings struct {
	Hysteresis      float64            // the band, a share of capacity
	Hold            time.Duration      // the least time shedding lasts
	RetryAfter      time.Duration      // of a shed Decision
	DefaultPriority floodgate.Priority // of a request with PriorityUnspecified
	Clock           floodgate.Clock    // nil until an option sets one
	Policy          string             // of a shed Decision
	Errs            []error            // every error the options and the constructor report
	pkg             string             // the error prefix: the package name
}

// NewSettings returns the defaults, with policy as the Policy of shed
// Decisions and errors prefixed by pkg.
func NewSettings(pkg, policy string) Settings {
	return Settings{
		Hysteresis:      DefaultHysteresis,
		RetryAfter:      DefaultRetryAfter,
		DefaultPriority: DefaultPriority,
		Policy:          policy,
		pkg:             pkg,
	}
}

// Errorf records an error of the constructor itself.
func (s *Settings) Errorf(format string, args ...any) {
	s.Errs = append(s.Errs, errors.New(s.pkg+": "+fmt.Sprintf(format, args...)))
}

// Fail records the error of the option named option.
func (s *Settings) Fail(option, format string, args ...any) {
	s.Errs = append(s.Errs, errors.New(s.pkg+": "+option+": "+fmt.Sprintf(format, args...)))
}

// Pkg returns the package name errors start with.
func (s *Settings) Pkg() string { return s.pkg }

// TimeSource returns the Clock set by an option, or the system clock.
func (s *Settings) TimeSource() floodgate.Clock {
	if s.Clock == nil {
		return floodgate.SystemClock()
	}
	return s.Clock
}

// Apply runs opts on c, reporting a nil one in s as a nil typeName.
func Apply[C any, O ~func(*C)](c *C, s *Settings, typeName string, opts []O) {
	for _, opt := range opts {
		if opt == nil {
			s.Errs = append(s.Errs, errors.New(s.pkg+": nil "+typeName))
			continue
		}
		opt(c)
	}
}

// SetHysteresis checks and sets the band and hold of option.
func (s *Settings) SetHysteresis(option string, band float64, hold time.Duration) {
	if math.IsNaN(band) || band < 0 || band >= 0.5 {
		s.Fail(option, "hysteresis band %v is out of range [0, 0.5)", band)
	}
	if hold < 0 {
		s.Fail(option, "hysteresis hold %s is negative", hold)
	}
	s.Hysteresis, s.Hold = band, hold
}

// SetRetryAfter checks and sets the RetryAfter of option.
func (s *Settings) SetRetryAfter(option string, d time.Duration) {
	if d <= 0 {
		s.Fail(option, "retry-after %s must be positive", d)
	}
	s.RetryAfter = d
}

// SetDefaultPriority checks and sets the default priority of option.
func (s *Settings) SetDefaultPriority(option string, p floodgate.Priority) {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		s.Fail(option, "default priority %v is not one of critical, write, read, test", p)
	}
	s.DefaultPriority = p
}

// SetClock checks and sets the Clock of option.
func (s *Settings) SetClock(option string, clock floodgate.Clock) {
	if clock == nil {
		s.Fail(option, "clock is nil")
		return
	}
	s.Clock = clock
}

// SetPolicy checks and sets the policy name of option.
func (s *Settings) SetPolicy(option, name string) {
	if name == "" {
		s.Fail(option, "policy name is empty")
	}
	s.Policy = name
}
