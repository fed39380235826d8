package policyfile

import (
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"go.yaml.in/yaml/v3"
)

// The fleet shedder's part of the file: shedder: fleet:, applied to a
// *fleetshed.Shedder. Everything that names the Fleet or its FleetConfig is
// here, but for the File.Fleet and Targets.Fleet fields.

// fleet decodes shedder: fleet: at n.
func (d *decoder) fleet(n *yaml.Node, path string) *fleetshed.Config {
	fc := &fleetshed.Config{}
	d.fields(n, path, func(k string, v *yaml.Node, fp string) {
		switch k {
		case "capacity":
			fc.Capacity = d.integer(v, fp)
		case "reserve":
			fc.Reserve = d.number(v, fp)
		case "adaptive":
			fc.Adaptive = d.adaptiveCapacity(v, fp)
		case "fairness":
			fc.Fairness = d.fairness(v, fp)
		}
	})
	switch {
	case fc.Capacity == 0 && fc.Adaptive != nil:
		fc.Capacity = max(fc.Adaptive.Min, 1)
	case fc.Capacity == 0:
		d.rep.fail(join(path, "capacity"), n, "required: a fixed fleet capacity, or adaptive: for one that follows the fleet")
	}
	return fc
}

// fleetBase is what the Fleet of t had before the first file, nil
// without one.
func fleetBase(t Targets) *fleetshed.Config {
	if t.Fleet == nil {
		return nil
	}
	c := t.Fleet.Config()
	return &c
}

// checkFleet reports what t's Fleet would refuse of the file's fleet
// settings, or that t has none.
func checkFleet(rep *reporter, t Targets, f *File) {
	if f.Fleet == nil {
		return
	}
	if t.Fleet == nil {
		missing(rep, "shedder.fleet", "a Fleet's", "Fleet")
		return
	}
	stageErrors(rep, "shedder.fleet", t.Fleet.Check(*f.Fleet))
}

// applyFleet sets t's Fleet to the file's fleet settings, or to base
// when the file has none.
func applyFleet(t Targets, f *File, base *fleetshed.Config) error {
	if t.Fleet == nil {
		return nil
	}
	c := *base
	if f.Fleet != nil {
		c = *f.Fleet
	}
	return t.Fleet.Reconfigure(c)
}

// validateFleet reports what is wrong with the file's fleet settings.
func validateFleet(rep *reporter, f *File) {
	if f.Fleet != nil {
		stageErrors(rep, "shedder.fleet", f.Fleet.Validate())
	}
}
