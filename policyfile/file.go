package policyfile

import (
	"fmt"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/field"
	"github.com/floodgate-go/floodgate/internal/yamldoc"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"github.com/floodgate-go/floodgate/tiers"
)

// File is what a policy file says: the rate limits, and the settings of
// the stages its shedder: and concurrency: sections configure. A nil (or
// zero) field is a section or key the file leaves out.
//
// A File is read-only once loaded or handed to Watch.
type File struct {
	// Limits is the rate-limit policy: every section of the file but
	// shedder: and concurrency:.
	Limits *tiers.Policy
	// Shedder sets a *shedder.Shedder: the shedder: section's capacity,
	// thresholds and adaptive keys; nil when it has none of them.
	Shedder *shedder.Config
	// Fleet sets a *fleetshed.Shedder: shedder: fleet:.
	Fleet *fleetshed.Config
	// Global is the global cap of a *concurrency.Limiter built
	// WithGlobal: concurrency: global:.
	Global int64
	// PerKey are the per-key caps of that *concurrency.Limiter
	// (concurrency.WithPerKey, Limiter.SetPerKey): concurrency: per_key:.
	// A loaded file's key functions read the identity its key: names.
	PerKey []concurrency.PerKey
	// Wait is how long a request waits for a slot of that
	// *concurrency.Limiter (Limiter.SetWait): concurrency: wait:.
	Wait *concurrency.Wait
	// Adaptive sets a *concurrency.Adaptive: concurrency: adaptive:.
	Adaptive *concurrency.AdaptiveConfig
	// Identity is the identity: section: where the transport finds each
	// part of a request's identity.
	Identity *Identity
	// Outbound is the outbound: section's rate limits: the rules the
	// service's own outgoing calls are charged to (a *tiers.Limiter built
	// over it, Targets.Outbound); nil when the file has no such section.
	// Its rules match an outgoing call's method: "/HOST/PATH" for HTTP,
	// the gRPC full method for gRPC.
	Outbound *tiers.Policy
	// CooldownDefault, CooldownMax and CooldownSync are outbound:
	// cooldown:'s default, max and sync (0: the defaults, 1s, 1m and
	// 100ms): how long a peer's refusal that names no delay stops calls
	// to it, the longest any refusal does, and how stale a replica's
	// knowledge of the fleet's cooldowns may be.
	CooldownDefault, CooldownMax, CooldownSync time.Duration

	lines map[string]int // path -> line of every key of the sections
	// outboundErrs are package tiers' errors of the outbound: section.
	outboundErrs []*tiers.FieldError
}

// LoadFile reads and loads the policy file at path (see Load). Its errors
// start with the path.
func LoadFile(path string) (*File, error) {
	data, err := yamldoc.ReadFile("policyfile", path)
	if err != nil {
		return nil, err
	}
	f, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s:\n%w", path, err)
	}
	return f, nil
}

// Load decodes and validates a policy file of at most 4 MiB: its
// rate-limit sections as tiers.Load does, and its shedder: and
// concurrency: sections (see the package documentation) with the stages'
// own validation. Every problem is reported, in file order, as one
// *tiers.PolicyError whose FieldErrors carry the path and line
// ("shedder.adaptive.max: 5 must be >= min 10, at line 7").
func Load(data []byte) (*File, error) {
	root, ye := yamldoc.Parse(data)
	if ye != nil {
		return nil, &tiers.PolicyError{Errs: []*tiers.FieldError{{Msg: ye.Msg, Line: ye.Line}}}
	}
	f := &File{}
	rep := newReporter()
	limits := f.sections(root, rep)
	f.lines = rep.lines
	var errs []*tiers.FieldError
	p := &tiers.Policy{}
	if err := p.UnmarshalYAML(limits); err != nil {
		pe, ok := err.(*tiers.PolicyError)
		if !ok {
			return nil, err
		}
		errs = append(errs, pe.Errs...)
	}
	f.Limits = p
	if f.Identity != nil {
		f.Identity.applyIdentity(p)
		f.Identity.applyIdentity(f.Outbound)
	}
	f.validate(rep)
	errs = append(errs, f.outboundErrs...)
	errs = append(errs, rep.errs...)
	if len(errs) > 0 {
		return nil, inFileOrder(errs)
	}
	return f, nil
}

