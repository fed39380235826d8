package sdktest

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// TestSkippedAttribute: a decision that skipped rules for lack of identity
// says which on the span and its event; one that skipped none has no such
// attribute.
func TestSkippedAttribute(t *testing.T) {
	h := newHarness(t)
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "skipped")
	r := &floodgate.Request{Method: "/auth.v1.Auth/Login"}
	h.obs.Observe(ctx, r, floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "login-ip", Source: floodgate.SourceStore,
		Limit: 20, Remaining: 19, Skipped: "login-ip-user,login-user"}, nil)
	span.End()
	ctx, span = h.tp.Tracer("test").Start(context.Background(), "none")
	h.obs.Observe(ctx, r, floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "login-ip", Source: floodgate.SourceStore, Limit: 20, Remaining: 18}, nil)
	span.End()

	spans := h.rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	got := attrMap(spans[0].Attributes())["floodgate.skipped"]
	if got != "STRING:login-ip-user,login-user" {
		t.Errorf("span floodgate.skipped = %q", got)
	}
	if ev := spans[0].Events(); len(ev) != 1 || attrMap(ev[0].Attributes)["floodgate.skipped"] != got {
		t.Errorf("events %+v lack floodgate.skipped", ev)
	}
	if v, ok := attrMap(spans[1].Attributes())["floodgate.skipped"]; ok {
		t.Errorf("a decision that skipped nothing has floodgate.skipped %q", v)
	}
}
