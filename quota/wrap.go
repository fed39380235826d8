package quota

import "iter"

// maxLayers bounds the Unwrap chain Layers follows, so that a wrapper
// whose Unwrap returns itself (or a cycle) cannot hang a capability check.
const maxLayers = 64

// Layers yields s and then every store beneath it along the Unwrap chain:
// s.Unwrap(), its Unwrap(), and so on, until a store that does not wrap
// another (no Unwrap() Store method, or one returning nil). It is what
// capability checks walk (Settles, package tiers's checks, package
// tiers/localfirst's check of its ledger). It stops after 64 stores.
func Layers(s Store) iter.Seq[Store] {
	return func(yield func(Store) bool) {
		for range maxLayers {
			if s == nil || !yield(s) {
				return
			}
			w, ok := s.(interface{ Unwrap() Store })
			if !ok {
				return
			}
			s = w.Unwrap()
		}
	}
}
