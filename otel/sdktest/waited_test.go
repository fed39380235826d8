package sdktest

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// TestWaitedAttribute: a decision a max_wait rule held says for how long
// on the span and its event; one that did not wait has no such attribute.
func TestWaitedAttribute(t *testing.T) {
	h := newHarness(t)
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "waited")
	r := &floodgate.Request{Method: "/shop.v1.Shop/Search"}
	h.obs.Observe(ctx, r, floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "tenant-requests", Source: floodgate.SourceStore,
		Limit: 50, Remaining: 0, Waited: 120 * time.Millisecond}, nil)
	span.End()
	ctx, span = h.tp.Tracer("test").Start(context.Background(), "none")
	h.obs.Observe(ctx, r, floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "tenant-requests", Source: floodgate.SourceStore, Limit: 50, Remaining: 3}, nil)
	span.End()

	spans := h.rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	got := attrMap(spans[0].Attributes())["floodgate.waited"]
	if got != "FLOAT64:0.12" {
		t.Errorf("span floodgate.waited = %q, want FLOAT64:0.12", got)
	}
	if ev := spans[0].Events(); len(ev) != 1 || attrMap(ev[0].Attributes)["floodgate.waited"] != got {
		t.Errorf("events %+v lack floodgate.waited", ev)
	}
	if v, ok := attrMap(spans[1].Attributes())["floodgate.waited"]; ok {
		t.Errorf("a decision that did not wait has floodgate.waited %q", v)
	}
}
