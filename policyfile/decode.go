package policyfile

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
)

// adaptiveCapacityKeys are the keys of a shedder.AdaptiveCapacity.
var adaptiveCapacityKeys = []string{"min", "max", "window", "min_samples", "history", "probe", "tolerance", "headroom", "growth", "backoff", "cpu_target", "memory_target"}

// waitKeys are the keys of a concurrency.Wait.
var waitKeys = []string{"max", "queue", "order", "target", "interval", "fairness"}

// fairnessKeys are the keys of a floodgate.Fairness; its weights: is a
// mapping of plan tiers to numbers (freeForm).
var fairnessKeys = []string{"by", "weights"}

// freeForm are the mappings whose keys are names of the user's (plan
// tiers), not fields: the decoder takes any.
var freeForm = map[string]bool{
	"shedder.fairness.weights":                   true,
	"shedder.fleet.fairness.weights":             true,
	"concurrency.wait.fairness.weights":          true,
	"concurrency.adaptive.wait.fairness.weights": true,
}

// schema lists the keys of every mapping of the shedder: and concurrency:
// sections, by path. The decoder accepts exactly these keys, and a test
// holds the package documentation to them.
var schema = map[string][]string{
	"shedder":                   {"capacity", "thresholds", "adaptive", "retries", "fairness", "fleet"},
	"shedder.fairness":          fairnessKeys,
	"shedder.thresholds":        {"test", "read", "write"},
	"shedder.retries":           {"margin", "attempt_header"},
	"shedder.adaptive":          adaptiveCapacityKeys,
	"shedder.fleet":             {"capacity", "reserve", "adaptive", "fairness"},
	"shedder.fleet.fairness":    fairnessKeys,
	"shedder.fleet.adaptive":    adaptiveCapacityKeys,
	"concurrency":               {"global", "wait", "adaptive", "per_key"},
	"concurrency.wait":          waitKeys,
	"concurrency.wait.fairness": fairnessKeys,
	"concurrency.per_key":       {"name", "key", "cap", "max_keys"},
	"concurrency.adaptive": {"name", "algorithm", "initial", "min", "max", "window", "min_samples", "max_samples",
		"percentile", "backoff", "retry_after", "bypass", "smoothing", "tolerance", "long_window", "alpha", "beta",
		"probe_every", "timeout", "wait"},
	"concurrency.adaptive.wait":          waitKeys,
	"concurrency.adaptive.wait.fairness": fairnessKeys,
	"identity":                           {"user", "tenant", "api_key", "tier", "client_ip"},
	"identity.client_ip":                 {"header", "trusted_proxies", "ipv4_prefix", "ipv6_prefix"},
	// outbound: also holds the rate-limit keys of outboundPolicyKeys,
	// which package tiers decodes.
	"outbound":          {"cooldown"},
	"outbound.cooldown": {"default", "max", "sync"},
}

// reporter collects the errors of the sections, with the line of every
// path decoded.
type reporter struct {
	errs  []*tiers.FieldError
	lines map[string]int      // path -> line
	bad   map[string]struct{} // paths with decode errors
}

func newReporter() *reporter {
	return &reporter{lines: map[string]int{}, bad: map[string]struct{}{}}
}

// fail records a decode error at path, at n's line, and suppresses the
// validation errors under path.
func (r *reporter) fail(path string, n *yaml.Node, format string, args ...any) {
	r.bad[path] = struct{}{}
	r.errs = append(r.errs, &tiers.FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Line: n.Line})
}

// add records a validation error at path, at the line of path or of its
// nearest parent decoded, unless a decode error is at path or above.
func (r *reporter) add(path, msg string) {
	line := 0
	for q := path; ; q = parent(q) {
		if _, ok := r.bad[q]; ok {
			return
		}
		if l, ok := r.lines[q]; ok && line == 0 {
			line = l
		}
		if q == "" {
			break
		}
	}
	r.errs = append(r.errs, &tiers.FieldError{Path: path, Msg: msg, Line: line})
}

// parent strips the last key of a path: "shedder.adaptive.max" ->
// "shedder.adaptive", "concurrency.per_key[0].cap" ->
// "concurrency.per_key[0]" -> "concurrency".
func parent(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// decoder decodes the shedder: and concurrency: sections into a File.
type decoder struct {
	rep *reporter
}

// fields walks the mapping n at path, calling set for each key of
// schema[path] and reporting unknown and repeated keys and aliases.
func (d *decoder) fields(n *yaml.Node, path string, set func(key string, v *yaml.Node, fp string)) {
	if !d.kind(n, path, yaml.MappingNode, "a mapping") {
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.rep.fail(path, k, "keys must be plain strings, got %s", kindName(k))
			continue
		}
		fp := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.rep.fail(fp, k, "repeated field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode {
			d.rep.fail(fp, v, "YAML aliases are not supported")
			continue
		}
		d.rep.lines[fp] = v.Line
		if !known(path, k.Value) {
			d.rep.fail(fp, k, "unknown field")
			continue
		}
		set(k.Value, v, fp)
	}
}

