package tiers

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
)

// The shedder: and concurrency: sections of a policy (issue 19): the load
// shedder's and the in-flight limiters' settings, in the same file as the
// rate limits and reloaded with them.
//
//	shedder:
//	  capacity: 200                      # a fixed capacity; with adaptive, where it starts
//	  thresholds: {test: 0.7, read: 0.8, write: 0.9}
//	  adaptive:                          # the capacity follows the service
//	    min: 16
//	    max: 2000
//	    cpu_target: 0.9                  # needs the Shedder built WithCPU
//	    # window: 100ms, min_samples: 10, history: 50, probe: 10s,
//	    # tolerance: 1.5, headroom: 1.25, growth: 0.1, backoff: 0.9
//	  fleet:                             # a *fleetshed.Shedder
//	    capacity: 4000
//	    reserve: 0.2
//	    adaptive: {min: 16, max: 2000}
//	concurrency:
//	  global: 500                        # a *concurrency.Limiter built WithGlobal
//	  adaptive:                          # a *concurrency.Adaptive
//	    algorithm: gradient2             # or vegas, aimd
//	    min: 8
//	    max: 400
//	    bypass: critical                 # never refuse critical calls
//	    # initial, window, min_samples, max_samples, percentile, backoff,
//	    # smoothing, tolerance, long_window, alpha, beta, probe_every,
//	    # timeout, retry_after, name
//
// The keys are the snake_case names of the Go fields (shedder.Config,
// shedder.AdaptiveCapacity, fleetshed.Config,
// concurrency.AdaptiveConfig), with the same defaults and the same
// validation: Load reports a bad value under its path and line
// ("shedder.adaptive.max: 5 must be >= min 10, at line 7"). Package tiers
// only checks the sections; Watch applies them to the stages named by
// WithOverload, on every reload, after checking that each stage takes its
// settings, so that a reload that one of them would refuse leaves the
// rules and every stage as they were.

// ShedderSection is a policy's shedder: section.
type ShedderSection struct {
	// Config sets a *shedder.Shedder: the section's capacity, thresholds
	// and adaptive keys. nil when the section has none of them.
	Config *shedder.Config
	// Fleet sets a *fleetshed.Shedder (the fleet: key); nil when absent.
	Fleet *fleetshed.Config

	lines map[string]int // YAML path -> line, for errors found when applied
}

// ConcurrencySection is a policy's concurrency: section.
type ConcurrencySection struct {
	// Global is the global cap of a *concurrency.Limiter built
	// WithGlobal (the global: key); 0 when absent.
	Global int64
	// Adaptive sets a *concurrency.Adaptive (the adaptive: key); nil
	// when absent.
	Adaptive *concurrency.AdaptiveConfig

	lines map[string]int
}

// overload decodes the shedder: or concurrency: section (key) into p.
func (d *decoder) overload(key string, n *yaml.Node, path string, p *Policy) {
	switch key {
	case "shedder":
		sec := &ShedderSection{}
		var cfg shedder.Config
		instance := false
		d.fields(n, path, func(k string, v *yaml.Node, fp string) bool {
			switch k {
			case "capacity":
				cfg.Capacity, _ = d.integer(v, fp)
			case "thresholds":
				instance = true
				cfg.Thresholds = shedder.Thresholds{Test: shedder.DefaultTestThreshold, Read: shedder.DefaultReadThreshold, Write: shedder.DefaultWriteThreshold}
				d.fields(v, fp, func(tk string, tv *yaml.Node, tp string) bool {
					switch tk {
					case "test":
						cfg.Thresholds.Test = d.olNumber(tv, tp)
					case "read":
						cfg.Thresholds.Read = d.olNumber(tv, tp)
					case "write":
						cfg.Thresholds.Write = d.olNumber(tv, tp)
					default:
						return false
					}
					return true
				})
			case "adaptive":
				cfg.Adaptive = d.olAdaptiveCapacity(v, fp)
			case "fleet":
				sec.Fleet = &fleetshed.Config{}
				d.fields(v, fp, func(fk string, fv *yaml.Node, ffp string) bool {
					switch fk {
					case "capacity":
						sec.Fleet.Capacity, _ = d.integer(fv, ffp)
					case "reserve":
						sec.Fleet.Reserve = d.olNumber(fv, ffp)
					case "adaptive":
						sec.Fleet.Adaptive = d.olAdaptiveCapacity(fv, ffp)
					default:
						return false
					}
					return true
				})
				switch {
				case sec.Fleet.Capacity == 0 && sec.Fleet.Adaptive != nil:
					sec.Fleet.Capacity = max(sec.Fleet.Adaptive.Min, 1)
				case sec.Fleet.Capacity == 0:
					d.fail(join(fp, "capacity"), v, "required: a fixed fleet capacity, or adaptive: for one that follows the fleet")
				}
			default:
				return false
			}
			return true
		})
		if cfg.Capacity != 0 || instance || cfg.Adaptive != nil {
			switch {
			case cfg.Capacity == 0 && cfg.Adaptive != nil:
				cfg.Capacity = max(cfg.Adaptive.Min, 1)
			case cfg.Capacity == 0:
				d.fail(join(path, "capacity"), n, "required: a fixed capacity, or adaptive: for one that follows the service")
			}
			sec.Config = &cfg
		}
		sec.lines = d.linesUnder(path)
		p.Shedder = sec
	case "concurrency":
		sec := &ConcurrencySection{}
		d.fields(n, path, func(k string, v *yaml.Node, fp string) bool {
			switch k {
			case "global":
				sec.Global, _ = d.integer(v, fp)
			case "adaptive":
				sec.Adaptive = d.olAdaptiveConcurrency(v, fp)
			default:
				return false
			}
			return true
		})
		sec.lines = d.linesUnder(path)
		p.Concurrency = sec
	}
}

