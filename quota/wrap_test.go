package quota_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/quota"
)

// layer wraps next (nil: the bottom store).
type layer struct{ next quota.Store }

func (layer) Take(context.Context, []quota.Bucket, []quota.Result) (bool, error) { return true, nil }
func (l *layer) Unwrap() quota.Store {
	if l.next == nil {
		return nil
	}
	return l.next
}

// settling is a Settler that wraps next and forwards Settle.
type settling struct {
	layer
	can *bool // CanSettle's answer; nil: no such method is consulted
}

func (settling) Settle(context.Context, []quota.Bucket, []quota.Result) error { return nil }
func (s *settling) Unwrap() quota.Store                                       { return s.layer.Unwrap() }
func (s *settling) CanSettle() bool                                           { return s.can == nil || *s.can }

// TestLayers: s first, then each Unwrap, ending at a store that wraps
// nothing; a cycle stops after 64 stores.
func TestLayers(t *testing.T) {
	bottom := &layer{}
	mid := &layer{next: bottom}
	top := &layer{next: mid}
	var got []quota.Store
	for l := range quota.Layers(top) {
		got = append(got, l)
	}
	if len(got) != 3 || got[0] != top || got[1] != mid || got[2] != bottom {
		t.Fatalf("Layers = %v, want top, mid, bottom", got)
	}
	cyc := &layer{}
	cyc.next = cyc
	n := 0
	for range quota.Layers(cyc) {
		n++
	}
	if n != 64 {
		t.Fatalf("a cycle yielded %d stores, want 64", n)
	}
	for range quota.Layers(nil) {
		t.Fatal("Layers(nil) yielded a store")
	}
}

// TestSettlesFollowsUnwrap: a Settler over a store that is not one cannot
// settle, however many Settlers lie between; over Settlers it can, unless
// a layer's CanSettle says no.
func TestSettlesFollowsUnwrap(t *testing.T) {
	no := false
	cases := []struct {
		name string
		s    quota.Store
		want bool
	}{
		{"settler", &settling{}, true},
		{"settler over settler", &settling{layer: layer{next: &settling{}}}, true},
		{"settler over settler over a plain store", &settling{layer: layer{next: &settling{layer: layer{next: &layer{}}}}}, false},
		{"plain wrapper over a settler", &layer{next: &settling{}}, false},
		{"settler saying it cannot", &settling{can: &no}, false},
		{"settler over one saying it cannot", &settling{layer: layer{next: &settling{can: &no}}}, false},
	}
	for _, c := range cases {
		if got := quota.Settles(c.s); got != c.want {
			t.Errorf("%s: Settles = %v, want %v", c.name, got, c.want)
		}
	}
}
