package floodgate_test

import (
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

func TestDecisionQuotas(t *testing.T) {
	var d floodgate.Decision
	if d.Quotas() != nil {
		t.Fatal("zero Decision has quotas")
	}
	qs := []floodgate.Quota{
		{Policy: "plan/1m", Limit: 10, Window: time.Minute, Violated: true, RetryAfter: 6 * time.Second},
		{Policy: "plan/24h", Limit: 1000, Window: 24 * time.Hour, Remaining: 990},
	}
	d.SetQuotas(qs)
	if got := d.Quotas(); !slices.Equal(got, qs) {
		t.Fatalf("Quotas = %+v", got)
	}
	// A copy shares them, and Decision is still comparable with ==.
	c := d
	if c != d || !slices.Equal(c.Quotas(), qs) {
		t.Fatal("a copy does not carry the quotas")
	}
	d.SetQuotas(nil)
	if d.Quotas() != nil || d == c {
		t.Fatal("SetQuotas(nil) did not clear")
	}
	d.SetQuotas([]floodgate.Quota{})
	if d.Quotas() != nil {
		t.Fatal("SetQuotas(empty) did not clear")
	}
}

func TestRequestHeader(t *testing.T) {
	r := &floodgate.Request{Headers: []floodgate.Header{{Name: "x-a", Value: "1"}, {Name: "x-b", Value: "2"}}}
	for name, want := range map[string]string{"x-a": "1", "x-b": "2", "x-c": "", "X-A": ""} {
		if got := r.Header(name); got != want {
			t.Errorf("Header(%q) = %q, want %q", name, got, want)
		}
	}
	if (&floodgate.Request{}).Header("x-a") != "" {
		t.Error("a Request without headers has one")
	}
}
