package tiers

import (
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestResolveOverwritesReusedBuckets: release does not clear a scratch's
// buckets, so resolving into buckets left with something in every field
// (every field of quota.Bucket, found by reflection: a field added to it
// later is covered) must give exactly what resolving into fresh ones
// gives, for a keyed rule, a keyless one and a tiered one.
func TestResolveOverwritesReusedBuckets(t *testing.T) {
	t.Parallel()
	p, err := Load([]byte(`
tiers:
  free: {rate: 5/1m}
default_tier: free
rules:
  - {name: user, key: [user], rate: 10/1s}
  - {name: global, rate: 1000/1s}
  - {name: plan, key: [tenant], rate: tier}
`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	c := l.state.Load()
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u1", Tenant: "t1"}, Tier: "free"}
	resolve := func(sc *scratch) []quota.Bucket {
		sc.all, sc.metas = sc.all[:0], sc.metas[:0]
		sc.resolve(c, r, 0, len(c.rules))
		sc.setKeys(0)
		return append([]quota.Bucket(nil), sc.all...)
	}
	want := resolve(newScratch())
	if len(want) != 3 {
		t.Fatalf("resolved %d buckets, want 3: %+v", len(want), want)
	}
	sc := newScratch()
	resolve(sc)
	all := sc.all[:cap(sc.all)]
	for i := range all {
		fill(reflect.ValueOf(&all[i]).Elem())
	}
	if all[0].Span.IsZero() || all[0].Admitted.IsZero() || !all[0].AtMost {
		t.Fatalf("fill left fields zero: %+v", all[0])
	}
	if got := resolve(sc); !reflect.DeepEqual(got, want) {
		t.Errorf("resolved into used buckets:\n%+v\nwant, as into fresh ones:\n%+v", got, want)
	}
}

// fill sets every field of v, recursively, to something not zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2001, 2, 3, 4, 5, 6, 7, time.FixedZone("x", 3600))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString("stale")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(7)
	default:
		panic("fill: no value for kind " + v.Kind().String())
	}
}
