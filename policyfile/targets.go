package policyfile

import (
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
)

// base is what each stage of a Targets had when Watch started: a stage
// whose section the file leaves out returns to it.
type base struct {
	shedder  shedder.Config
	fleet    *fleetshed.Config
	global   int64
	perKey   []concurrency.PerKey
	wait     concurrency.Wait
	adaptive concurrency.AdaptiveConfig
}

func capture(t Targets) base {
	var b base
	if t.Shedder != nil {
		b.shedder = t.Shedder.Config()
	}
	b.fleet = fleetBase(t)
	if t.Concurrency != nil {
		b.global = t.Concurrency.Global()
		b.perKey = t.Concurrency.PerKeyCaps()
		b.wait = t.Concurrency.Wait()
	}
	if t.Adaptive != nil {
		b.adaptive = t.Adaptive.Config()
	}
	return b
}

// missing reports that the file sets what of a stage that t has none of.
func missing(rep *reporter, path, what, target string) {
	rep.add(path, fmt.Sprintf("the file sets %s settings, but Watch was given none (Targets.%s)", what, target))
}

// check reports, as a *tiers.PolicyError, whatever in f's sections the
// stages of t would refuse or that t has no stage for.
func check(t Targets, f *File) error {
	rep := newReporter()
	rep.lines = f.lines
	if f.Shedder != nil {
		if t.Shedder == nil {
			missing(rep, "shedder", "a Shedder's", "Shedder")
		} else {
			stageErrors(rep, "shedder", t.Shedder.Check(*f.Shedder))
		}
	}
	checkFleet(rep, t, f)
	if f.Global > 0 {
		switch {
		case t.Concurrency == nil:
			missing(rep, "concurrency.global", "a concurrency Limiter's", "Concurrency")
		case t.Concurrency.Global() == 0:
			rep.add("concurrency.global", "the Limiter was built without WithGlobal, so it has no global cap to set")
		}
	}
	checkPerKey(rep, t, f)
	if f.Wait != nil {
		if t.Concurrency == nil {
			missing(rep, "concurrency.wait", "a concurrency Limiter's", "Concurrency")
		} else {
			stageErrors(rep, "concurrency.wait", f.Wait.Validate())
		}
	}
	if f.Adaptive != nil {
		if t.Adaptive == nil {
			missing(rep, "concurrency.adaptive", "an adaptive limiter's", "Adaptive")
		} else {
			stageErrors(rep, "concurrency.adaptive", f.Adaptive.Validate())
		}
	}
	if f.Outbound != nil && t.Outbound == nil {
		missing(rep, "outbound", "an outbound Limiter's", "Outbound")
	}
	switch {
	case t.Identity == nil && f.Identity != nil:
		missing(rep, "identity", "a transport's identity", "Identity")
	case t.Identity != nil && !sameIdentity(t.Identity, f.Identity):
		rep.add("identity", "differs from the section the transport was built with, which reads identities as it was built: restart the service to apply it")
	}
	if len(rep.errs) > 0 {
		return inFileOrder(rep.errs)
	}
	return nil
}

// apply sets every stage of t to its settings under f (checked), or to
// its base when f leaves its section out.
func apply(t Targets, f *File, b base) error {
	var errs []error
	if t.Shedder != nil {
		c := b.shedder
		if f.Shedder != nil {
			c = *f.Shedder
		}
		errs = append(errs, t.Shedder.Reconfigure(c))
	}
	errs = append(errs, applyFleet(t, f, b.fleet))
	if t.Concurrency != nil {
		g := b.global
		if f.Global > 0 {
			g = f.Global
		}
		if g > 0 {
			errs = append(errs, t.Concurrency.SetGlobal(g))
		}
		w := b.wait
		if f.Wait != nil {
			w = *f.Wait
		}
		errs = append(errs, t.Concurrency.SetWait(w))
		errs = append(errs, applyPerKey(t, f, b.perKey)...)
	}
	if t.Adaptive != nil {
		c := b.adaptive
		if f.Adaptive != nil {
			c = *f.Adaptive
		}
		errs = append(errs, t.Adaptive.Reconfigure(c))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("policyfile: applying the shedder and concurrency sections: %w", err)
	}
	return nil
}