// sections decodes the shedder:, concurrency: and identity: sections of root into f
// and returns root without them, for package tiers.
func (f *File) sections(root *yaml.Node, rep *reporter) *yaml.Node {
	if root.Kind != yaml.MappingNode {
		return root // tiers says what a policy must be
	}
	d := &decoder{rep: rep}
	rest := *root
	rest.Content = nil
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || (k.Value != "shedder" && k.Value != "concurrency" && k.Value != "identity" && k.Value != "outbound") {
			rest.Content = append(rest.Content, k, v)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			rep.fail(k.Value, k, "repeated field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode {
			rep.fail(k.Value, v, "YAML aliases are not supported")
			continue
		}
		rep.lines[k.Value] = v.Line
		switch k.Value {
		case "shedder":
			d.shedder(v, f)
		case "concurrency":
			d.concurrency(v, f)
		case "outbound":
			f.outboundErrs = d.outbound(v, f)
		default:
			d.identity(v, f)
		}
	}
	return &rest
}

// Validate reports everything wrong with f, a File built in Go or
// loaded, as a *tiers.PolicyError, or nil: the rate-limit policy's
// mistakes and what the stages' own validation finds in the other
// sections, under the path of each field.
func (f *File) Validate() error {
	var errs []*tiers.FieldError
	if f.Limits != nil {
		if err := f.Limits.Validate(); err != nil {
			pe, ok := err.(*tiers.PolicyError)
			if !ok {
				return err
			}
			errs = append(errs, pe.Errs...)
		}
	}
	if f.Outbound != nil {
		if err := f.Outbound.Validate(); err != nil {
			pe, ok := err.(*tiers.PolicyError)
			if !ok {
				return err
			}
			for _, fe := range pe.Errs {
				c := *fe
				c.Path = join("outbound", fe.Path)
				errs = append(errs, &c)
			}
		}
	}
	rep := newReporter()
	if f.lines != nil {
		rep.lines = f.lines
	}
	f.validate(rep)
	errs = append(errs, rep.errs...)
	if len(errs) > 0 {
		return inFileOrder(errs)
	}
	return nil
}

// validate reports what the stages' validation finds wrong with f's
// sections.
func (f *File) validate(rep *reporter) {
	if f.Shedder != nil {
		stageErrors(rep, "shedder", f.Shedder.Validate())
	}
	validateFleet(rep, f)
	if f.Global < 0 {
		rep.add("concurrency.global", fmt.Sprintf("%d must be at least 1", f.Global))
	}
	validatePerKey(rep, f)
	if f.Wait != nil {
		stageErrors(rep, "concurrency.wait", f.Wait.Validate())
	}
	if f.Adaptive != nil {
		stageErrors(rep, "concurrency.adaptive", f.Adaptive.Validate())
	}
	validateOutbound(rep, f)
}

// stageErrors reports each error of a stage's Validate or Check under
// base, joined with the key path the stage gives it (a *field.Error);
// an error without one is reported at base.
func stageErrors(rep *reporter, base string, err error) {
	fields, other := field.Split(err)
	for _, fe := range fields {
		rep.add(join(base, fe.Path), fe.Err.Error())
	}
	for _, e := range other {
		rep.add(base, e.Error())
	}
}

// inFileOrder returns errs as a *tiers.PolicyError, by line, the errors
// with no line last.
func inFileOrder(errs []*tiers.FieldError) *tiers.PolicyError {
	slices.SortStableFunc(errs, func(a, b *tiers.FieldError) int {
		switch {
		case a.Line == b.Line:
			return 0
		case a.Line == 0:
			return 1
		case b.Line == 0:
			return -1
		}
		return a.Line - b.Line
	})
	return &tiers.PolicyError{Errs: errs}
}