func known(path, key string) bool {
	for _, k := range schema[schemaPath(path)] {
		if k == key {
			return true
		}
	}
	return false
}

func (d *decoder) kind(n *yaml.Node, path string, want yaml.Kind, wantName string) bool {
	if n.Kind == want {
		return true
	}
	if n.Kind == yaml.AliasNode {
		d.rep.fail(path, n, "YAML aliases are not supported")
		return false
	}
	d.rep.fail(path, n, "must be %s, got %s", wantName, kindName(n))
	return false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "a document"
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.rep.fail(path, n, "must be a string, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

// integer decodes an integer >= 1.
func (d *decoder) integer(n *yaml.Node, path string) int64 {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.rep.fail(path, n, "must be an integer, got %s", kindName(n))
		return 0
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		d.rep.fail(path, n, "%q is not a 64-bit integer", n.Value)
		return 0
	}
	if v < 1 {
		d.rep.fail(path, n, "%d must be at least 1", v)
		return 0
	}
	return v
}

// count decodes a count >= 1 that fits an int.
func (d *decoder) count(n *yaml.Node, path string) int {
	v := d.integer(n, path)
	if v > 1<<31-1 {
		d.rep.fail(path, n, "%d is too large", v)
		return 0
	}
	return int(v)
}

// number decodes a positive number (integer or decimal). 0 and negative
// values are refused: in these sections 0 would silently mean "the
// default".
func (d *decoder) number(n *yaml.Node, path string) float64 {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") {
		d.rep.fail(path, n, "must be a number, got %s", kindName(n))
		return 0
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || v != v {
		d.rep.fail(path, n, "%q is not a number", n.Value)
		return 0
	}
	if v <= 0 {
		d.rep.fail(path, n, "%v must be greater than 0 (leave the key out for the default)", v)
		return 0
	}
	return v
}

// duration decodes a positive duration written as a string ("100ms").
func (d *decoder) duration(n *yaml.Node, path string) time.Duration {
	s, ok := d.str(n, path)
	if !ok {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		d.rep.fail(path, n, "%q is not a positive duration such as 100ms", s)
		return 0
	}
	return v
}

// priority decodes a priority name.
func (d *decoder) priority(n *yaml.Node, path string) floodgate.Priority {
	s, ok := d.str(n, path)
	if !ok {
		return 0
	}
	p, err := floodgate.ParsePriority(s)
	if err != nil {
		d.rep.fail(path, n, "unknown priority %q (want critical, write, read or test)", s)
	}
	return p
}

// shedder decodes the shedder: section at n.
func (d *decoder) shedder(n *yaml.Node, f *File) {
	const path = "shedder"
	var cfg shedder.Config
	instance := false
	d.fields(n, path, func(k string, v *yaml.Node, fp string) {
		switch k {
		case "capacity":
			cfg.Capacity = d.integer(v, fp)
		case "thresholds":
			instance = true
			cfg.Thresholds = shedder.Thresholds{Test: shedder.DefaultTestThreshold, Read: shedder.DefaultReadThreshold, Write: shedder.DefaultWriteThreshold}
			d.fields(v, fp, func(tk string, tv *yaml.Node, tp string) {
				switch tk {
				case "test":
					cfg.Thresholds.Test = d.number(tv, tp)
				case "read":
					cfg.Thresholds.Read = d.number(tv, tp)
				case "write":
					cfg.Thresholds.Write = d.number(tv, tp)
				}
			})
		case "adaptive":
			cfg.Adaptive = d.adaptiveCapacity(v, fp)
		case "retries":
			instance = true
			cfg.Retries = &shedder.Retries{}
			d.fields(v, fp, func(rk string, rv *yaml.Node, rp string) {
				switch rk {
				case "margin":
					cfg.Retries.Margin = d.number(rv, rp)
				case "attempt_header":
					cfg.Retries.AttemptHeader, _ = d.str(rv, rp)
				}
			})
		case "fairness":
			instance = true
			cfg.Fairness = d.fairness(v, fp)
		case "fleet":
			f.Fleet = d.fleet(v, fp)
		}
	})
	if cfg.Capacity == 0 && !instance && cfg.Adaptive == nil {
		return
	}
	switch {
	case cfg.Capacity == 0 && cfg.Adaptive != nil:
		cfg.Capacity = max(cfg.Adaptive.Min, 1)
	case cfg.Capacity == 0:
		d.rep.fail(join(path, "capacity"), n, "required: a fixed capacity, or adaptive: for one that follows the service")
	}
	f.Shedder = &cfg
}

// fairness decodes a floodgate.Fairness: by: and weights:, a mapping of
// plan tiers to positive numbers.
func (d *decoder) fairness(n *yaml.Node, path string) *floodgate.Fairness {
	f := &floodgate.Fairness{}
	d.fields(n, path, func(k string, v *yaml.Node, fp string) {
		switch k {
		case "by":
			f.By, _ = d.str(v, fp)
		case "weights":
			if !d.kind(v, fp, yaml.MappingNode, "a mapping of plan tiers to weights") {
				return
			}
			f.Weights = map[string]float64{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				tk, tv := v.Content[i], v.Content[i+1]
				if tk.Kind != yaml.ScalarNode {
					d.rep.fail(fp, tk, "keys must be plain strings, got %s", kindName(tk))
					continue
				}
				tp := join(fp, tk.Value)
				if _, dup := f.Weights[tk.Value]; dup {
					d.rep.fail(tp, tk, "repeated tier")
					continue
				}
				d.rep.lines[tp] = tv.Line
				f.Weights[tk.Value] = d.number(tv, tp)
			}
		}
	})
	return f
}

func (d *decoder) adaptiveCapacity(n *yaml.Node, path string) *shedder.AdaptiveCapacity {
	a := &shedder.AdaptiveCapacity{}
	d.fields(n, path, func(k string, v *yaml.Node, fp string) {
		switch k {
		case "min":
			a.Min = d.integer(v, fp)
		case "max":
			a.Max = d.integer(v, fp)
		case "window":
			a.Window = d.duration(v, fp)
		case "min_samples":
			a.MinSamples = d.count(v, fp)
		case "history":
			a.History = d.count(v, fp)
		case "probe":
			a.Probe = d.duration(v, fp)
		case "tolerance":
			a.Tolerance = d.number(v, fp)
		case "headroom":
			a.Headroom = d.number(v, fp)
		case "growth":
			a.Growth = d.number(v, fp)
		case "backoff":
			a.Backoff = d.number(v, fp)
		case "cpu_target":
			a.CPUTarget = d.number(v, fp)
		case "memory_target":
			a.MemoryTarget = d.number(v, fp)
		}
	})
	return a
}

// concurrency decodes the concurrency: section at n.
func (d *decoder) concurrency(n *yaml.Node, f *File) {
	d.fields(n, "concurrency", func(k string, v *yaml.Node, fp string) {
		switch k {
		case "global":
			f.Global = d.integer(v, fp)
		case "wait":
			f.Wait = d.wait(v, fp)
		case "adaptive":
			f.Adaptive = d.adaptiveConcurrency(v, fp)
		case "per_key":
			f.PerKey = d.perKey(v, fp)
		}
	})
}

func (d *decoder) adaptiveConcurrency(n *yaml.Node, path string) *concurrency.AdaptiveConfig {
	a := &concurrency.AdaptiveConfig{}
	d.fields(n, path, func(k string, v *yaml.Node, fp string) {
		switch k {
		case "name":
			a.Name, _ = d.str(v, fp)
		case "algorithm":
			if s, ok := d.str(v, fp); ok {
				var alg concurrency.AdaptiveAlgorithm
				err := alg.UnmarshalText([]byte(s))
				if err != nil {
					d.rep.fail(fp, v, "unknown algorithm %q (want gradient2, vegas or aimd)", s)
				}
				a.Algorithm = alg
			}
		case "initial":
			a.Initial = d.integer(v, fp)
		case "min":
			a.Min = d.integer(v, fp)
		case "max":
			a.Max = d.integer(v, fp)
		case "window":
			a.Window = d.duration(v, fp)
		case "min_samples":
			a.MinSamples = d.count(v, fp)
		case "max_samples":
			a.MaxSamples = d.count(v, fp)
		case "percentile":
			a.Percentile = d.number(v, fp)
		case "backoff":
			a.Backoff = d.number(v, fp)
		case "retry_after":
			a.RetryAfter = d.duration(v, fp)
		case "bypass":
			a.Bypass = d.priority(v, fp)
		case "smoothing":
			a.Smoothing = d.number(v, fp)
		case "tolerance":
			a.Tolerance = d.number(v, fp)
		case "long_window":
			a.LongWindow = d.count(v, fp)
		case "alpha":
			a.Alpha = d.number(v, fp)
		case "beta":
			a.Beta = d.number(v, fp)
		case "probe_every":
			a.ProbeEvery = d.count(v, fp)
		case "timeout":
			a.Timeout = d.duration(v, fp)
		case "wait":
			if w := d.wait(v, fp); w != nil {
				a.Wait = *w
			}
		}
	})
	return a
}

// wait decodes a concurrency.Wait: max, queue, order.
func (d *decoder) wait(n *yaml.Node, path string) *concurrency.Wait {
	w := &concurrency.Wait{}
	d.fields(n, path, func(k string, v *yaml.Node, fp string) {
		switch k {
		case "max":
			w.Max = d.duration(v, fp)
		case "queue":
			w.Queue = d.count(v, fp)
		case "target":
			w.Target = d.duration(v, fp)
		case "interval":
			w.Interval = d.duration(v, fp)
		case "fairness":
			w.Fairness = d.fairness(v, fp)
		case "order":
			if s, ok := d.str(v, fp); ok {
				if err := w.Order.UnmarshalText([]byte(s)); err != nil {
					d.rep.fail(fp, v, "unknown order %q (want fifo, lifo or codel)", s)
				}
			}
		}
	})
	return w
}
