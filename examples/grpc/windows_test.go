package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// TestGRPCExampleWindows: a free tenant's calls (each from another user,
// so that no per-user rule binds) are denied after the burst of its
// plan's minute window, and the status's QuotaFailure and ErrorInfo name
// that window, "tenant-plan/1m".
func TestGRPCExampleWindows(t *testing.T) {
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0",
		"-policy", "../policy.yaml", "-work", "1ms", "-redis", "")
	addr := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	shop := shoppb.NewShopClient(dial(t, addr))
	var denied error
	n := 0
	for n = 1; n <= 20 && denied == nil; n++ {
		cctx := metadata.AppendToOutgoingContext(ctx, "x-user", "u"+strconv.Itoa(n), "x-tenant", "t-free", "x-tier", "free")
		_, denied = shop.Search(cctx, &shoppb.SearchRequest{Query: "lamp"})
	}
	if status.Code(denied) != codes.ResourceExhausted || n-1 < 11 {
		t.Fatalf("after %d calls: %v, want RESOURCE_EXHAUSTED after the burst of 10", n-1, denied)
	}
	var quota *errdetails.QuotaFailure
	var info *errdetails.ErrorInfo
	for _, d := range status.Convert(denied).Details() {
		switch d := d.(type) {
		case *errdetails.QuotaFailure:
			quota = d
		case *errdetails.ErrorInfo:
			info = d
		}
	}
	if quota == nil || len(quota.Violations) != 1 || quota.Violations[0].QuotaId != "tenant-plan/1m" || quota.Violations[0].QuotaValue != 10 ||
		quota.Violations[0].Description != "rate limit of 10 per 1m0s exceeded" {
		t.Errorf("QuotaFailure = %v", quota)
	}
	if info == nil || info.Metadata["policy"] != "tenant-plan/1m" || info.Metadata["window_seconds"] != "60" {
		t.Errorf("ErrorInfo = %v", info)
	}
}