// linesUnder returns the lines of path and of every path under it.
func (d *decoder) linesUnder(path string) map[string]int {
	out := map[string]int{}
	for p, l := range d.rep.lines {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			out[p] = l
		}
	}
	return out
}

func (d *decoder) olAdaptiveCapacity(n *yaml.Node, path string) *shedder.AdaptiveCapacity {
	a := &shedder.AdaptiveCapacity{}
	d.fields(n, path, func(k string, v *yaml.Node, fp string) bool {
		switch k {
		case "min":
			a.Min, _ = d.integer(v, fp)
		case "max":
			a.Max, _ = d.integer(v, fp)
		case "window":
			a.Window = d.olDuration(v, fp)
		case "min_samples":
			a.MinSamples = d.olCount(v, fp)
		case "history":
			a.History = d.olCount(v, fp)
		case "probe":
			a.Probe = d.olDuration(v, fp)
		case "tolerance":
			a.Tolerance = d.olNumber(v, fp)
		case "headroom":
			a.Headroom = d.olNumber(v, fp)
		case "growth":
			a.Growth = d.olNumber(v, fp)
		case "backoff":
			a.Backoff = d.olNumber(v, fp)
		case "cpu_target":
			a.CPUTarget = d.olNumber(v, fp)
		default:
			return false
		}
		return true
	})
	return a
}

func (d *decoder) olAdaptiveConcurrency(n *yaml.Node, path string) *concurrency.AdaptiveConfig {
	a := &concurrency.AdaptiveConfig{}
	d.fields(n, path, func(k string, v *yaml.Node, fp string) bool {
		switch k {
		case "name":
			a.Name, _ = d.str(v, fp)
		case "algorithm":
			if s, ok := d.str(v, fp); ok {
				alg, err := concurrency.ParseAlgorithm(s)
				if err != nil {
					d.fail(fp, v, "unknown algorithm %q (want gradient2, vegas or aimd)", s)
				}
				a.Algorithm = alg
			}
		case "initial":
			a.Initial, _ = d.integer(v, fp)
		case "min":
			a.Min, _ = d.integer(v, fp)
		case "max":
			a.Max, _ = d.integer(v, fp)
		case "window":
			a.Window = d.olDuration(v, fp)
		case "min_samples":
			a.MinSamples = d.olCount(v, fp)
		case "max_samples":
			a.MaxSamples = d.olCount(v, fp)
		case "percentile":
			a.Percentile = d.olNumber(v, fp)
		case "backoff":
			a.Backoff = d.olNumber(v, fp)
		case "retry_after":
			a.RetryAfter = d.olDuration(v, fp)
		case "smoothing":
			a.Smoothing = d.olNumber(v, fp)
		case "tolerance":
			a.Tolerance = d.olNumber(v, fp)
		case "long_window":
			a.LongWindow = d.olCount(v, fp)
		case "alpha":
			a.Alpha = d.olNumber(v, fp)
		case "beta":
			a.Beta = d.olNumber(v, fp)
		case "probe_every":
			a.ProbeEvery = d.olCount(v, fp)
		case "timeout":
			a.Timeout = d.olDuration(v, fp)
		case "bypass":
			if s, ok := d.str(v, fp); ok {
				p, err := floodgate.ParsePriority(s)
				if err != nil {
					d.fail(fp, v, "unknown priority %q (want critical, write, read or test)", s)
				}
				a.Bypass = p
			}
		default:
			return false
		}
		return true
	})
	return a
}

// olNumber decodes a positive number (integer or decimal). 0 and negative
// values are refused here: in these sections 0 would silently mean "the
// default".
func (d *decoder) olNumber(n *yaml.Node, path string) float64 {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") {
		d.fail(path, n, "must be a number, got %s", kindName(n))
		return 0
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || v != v {
		d.fail(path, n, "%q is not a number", n.Value)
		return 0
	}
	if v <= 0 {
		d.fail(path, n, "%v must be greater than 0 (leave the key out for the default)", v)
		return 0
	}
	return v
}

