package localfirst

import (
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// TestTmplKeepsTheBucket: an entry's tmpl and limit give back the bucket
// it saw, at cost 0, for every field of quota.Bucket but the cost and
// those a leased or async bucket never sets (a window's Span, Admitted).
// A field added to quota.Bucket fails it until tmpl keeps it, or it joins
// the fields never set here.
func TestTmplKeepsTheBucket(t *testing.T) {
	never := map[string]bool{"Cost": true, "Span": true, "Admitted": true}
	b := quota.Bucket{Key: "k", Limit: quota.Limit{Rate: 10, Period: time.Second, Burst: 20, Algorithm: quota.GCRA}, Cost: 3,
		Rule: "r", OnStoreError: quota.FailClosed, CacheDenials: true, Consistency: quota.Async,
		SyncInterval: 50 * time.Millisecond, MaxWait: time.Second, AtMost: true}
	bt := reflect.TypeOf(b)
	bv := reflect.ValueOf(b)
	for i := range bt.NumField() {
		f := bt.Field(i)
		if !never[f.Name] && bv.Field(i).IsZero() {
			t.Fatalf("the test's bucket leaves %s zero: set it, so that tmpl is seen keeping it", f.Name)
		}
	}
	e := &entry{}
	e.t, e.limit = tmplOf(&b), b.Limit
	got, want := e.bucket(), b
	want.Cost = 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bucket() = %+v, want %+v", got, want)
	}
}
