package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// With -adaptive the chain holds the adaptive shedder and the adaptive
// in-flight limit: calls are served through them as through the fixed
// stages, and the startup log says where the CPU signal comes from.
func TestGRPCExampleAdaptive(t *testing.T) {
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0",
		"-policy", "../policy.yaml", "-work", "1ms", "-redis", "", "-adaptive")
	addr := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	shop := shoppb.NewShopClient(dial(t, addr))
	for i := range 3 {
		if _, err := shop.Pay(as(ctx, "alice"), &shoppb.PayRequest{AmountCents: 100}); err != nil {
			t.Fatalf("payment %d: %v", i, err)
		}
	}
	if !strings.Contains(out.String(), "adaptive shedder") {
		t.Errorf("no startup line about the adaptive shedder:\n%s", out.String())
	}
}