// olCount decodes a count >= 1 that fits an int.
func (d *decoder) olCount(n *yaml.Node, path string) int {
	v, ok := d.integer(n, path)
	if !ok {
		return 0
	}
	if v > 1<<31-1 {
		d.fail(path, n, "%d is too large", v)
		return 0
	}
	return int(v)
}

// olDuration decodes a positive duration written as a string ("100ms").
func (d *decoder) olDuration(n *yaml.Node, path string) time.Duration {
	s, ok := d.str(n, path)
	if !ok {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		d.fail(path, n, "%q is not a positive duration such as 100ms", s)
		return 0
	}
	return v
}

// checkOverload reports what the stages' own validation finds wrong with
// p's shedder: and concurrency: sections, under the YAML path of each
// field. compile calls it, so a Policy built in Go is checked too.
func checkOverload(rep *reporter, p *Policy) {
	if s := p.Shedder; s != nil {
		if s.Config != nil {
			reportStage(rep, "shedder", s.Config.Validate())
		}
		if s.Fleet != nil {
			reportStage(rep, "shedder.fleet", s.Fleet.Validate())
		}
	}
	if c := p.Concurrency; c != nil {
		if c.Global < 0 {
			rep.addf("concurrency.global", "%d must be at least 1", c.Global)
		}
		if c.Adaptive != nil {
			reportStage(rep, "concurrency.adaptive", c.Adaptive.Validate())
		}
	}
}

// stageFields are the Go field names the stages' validation errors use,
// by type, with the YAML key of each.
var stageFields = func() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, v := range []any{shedder.Config{}, fleetshed.Config{}, shedder.AdaptiveCapacity{}, shedder.Thresholds{}, concurrency.AdaptiveConfig{}} {
		t := reflect.TypeOf(v)
		m := out[t.Name()] // shedder.Config and fleetshed.Config share one: their fields merge
		if m == nil {
			m = map[string]string{}
		}
		for i := range t.NumField() {
			switch name := t.Field(i).Name; name {
			case "CPU", "Clock": // Go only: no YAML key
			default:
				m[name] = snake(name)
			}
		}
		out[t.Name()] = m
	}
	return out
}()

// reportStage reports each error of a stage's Validate under the YAML path
// of the field it names (base, then "adaptive" for an AdaptiveCapacity or
// the field's key), with Go field names in the message turned into keys.
func reportStage(rep *reporter, base string, err error) {
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		path, msg := base, e.Error()
		for typ, fields := range stageFields {
			i := strings.Index(msg, typ+".")
			if i < 0 {
				continue
			}
			rest := msg[i+len(typ)+1:]
			name := rest
			if j := strings.IndexAny(rest, " :"); j >= 0 {
				name = rest[:j]
			}
			key, ok := fields[name]
			if !ok {
				continue
			}
			if typ == "AdaptiveCapacity" && !strings.HasSuffix(base, ".adaptive") {
				path = join(path, "adaptive")
			}
			path = join(path, key)
			msg = strings.TrimLeft(rest[len(name):], " :")
			for goName, k := range fields {
				msg = replaceWord(msg, goName, k)
			}
			break
		}
		rep.add(path, msg)
	}
}

// replaceWord replaces whole-word occurrences of old in s with new.
func replaceWord(s, old, new string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, old)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(old)
		wordStart := i == 0 || !isWordRune(rune(s[i-1]))
		wordEnd := end == len(s) || !isWordRune(rune(s[end]))
		b.WriteString(s[:i])
		if wordStart && wordEnd {
			b.WriteString(new)
		} else {
			b.WriteString(old)
		}
		s = s[end:]
	}
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }

