package concurrency

import (
	"errors"
	"strconv"
	"strings"
)

// PerKeyCaps returns the Limiter's per-key caps as they are now, in the
// order New was given them, MaxKeys defaulted; nil without any.
func (l *Limiter) PerKeyCaps() []PerKey {
	var out []PerKey
	for _, k := range l.keys {
		out = append(out, *k.cfg.Load())
	}
	return out
}

// SetPerKey changes the per-key cap named c.Name at run time (a policy
// reload, see package policyfile): its Cap, Key and MaxKeys, checked as
// WithPerKey checks them. A cap cannot be added or removed after New: a
// name the Limiter has no cap of is an error, and nothing changes on any
// error. Requests in flight keep their slots and release them under the
// key they took them with; a request admitted from then on is counted
// under c. When Cap falls below a key's requests in flight, the key's new
// requests are denied until enough have finished; a higher Cap lets
// waiting requests in.
func (l *Limiter) SetPerKey(c PerKey) error {
	o := config{}
	f := o.fields("SetPerKey", "PerKey", c.Name)
	f.checkCap(c.Cap, c.Key)
	if c.MaxKeys < 0 {
		f.bad("MaxKeys", "%d is negative", c.MaxKeys)
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	var k *keyLimit
	names := make([]string, 0, len(l.keys))
	for _, kl := range l.keys {
		name := kl.cfg.Load().Name
		names = append(names, strconv.Quote(name))
		if name == c.Name {
			k = kl
		}
	}
	if k == nil && c.Name != "" {
		have := "none"
		if len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		o.fail("SetPerKey", "the Limiter has no per-key cap %q (its caps: %s); caps are added by New only", c.Name, have)
	}
	if len(o.errs) > 0 {
		return errors.Join(o.errs...)
	}
	k.cfg.Store(&c)
	l.wait.wake() // a higher cap lets waiting requests in
	return nil
}