// snake turns a Go field name into its YAML key: MinSamples -> min_samples,
// CPUTarget -> cpu_target.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && unicode.IsLower(rs[i-1])
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if i > 0 && (prevLower || (nextLower && unicode.IsUpper(rs[i-1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Overload names the stages a policy's shedder: and concurrency: sections
// configure, for WithOverload. A nil field is a stage the service does
// not run: a policy that sets it fails to load in Watch, so a section no
// stage reads never goes unnoticed.
type Overload struct {
	// Shedder takes the shedder: section's capacity, thresholds and
	// adaptive keys.
	Shedder *shedder.Shedder
	// Fleet takes shedder: fleet:.
	Fleet *fleetshed.Shedder
	// Limiter takes concurrency: global: (it must be built WithGlobal).
	Limiter *concurrency.Limiter
	// Adaptive takes concurrency: adaptive:.
	Adaptive *concurrency.Adaptive
}

// WithOverload makes Watch apply each reloaded policy's shedder: and
// concurrency: sections to the stages of o. Each reload is checked against
// the stages first (a CPU target needs a Shedder with a CPU meter, a global
// cap a Limiter built WithGlobal, a section a stage of o); a reload that
// fails leaves the rules and every stage as they were. A stage whose
// section (or key) the file leaves out returns to the settings it had when
// Watch started: the file, when it says something, is the truth, and the
// Go configuration otherwise.
func WithOverload(o Overload) WatchOption {
	return func(c *watchConfig) {
		if o == (Overload{}) {
			c.errs = append(c.errs, errors.New("tiers: WithOverload: no stage given"))
			return
		}
		c.overload = &overloadHook{o: o}
	}
}

// overloadHook applies sections to the stages of o; base is what each
// stage had when the first policy came.
type overloadHook struct {
	o    Overload
	once sync.Once
	base struct {
		shedder  shedder.Config
		fleet    fleetshed.Config
		global   int64
		adaptive concurrency.AdaptiveConfig
	}
}

func (h *overloadHook) capture() {
	h.once.Do(func() {
		if h.o.Shedder != nil {
			h.base.shedder = h.o.Shedder.Config()
		}
		if h.o.Fleet != nil {
			h.base.fleet = h.o.Fleet.Config()
		}
		if h.o.Limiter != nil {
			h.base.global = h.o.Limiter.Global()
		}
		if h.o.Adaptive != nil {
			h.base.adaptive = h.o.Adaptive.Config()
		}
	})
}

// settings returns what each stage is to be set to under p.
func (h *overloadHook) settings(p *Policy) (sc shedder.Config, fc fleetshed.Config, global int64, ac concurrency.AdaptiveConfig) {
	sc, fc, global, ac = h.base.shedder, h.base.fleet, h.base.global, h.base.adaptive
	if s := p.Shedder; s != nil {
		if s.Config != nil {
			sc = *s.Config
		}
		if s.Fleet != nil {
			fc = *s.Fleet
		}
	}
	if c := p.Concurrency; c != nil {
		if c.Global > 0 {
			global = c.Global
		}
		if c.Adaptive != nil {
			ac = *c.Adaptive
		}
	}
	return sc, fc, global, ac
}

// check reports, as a *PolicyError, whatever in p's sections the stages of
// h would refuse.
func (h *overloadHook) check(p *Policy) error {
	h.capture()
	rep := &reporter{lines: map[string]int{}}
	if p.Shedder != nil {
		maps.Copy(rep.lines, p.Shedder.lines)
	}
	if p.Concurrency != nil {
		maps.Copy(rep.lines, p.Concurrency.lines)
	}
	missing := func(path, what, field string) {
		rep.addf(path, "the policy sets %s, but Watch was given none (tiers.Overload.%s)", what, field)
	}
	sc, fc, _, ac := h.settings(p)
	if s := p.Shedder; s != nil {
		if s.Config != nil {
			if h.o.Shedder == nil {
				missing("shedder", "a Shedder", "Shedder")
			} else {
				reportStage(rep, "shedder", h.o.Shedder.Check(sc))
			}
		}
		if s.Fleet != nil {
			if h.o.Fleet == nil {
				missing("shedder.fleet", "a Fleet", "Fleet")
			} else {
				reportStage(rep, "shedder.fleet", h.o.Fleet.Check(fc))
			}
		}
	}
	if c := p.Concurrency; c != nil {
		if c.Global > 0 {
			if h.o.Limiter == nil {
				missing("concurrency.global", "a Limiter's global cap", "Limiter")
			} else if h.o.Limiter.Global() == 0 {
				rep.add("concurrency.global", "the Limiter was built without WithGlobal, so it has no global cap to set")
			}
		}
		if c.Adaptive != nil {
			if h.o.Adaptive == nil {
				missing("concurrency.adaptive", "an adaptive limiter", "Adaptive")
			} else {
				reportStage(rep, "concurrency.adaptive", ac.Validate())
			}
		}
	}
	return rep.err()
}

// apply sets every stage of h to its settings under p (checked).
func (h *overloadHook) apply(p *Policy) error {
	sc, fc, global, ac := h.settings(p)
	var errs []error
	if h.o.Shedder != nil {
		errs = append(errs, h.o.Shedder.Reconfigure(sc))
	}
	if h.o.Fleet != nil {
		errs = append(errs, h.o.Fleet.Reconfigure(fc))
	}
	if h.o.Limiter != nil && global > 0 {
		errs = append(errs, h.o.Limiter.SetGlobal(global))
	}
	if h.o.Adaptive != nil {
		errs = append(errs, h.o.Adaptive.Reconfigure(ac))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tiers: applying the shedder and concurrency sections: %w", err)
	}
	return nil
}
